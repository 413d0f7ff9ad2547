"""PCM16 helpers: validation, conversion and resampling (soxr)."""

from __future__ import annotations

import numpy as np
import soxr

from core.errors import InvalidAudioError

SUPPORTED_INPUT_RATES = (8000, 16000, 24000)  # 8 kHz: decoded G.711
OUTPUT_RATE = 24000
MAX_CHUNK_SECONDS = 30.0


def pcm16_to_float(pcm: bytes, sample_rate: int) -> np.ndarray:
    """Validate one PCM16 mono chunk and return float32 samples in [-1, 1)."""
    if not isinstance(pcm, (bytes, bytearray, memoryview)):
        raise InvalidAudioError(f"audio must be bytes of PCM16, got {type(pcm).__name__}")
    if sample_rate not in SUPPORTED_INPUT_RATES:
        raise InvalidAudioError(
            f"unsupported input sample rate {sample_rate} Hz; use 8000, 16000 or 24000",
            param="sample_rate",
        )
    n = len(pcm)
    if n == 0:
        raise InvalidAudioError("empty audio chunk", param="audio")
    if n % 2:
        raise InvalidAudioError(
            f"PCM16 audio needs an even number of bytes, got {n}", param="audio"
        )
    if n / 2 / sample_rate > MAX_CHUNK_SECONDS:
        raise InvalidAudioError(
            f"audio chunk of {n / 2 / sample_rate:.1f} s exceeds {MAX_CHUNK_SECONDS:.0f} s",
            param="audio",
        )
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> bytes:
    clipped = np.clip(samples, -1.0, 1.0 - 1.0 / 32768)
    return (clipped * 32768.0).astype("<i2").tobytes()


def frame_rms(samples: np.ndarray, frame: int) -> np.ndarray:
    """RMS level of each whole ``frame``-sample frame (a trailing partial frame is left out)."""
    n = samples.size // frame
    return np.sqrt(np.mean(np.square(samples[: n * frame].reshape(n, frame), dtype=np.float32), axis=1))


def resample(samples: np.ndarray, src_rate: int, dst_rate: int) -> np.ndarray:
    if src_rate == dst_rate:
        return samples.astype(np.float32, copy=False)
    return soxr.resample(samples, src_rate, dst_rate).astype(np.float32, copy=False)


class StreamResampler:
    """Chunk-by-chunk resampling that keeps filter state across chunk edges."""

    def __init__(self, src_rate: int, dst_rate: int) -> None:
        self.src_rate = src_rate
        self.dst_rate = dst_rate
        self._stream = None if src_rate == dst_rate else soxr.ResampleStream(
            src_rate, dst_rate, 1, dtype="float32"
        )

    def process(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        if self._stream is None:
            return samples.astype(np.float32, copy=False)
        return self._stream.resample_chunk(samples.astype(np.float32, copy=False), last=last)

