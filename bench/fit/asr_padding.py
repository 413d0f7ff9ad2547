"""How the frames past a short clip are filled before Whisper's encoder (``core/cascade/asr.py``).

    python -m bench.fit.asr_padding                          # ~4 min: the dev questions, cut 8 ways
    python -m bench.fit.asr_padding --sessions DIR [DIR...]  # + recorded sessions' user audio
    python -m bench.fit.asr_padding --espeak                 # the turn fit's dev clips instead (espeak-ng)
    python -m bench.fit.asr_padding --espeak --min-frames 1000 500 300   # a turn's shortest window

The cascade encodes a short clip over its length + 2 s (at least 10 s), not Whisper's 30 s. Those
frames were zeros; the log-mel of silence at the clip's own level is what Whisper saw in training
(faster-whisper pads the audio). A turn's clip is cut by the VAD on a 32 ms window grid, and a
call's timing moves that grid against the voice, so the same question is transcribed from slightly
different cuts. Here each question of ``bench/sets/answers.py``'s ``dev`` part, spoken by Piper at
its own level and at 2.7x (Chromium's gain control on a call, measured on recorded calls), is cut
as the conversation core cuts it under ``semantic_vad`` (the last pause's segment) at 8 offsets
5 ms apart, and transcribed with each padding (greedy; ``--beam 5`` for a beam search). Heard as spoken: the
words equal the question's (``bench.sets.canonical``: case, punctuation, spelling, digits aside).
``--sessions``: recorded sessions (``data/sessions/sess_*``) whose user audio is the first dev
question, cut the same 8 ways. ``--espeak``: the clips ``bench.fit.turn_fit`` transcribes (the turn
and duplex sets' ``dev`` phrases in espeak-ng's voices, 0.3 s of silence each side), where the
silence made the decoder loop on a few ("Open the garage door. Open the garage door. Open the").
"""

from __future__ import annotations

import argparse
import glob
import json
import time
import wave
from pathlib import Path

import numpy as np

from bench.sets import canonical
from bench.sets.answers import DEV

GAINS = (1.0, 2.7)

OFFSETS = range(0, 960, 120)  # 24 kHz samples: 0-35 ms


def cuts(vad_model, pcm: np.ndarray) -> list[np.ndarray]:
    """The last pause's segment of ``pcm`` (24 kHz float) under semantic_vad, at each offset."""
    from core.conversation import ConversationConfig, TurnDetection
    from core.conversation.audio_input import AudioInput

    out = []
    for offset in OFFSETS:
        heard = AudioInput(vad_model, ConversationConfig(input_sample_rate=24000,
                                                         turn_detection=TurnDetection(type="semantic_vad")))
        x = np.concatenate([np.zeros(24000 + offset, np.float32), pcm, np.zeros(24000, np.float32)])
        last = None
        for i in range(0, x.size, 960):
            for kind, _, segment in heard.process(x[i:i + 960])[1]:
                if kind == "pause":
                    last = segment
        if last is not None:
            out.append(last)
    return out


def recorded(path: str) -> np.ndarray:
    """A recorded session's user audio, in order (24 kHz float)."""
    rec = json.loads((Path(path) / "recording.json").read_text())
    parts = []
    for e in rec["events"]:
        if e["type"] == "user_audio":
            with wave.open(str(Path(path) / e["file"])) as w:
                parts.append(np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768)
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def espeak_clips() -> list[tuple[str, np.ndarray]]:
    """(text, 16 kHz clip) as ``bench.fit.turn_fit.heard`` speaks its dev phrases."""
    from bench.sets.duplex import DEV_COMPLETE as DUPLEX_COMPLETE, DEV_PAUSED, DEV_VOICES
    from bench.sets.turns import DEV_COMPLETE, DEV_OPEN, VOICES
    from core.audio import resample
    from devtools.espeak import espeak

    def clip(text: str, voice: tuple[str, int, int]) -> np.ndarray:
        pad = np.zeros(4800, np.float32)
        return np.concatenate([pad, resample(espeak(text, *voice).astype(np.float32) / 32768, 24000, 16000), pad])

    out = [(text, clip(text, VOICES[(i + k + (2 if i >= 30 else 0)) % len(VOICES)]))
           for k, texts in enumerate((DEV_COMPLETE, DEV_OPEN)) for i, text in enumerate(texts)]
    return out + [(text, clip(text, v)) for text in list(DUPLEX_COMPLETE) + [b for b, _, _ in DEV_PAUSED]
                  for v in DEV_VOICES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", nargs="*", default=[], help="recorded session folders (the first dev question)")
    parser.add_argument("--beam", type=int, default=1, help="beam size (the cascade decodes greedily: 1)")
    parser.add_argument("--espeak", action="store_true", help="the turn fit's espeak-ng dev clips instead")
    parser.add_argument("--min-frames", type=int, nargs="+",
                        help="compare the shipped padding over these shortest windows (mel frames) instead")
    args = parser.parse_args()
    from core.cascade.asr import WhisperAsr, repeats
    from core.cascade.tts import PiperTts
    from core.conversation.vad import SileroModel

    vad, asr, tts = SileroModel(), WhisperAsr(), PiperTts()
    cases: list[tuple[str, np.ndarray]] = espeak_clips() if args.espeak else []
    for q in ([] if args.espeak else DEV):
        pcm = np.frombuffer(b"".join(tts.synthesize(q.text, deterministic=True)), "<i2").astype(np.float32) / 32768
        for gain in GAINS:
            cases += [(q.text, c) for c in cuts(vad, np.clip(pcm * gain, -1, 1))]
    for folder in (p for pattern in args.sessions for p in glob.glob(pattern)):
        cases += [(DEV[0].text, c) for c in cuts(vad, recorded(folder))]
    print(f"{len(cases)} cuts, beam {args.beam}")
    asr._model = _Beam(asr._whisper.model, args.beam)
    decode = asr._decode_window
    variants = {
        "zeros (before issue 44)": lambda samples: decode(samples, False),
        "silence": lambda samples: decode(samples, True),
        "silence, a loop decoded again over zeros (shipped)": None,
    }
    windows = {name: (window, asr.min_frames) for name, window in variants.items()}
    if args.min_frames:  # the shipped padding, over each shortest window
        windows = {f"shortest window {n} frames": (None, n) for n in args.min_frames}
    for name, (window, min_frames) in windows.items():
        asr.min_frames = min_frames
        asr._transcribe_window = window or type(asr)._transcribe_window.__get__(asr)
        t0 = time.perf_counter()
        wrong: dict[str, int] = {}
        loops: list[str] = []
        for text, clip in cases:
            heard = asr.transcribe(clip).text
            if canonical(heard) != canonical(text):
                wrong[text] = wrong.get(text, 0) + 1
            if repeats(heard):
                loops.append(heard)
        ms = (time.perf_counter() - t0) / len(cases) * 1000
        print(f"{name}: heard as spoken {len(cases) - sum(wrong.values())}/{len(cases)}, {ms:.0f} ms a cut; "
              f"loops {len(loops)} {loops}; wrong: {wrong}")


class _Beam:
    """The CTranslate2 Whisper model with every ``generate`` at ``beam_size``."""

    def __init__(self, model, beam: int) -> None:
        self._model, self._beam = model, beam

    def generate(self, *args, **kwargs):
        kwargs["beam_size"] = self._beam
        return self._model.generate(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


if __name__ == "__main__":
    main()
