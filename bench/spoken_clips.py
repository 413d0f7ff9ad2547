"""Spoken clips for the turn-taking benchmarks: an item's phrases spoken by espeak-ng (a pause
between the two pieces of a paused item), cached as a WAV plus a JSON sidecar with the marks.

``bench/turn_set.py`` and ``bench/duplex_set.py`` hold the items; both speak and cache them here.
Each piece is resampled to 24 kHz and trimmed to its voiced span (``devtools.espeak``), so a
clip's first sample is the voice's onset and its last the last voiced sample.
"""

from __future__ import annotations

import json
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.files import atomic_write_bytes
from core.media import write_wav
from devtools.espeak import VOICED, espeak

RATE = 24000


@dataclass(frozen=True, slots=True)
class Clip:
    item: Any  # the set's item: id, kind, parts, pause_s, voice, speed, pitch, key()
    pcm: np.ndarray  # int16, mono, RATE; pcm[0] is the onset (first voiced sample)
    last_voiced: int  # sample index of the last voiced sample
    pause_start: int | None  # paused items: first silent sample of the pause
    resume: int | None  # paused items: first voiced sample after it
    path: Path

    @property
    def seconds(self) -> float:
        return self.pcm.size / RATE


def _load(item: Any, wav_path: Path, meta_path: Path) -> Clip | None:
    try:
        meta = json.loads(meta_path.read_text())
        with wave.open(str(wav_path), "rb") as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
                return None
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
    except (OSError, ValueError, EOFError, wave.Error):
        return None
    if pcm.size != meta.get("samples"):
        return None
    return Clip(item, pcm, meta["last_voiced"], meta["pause_start"], meta["resume"], wav_path)


def spoken(item: Any, cache: Path, meta: dict[str, Any] | None = None) -> Clip:
    """``item`` as PCM16 24 kHz mono, from ``cache`` or spoken now (then cached); ``meta``: what
    else the sidecar records about it."""
    cache.mkdir(parents=True, exist_ok=True)
    wav_path = cache / f"{item.id}-{item.key()}.wav"
    meta_path = wav_path.with_suffix(".json")
    if wav_path.exists() and meta_path.exists():
        clip = _load(item, wav_path, meta_path)
        if clip is not None:
            return clip
    pieces = [espeak(text, item.voice, item.speed, item.pitch, RATE, VOICED) for text in item.parts]
    pause_start = resume = None
    if item.kind == "paused":
        pause_start = pieces[0].size
        gap = np.zeros(int(round(item.pause_s * RATE)), dtype=np.int16)
        resume = pause_start + gap.size
        pcm = np.concatenate([pieces[0], gap, pieces[1]])
    else:
        pcm = np.concatenate(pieces)
    sidecar = {"id": item.id, "kind": item.kind, "text": item.text, "voice": item.voice, "speed": item.speed,
               "pitch": item.pitch, "pause_s": item.pause_s, **(meta or {}), "rate": RATE, "samples": int(pcm.size),
               "last_voiced": int(pcm.size - 1), "pause_start": pause_start, "resume": resume}
    write_wav(wav_path, pcm, RATE)
    atomic_write_bytes(meta_path, json.dumps(sidecar, indent=1).encode())
    return Clip(item, pcm, sidecar["last_voiced"], pause_start, resume, wav_path)
