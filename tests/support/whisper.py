"""The project's own Whisper (``core/cascade/asr.py``: the bundled model, offline, CPU) as a
listener in tests: what a user would make out of audio the product played."""

from __future__ import annotations

import functools

import numpy as np

from core.audio import resample


@functools.cache
def _whisper():
    from core.cascade.asr import WhisperAsr

    return WhisperAsr(cpu_threads=1)


def words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def hear(pcm: bytes, rate: int) -> str:
    """What Whisper hears in PCM16 mono audio at ``rate``."""
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
    return _whisper().transcribe(resample(samples, rate, 16000)).text
