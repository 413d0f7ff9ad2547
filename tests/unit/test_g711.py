"""G.711 codec glue (core/g711.py): PyAV companding + soxr streaming resampling."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import soxr

from core.g711 import G711_FORMATS, G711Encoder, decode_g711, normalize_format

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop  # removed in Python 3.13
    except ImportError:
        audioop = None

LAWS = ["audio/pcmu", "audio/pcma"]
SILENCE = {"audio/pcmu": 0xFF, "audio/pcma": 0xD5}
SILENCE_PCM = {"audio/pcmu": 0, "audio/pcma": 8}  # A-law has no exact zero


def sine(rate: int, seconds: float = 1.0, freq: float = 440.0, amp: float = 0.5) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * 32767 * np.sin(2 * np.pi * freq * t)).astype("<i2").tobytes()


def encode_all(fmt: str, pcm: bytes, in_rate: int = 24000, chunk_ms: int | None = None) -> bytes:
    enc = G711Encoder(fmt, in_rate)
    if chunk_ms is None:
        return enc.encode(pcm) + enc.flush()
    step = in_rate * chunk_ms // 1000 * 2
    return b"".join(enc.encode(pcm[i : i + step]) for i in range(0, len(pcm), step)) + enc.flush()


def corr(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    return float(np.corrcoef(a[:n].astype(float), b[:n].astype(float))[0, 1])


@pytest.mark.parametrize("fmt", LAWS)
def test_round_trip_keeps_sine(fmt):
    src = sine(24000)
    g711 = encode_all(fmt, src)
    assert abs(len(g711) - 8000) <= 2  # N samples at 24 kHz -> ~N/3 bytes
    back = np.frombuffer(decode_g711(g711, fmt), dtype="<i2")
    assert len(back) == len(g711)
    up = soxr.resample(back.astype(np.float32), 8000, 24000)
    ref = np.frombuffer(src, dtype="<i2")
    # Trim the edges where the resampler's filter rings in and out.
    assert corr(ref[2400:-2400], up[2400:-2400]) > 0.99
    # At 8 kHz against an ideal resampled reference: G.711 keeps ~35 dB SNR.
    ideal = soxr.resample(ref.astype(np.float32), 24000, 8000)[800:-800]
    got = back[800 : 800 + len(ideal)].astype(np.float64)
    snr = 10 * np.log10(np.sum(ideal**2) / np.sum((ideal - got) ** 2))
    assert snr > 25


def test_laws_differ():
    src = sine(24000, 0.2)
    assert encode_all("audio/pcmu", src) != encode_all("audio/pcma", src)


@pytest.mark.parametrize("fmt", LAWS)
@pytest.mark.parametrize("in_rate", [24000, 16000, 8000])
def test_silence_is_the_silence_code(fmt, in_rate):
    out = encode_all(fmt, bytes(in_rate // 5 * 2), in_rate)  # 200 ms
    assert abs(len(out) - 1600) <= 1
    assert set(out) == {SILENCE[fmt]}
    assert decode_g711(bytes([SILENCE[fmt]]) * 4, fmt) == np.full(4, SILENCE_PCM[fmt], "<i2").tobytes()


@pytest.mark.parametrize("fmt", LAWS)
def test_streaming_40ms_matches_one_call(fmt):
    src = sine(24000, 1.0, freq=523.0)
    whole = encode_all(fmt, src)
    chunks = encode_all(fmt, src, chunk_ms=40)
    assert abs(len(whole) - len(chunks)) <= 1
    a = np.frombuffer(decode_g711(whole, fmt), dtype="<i2")
    b = np.frombuffer(decode_g711(chunks, fmt), dtype="<i2")
    assert corr(a, b) > 0.999


def test_encode_returns_ready_bytes_and_flush_resets():
    enc = G711Encoder("audio/pcmu")
    assert enc.encode(b"") == b""
    first = enc.encode(sine(24000, 0.04)) + enc.flush()
    second = enc.encode(sine(24000, 0.04)) + enc.flush()
    assert first == second and abs(len(first) - 320) <= 1


@pytest.mark.parametrize("bad", ["audio/pcm", "g711", "pcm_mulaw", "", "audio/opus"])
def test_unknown_format_raises(bad):
    with pytest.raises(ValueError, match="unknown G.711 format"):
        G711Encoder(bad)
    with pytest.raises(ValueError, match="unknown G.711 format"):
        decode_g711(b"\xff", bad)


def test_aliases_and_bad_input():
    assert normalize_format("g711_ulaw") == "audio/pcmu"
    assert normalize_format("g711_alaw") == "audio/pcma"
    assert set(G711_FORMATS) == {"audio/pcmu", "audio/pcma"}
    assert encode_all("g711_alaw", sine(24000, 0.1)) == encode_all("audio/pcma", sine(24000, 0.1))
    with pytest.raises(ValueError):
        G711Encoder("audio/pcmu").encode(b"\x00\x00\x00")
    with pytest.raises(ValueError):
        G711Encoder("audio/pcmu", in_rate=0)


# Well-known ITU G.711 code points (PCM16 value -> byte), independent of audioop.
KNOWN = {
    "audio/pcmu": {0: 0xFF, -1: 0x7E, 32767: 0x80, -32768: 0x00, 1000: 0xCE},
    "audio/pcma": {0: 0xD5, -1: 0x55, 32767: 0xAA, -32768: 0x2A, 1000: 0xFA},
}


@pytest.mark.parametrize("fmt", LAWS)
def test_reference_code_points(fmt):
    pcm = np.array(list(KNOWN[fmt]), dtype="<i2").tobytes()
    assert G711Encoder(fmt, in_rate=8000).encode(pcm) == bytes(KNOWN[fmt].values())


@pytest.mark.skipif(audioop is None, reason="audioop removed in Python 3.13")
@pytest.mark.parametrize("fmt", LAWS)
def test_matches_audioop(fmt):
    """Decoding is bit-exact; FFmpeg's nearest-level encoder differs from audioop's
    truncating one only at segment edges, and then by exactly one level."""
    lin2, to_lin = (
        (audioop.lin2ulaw, audioop.ulaw2lin) if fmt == "audio/pcmu" else (audioop.lin2alaw, audioop.alaw2lin)
    )
    every_code = bytes(range(256))
    assert decode_g711(every_code, fmt) == to_lin(every_code, 2)

    pcm = np.arange(-32768, 32768, dtype="<i2").tobytes()
    ours, ref = G711Encoder(fmt, in_rate=8000).encode(pcm), lin2(pcm, 2)
    assert np.mean(np.frombuffer(ours, np.uint8) == np.frombuffer(ref, np.uint8)) > 0.98
    levels = np.unique(np.frombuffer(to_lin(every_code, 2), "<i2"))
    step = np.searchsorted(levels, np.frombuffer(decode_g711(ours, fmt), "<i2")) - np.searchsorted(
        levels, np.frombuffer(to_lin(ref, 2), "<i2")
    )
    assert np.abs(step).max() <= 1
