"""The reply's Opus encoder at each libopus complexity and packet length (20 ms, and 40 ms: the
gateway's now, ``playback.FRAME_MS``): its CPU per 20 ms of audio and, where the
``pesq`` package is installed (``pip install pesq``: not a dependency, it compiles C), PESQ-WB of
the decoded reply against the original. How ``tracks.OPUS_COMPLEXITY`` was chosen:

    python -m bench.calls.opus_quality

The reply is the pipeline's Piper voice (deterministic) reading a weather forecast, 24 kHz mono,
encoded as the gateway encodes it (voip; 32 kbit/s at 20 ms, 40 at 40 ms), decoded at 48 kHz as a browser
decodes it, both resampled to 16 kHz for PESQ (which aligns the codec's delay itself).
"""

from __future__ import annotations

import fractions
import time

import numpy as np

TEXT = ("The weather today will be mild with a light breeze from the west. In the afternoon clouds may gather, and "
        "there is a small chance of rain near the coast. Tomorrow looks brighter, so it is a good day to plan a walk "
        "in the park.")
RATE = 24000
UNIT = 480  # 20 ms: the CPU is given per this much audio, whatever the packet length
LEVELS = (10, 9, 7, 5, 3, 1, 0)
PACKETS = ((20, 32000), (40, 32000), (40, 40000))  # (ms, target bit/s): before, and now (tracks.OPUS_BITRATE)


def reply_pcm() -> np.ndarray:
    from core.cascade.tts import PiperTts

    return np.frombuffer(b"".join(PiperTts().synthesize(TEXT, deterministic=True)), dtype=np.int16)


def encode(pcm: np.ndarray, level: int, packet_ms: int = 20, bitrate: int = 32000) -> tuple[list[bytes], float]:
    """``packet_ms`` Opus packets at ``level``, and the encoder's CPU in microseconds per 20 ms."""
    import av

    frame_samples = RATE * packet_ms // 1000

    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate, codec.format, codec.layout, codec.sample_rate = bitrate, "s16", "mono", RATE
    codec.time_base = fractions.Fraction(1, RATE)
    codec.options = {"application": "voip", "compression_level": str(level), "frame_duration": str(packet_ms)}
    packets: list[bytes] = []
    samples = 0
    t0 = time.process_time()
    for i in range(0, pcm.size - frame_samples + 1, frame_samples):
        frame = av.AudioFrame(format="s16", layout="mono", samples=frame_samples)
        frame.planes[0].update(pcm[i:i + frame_samples].tobytes())
        frame.sample_rate, frame.time_base, frame.pts = RATE, codec.time_base, i
        packets += [bytes(p) for p in codec.encode(frame)]
        samples += frame_samples
    return packets, (time.process_time() - t0) / max(1, samples / UNIT) * 1e6


def decode(packets: list[bytes]) -> np.ndarray:
    import av

    codec = av.CodecContext.create("libopus", "r")
    codec.format, codec.layout, codec.sample_rate = "s16", "mono", 48000
    out = [f.to_ndarray().reshape(-1) for p in packets for f in codec.decode(av.Packet(p))]
    return np.concatenate(out).astype(np.float32) / 32768


def pesq_wb(reference: np.ndarray, decoded48: np.ndarray) -> float | None:
    try:
        from pesq import pesq
    except ImportError:
        return None
    from core.audio import resample

    ref = resample(reference.astype(np.float32) / 32768, RATE, 16000)
    deg = resample(decoded48, 48000, 16000)
    n = min(ref.size, deg.size)
    return float(pesq(16000, ref[:n], deg[:n], "wb"))


def main() -> None:
    pcm = reply_pcm()
    seconds = pcm.size / RATE
    print(f"reply: {seconds:.1f} s of Piper speech; voip")
    print("| complexity | packet, target | kbit/s sent | encoder CPU per 20 ms of audio | PESQ-WB |\n|---|---|---|---|---|")
    for level in LEVELS:
        for packet_ms, bitrate in PACKETS:
            packets, us = encode(pcm, level, packet_ms, bitrate)
            q = pesq_wb(pcm, decode(packets))
            sent = sum(map(len, packets)) * 8 / seconds / 1000
            print(f"| {level} | {packet_ms} ms, {bitrate // 1000}k | {sent:.1f} | {us:.0f} us | {'-' if q is None else f'{q:.3f}'} |")


if __name__ == "__main__":
    main()
