"""Speech from espeak-ng (a system tool, not a model): the benchmarks' turn sets and the tests
speak their phrases with it. Deterministic for one espeak-ng version and voice."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import soxr

VOICED = 300  # |sample| above this (int16, about -40 dBFS) counts as voiced when trimming


def espeak_path() -> str | None:
    """The espeak-ng executable, or None where it is not installed."""
    return shutil.which("espeak-ng")


def espeak(text: str, voice: str, speed: int, pitch: int, rate: int = 24000, voiced: int = VOICED) -> np.ndarray:
    """One piece spoken by espeak-ng, resampled to ``rate`` and trimmed to its voiced span (int16)."""
    exe = espeak_path()
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
    raw = subprocess.run([exe, "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True, timeout=60).stdout
    # --stdout writes a streaming WAV whose size fields are bogus: find the data chunk by hand.
    at = raw.find(b"data", 12)
    if raw[:4] != b"RIFF" or at < 0:
        raise RuntimeError(f"espeak-ng gave no WAV for {text!r}")
    source_rate = int.from_bytes(raw[24:28], "little")
    pcm = np.frombuffer(raw[at + 8:len(raw) - (len(raw) - at - 8) % 2], dtype="<i2")
    out = soxr.resample(pcm.astype(np.float32), source_rate, rate)
    out = np.clip(np.round(out), -32768, 32767).astype(np.int16)
    found = np.flatnonzero(np.abs(out.astype(np.int32)) > voiced)
    if found.size == 0:
        raise RuntimeError(f"espeak-ng gave silence for {text!r}")
    return out[found[0]:found[-1] + 1]
