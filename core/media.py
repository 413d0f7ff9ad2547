"""Audio files in and out with PyAV: decode uploads to 16 kHz mono, encode replies as they stream.

Blocking (FFmpeg work): call from a thread, never on an event loop.

Decoding sniffs the container from its first bytes and opens it with that one demuxer, from an
allow-list. Letting FFmpeg probe freely would also accept playlist formats (HLS, concat) that
open other files or URLs named inside the upload.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from core.errors import InvalidAudioError
from core.files import atomic_write_bytes
from core.rest_jobs import SpeechFormat

CONTENT_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/L16; rate=24000; channels=1",
}
SUPPORTED_UPLOADS = ("wav", "mp3", "ogg", "webm", "flac", "m4a", "mp4", "aac")
MAX_DECODED_SECONDS = 1800.0  # 30 min: a 25 MB mp3 at 128 kbit/s is ~26 min

# (container, FFmpeg demuxer) recognised by magic bytes
_MP4_BRANDS = (b"ftyp",)


def sniff_container(data: bytes) -> tuple[str, str] | None:
    """The upload's container and the one FFmpeg demuxer allowed to open it, or None."""
    head = data[:16]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav", "wav"
    if head[:4] == b"OggS":
        return "ogg", "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm", "matroska"
    if head[:4] == b"fLaC":
        return "flac", "flac"
    if head[4:8] in _MP4_BRANDS:
        return "mp4", "mp4"
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "aac", "aac"  # ADTS frame sync (layer bits 00)
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06):
        return "mp3", "mp3"  # ID3 tag, or an MPEG audio frame sync (layer bits set)
    return None


def decode_audio(data: bytes, rate: int = 16000, max_seconds: float = MAX_DECODED_SECONDS) -> np.ndarray:
    """Decode a whole audio file to float32 mono at ``rate``; ``InvalidAudioError`` if it is not one."""
    import av

    sniffed = sniff_container(data)
    if sniffed is None:
        raise InvalidAudioError(
            f"unrecognised audio file; supported formats: {', '.join(SUPPORTED_UPLOADS)}", param="file"
        )
    name, demuxer = sniffed
    limit = int(max_seconds * rate)
    parts: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), format=demuxer, mode="r") as container:
            if not container.streams.audio:
                raise InvalidAudioError(f"the {name} file has no audio stream", param="file")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    parts.append(out.to_ndarray().reshape(-1))
                    total += parts[-1].size
                if total > limit:
                    raise InvalidAudioError(f"audio longer than {max_seconds:.0f} s", param="file")
            for out in resampler.resample(None):
                parts.append(out.to_ndarray().reshape(-1))
    except InvalidAudioError:
        raise
    except (av.FFmpegError, ValueError, OSError, IndexError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidAudioError(f"could not decode the {name} file: {reason}", param="file") from None
    samples = np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros(0, np.float32)
    if samples.size == 0:
        raise InvalidAudioError(f"the {name} file holds no audio samples", param="file")
    return samples


def wav_header(rate: int, data_bytes: int | None = None, channels: int = 1, sample_width: int = 2) -> bytes:
    """A PCM WAV header (16-bit mono unless told); ``data_bytes=None`` writes the streaming form
    (sizes 0xFFFFFFFF)."""
    data_size = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff_size = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    block = channels * sample_width
    return b"RIFF" + struct.pack("<I", riff_size) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, channels, rate, rate * block, block, sample_width * 8
    ) + b"data" + struct.pack("<I", data_size)


def wav_bytes(pcm: bytes | np.ndarray, rate: int = 24000, channels: int = 1, sample_width: int = 2) -> bytes:
    """The one WAV writer: a whole PCM WAV file. ``pcm``: little-endian 16-bit samples (8-bit
    unsigned with ``sample_width=1``), interleaved when ``channels`` > 1, as bytes or as an integer
    array (converted to ``<i2`` / ``u1``; scale float audio first). A partial last frame is dropped."""
    if isinstance(pcm, np.ndarray):
        pcm = pcm.astype("<i2" if sample_width == 2 else "u1", copy=False).tobytes()
    block = channels * sample_width
    pcm = bytes(pcm[: len(pcm) // block * block])
    return wav_header(rate, len(pcm), channels, sample_width) + pcm


def write_wav(path: Path | str, pcm: bytes | np.ndarray, rate: int = 24000, channels: int = 1,
              sample_width: int = 2) -> Path:
    """:func:`wav_bytes` written to ``path`` atomically (a temporary file, then renamed): a reader
    never sees half a file."""
    path = Path(path)
    atomic_write_bytes(path, wav_bytes(pcm, rate, channels, sample_width))
    return path


class _Sink:
    """A write-only, non-seekable file for PyAV: muxers then write in order and never seek back."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


_CODECS: dict[str, tuple[str, str, str]] = {  # format -> (muxer, encoder, sample format)
    "mp3": ("mp3", "libmp3lame", "s16p"),
    "opus": ("ogg", "libopus", "s16"),
    "aac": ("adts", "aac", "fltp"),
    "flac": ("flac", "flac", "s16"),
}


class StreamEncoder:
    """PCM16 mono in, bytes of ``fmt`` out, chunk by chunk (so encoded speech can stream)."""

    def __init__(self, fmt: SpeechFormat, rate: int = 24000, bitrate: int = 64_000) -> None:
        self.fmt = fmt
        self.rate = rate
        self._started = False
        if fmt in ("wav", "pcm"):
            return
        import av

        muxer, codec, sample_fmt = _CODECS[fmt]
        self._sink = _Sink()
        # Ogg pages default to 1 s; 100 ms pages let Opus leave as it is produced.
        options = {"page_duration": "100000"} if muxer == "ogg" else {}
        self._container = av.open(self._sink, mode="w", format=muxer, options=options)
        self._stream = self._container.add_stream(codec, rate=rate, layout="mono")
        self._stream.codec_context.format = sample_fmt
        if fmt != "flac":
            self._stream.bit_rate = bitrate
        self._fifo = av.AudioFifo()
        self._resampler = av.AudioResampler(format=sample_fmt, layout="mono", rate=rate)
        self._pts = 0

    def write(self, pcm: bytes) -> bytes:
        if self.fmt == "pcm":
            return pcm
        if self.fmt == "wav":
            head = b"" if self._started else wav_header(self.rate)
            self._started = True
            return head + pcm
        import av

        samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self.rate
        for out in self._resampler.resample(frame):
            self._fifo.write(out)
        self._encode(final=False)
        return self._sink.drain()

    def close(self) -> bytes:
        if self.fmt == "pcm":
            return b""
        if self.fmt == "wav":
            head = b"" if self._started else wav_header(self.rate)
            self._started = True
            return head
        self._encode(final=True)
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.drain()

    def _encode(self, final: bool) -> None:
        size = self._stream.codec_context.frame_size or 1024
        while self._fifo.samples >= size or (final and self._fifo.samples):
            frame = self._fifo.read(min(size, self._fifo.samples))
            frame.pts = self._pts
            self._pts += frame.samples
            for packet in self._stream.encode(frame):
                self._container.mux(packet)


def encode_stream(chunks: Iterator[bytes], fmt: SpeechFormat, rate: int = 24000) -> Iterator[bytes]:
    """Encode an iterator of PCM16 chunks, yielding encoded bytes as soon as there are any."""
    encoder = StreamEncoder(fmt, rate)
    for pcm in chunks:
        out = encoder.write(pcm)
        if out:
            yield out
    tail = encoder.close()
    if tail:
        yield tail


def encode_audio(pcm: bytes, fmt: SpeechFormat, rate: int = 24000) -> bytes:
    """One whole file (a WAV gets its exact sizes)."""
    if fmt == "wav":
        return wav_bytes(pcm, rate)
    return b"".join(encode_stream(iter([pcm]), fmt, rate))
