"""A call's microphone reaches the worker as it was sent (issue 69 item 5, "WebRTC hears what
WebSocket hears"): a spoken clip, Opus-encoded as a browser sends it (48 kHz mono, 32 kbit/s, voip,
20 ms packets, or 40 ms as the call's answer asks), arriving as RTP packets at the call's ``microphone.MicPackets`` and decoded into
binary microphone frames by ``microphone.pump_audio`` (24 kHz mono PCM16), is the clip: no
sample lost or added, the onset where it was (the VAD's pre-roll before it intact), the same
level, the same waveform. Diagnosis found the call path sample-true (the words a call lost came
with Chromium's capture processing, before the gateway); this keeps it so."""

from __future__ import annotations

import asyncio
import fractions

import av
import numpy as np
import pytest
import soxr
from aiortc.rtp import RtpPacket

from core.audio_frames import read_mic_frame
from gateway.realtime.webrtc.microphone import INPUT_RATE, MicDecoder, MicPackets, opus_packet_ms, pump_audio
from gateway.realtime.webrtc.tracks import AUDIO_EXECUTOR

LEAD_S = 0.5


def spoken_clip() -> np.ndarray:
    """PCM16 24 kHz: espeak-ng's words where installed, else a voiced, formant-like stand-in."""
    from devtools.espeak import espeak, espeak_path

    if espeak_path() is not None:
        return espeak("How many legs does a bird have?", "en-gb+f5", 160, 60, rate=INPUT_RATE)
    t = np.arange(int(1.5 * INPUT_RATE)) / INPUT_RATE
    f0 = 120 + 30 * np.sin(2 * np.pi * 1.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / INPUT_RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 30))
    envelope = np.clip(np.sin(np.pi * t / t[-1]) * 3, 0, 1) * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))
    return (voice * envelope * 6000).astype(np.int16)


def browser_packets(pcm24: np.ndarray, ms: int = 20) -> list[bytes]:
    """The clip after ``LEAD_S`` of silence as a browser's Opus encoder sends it: ``ms`` packets."""
    enc = av.CodecContext.create("libopus", "w")
    enc.bit_rate, enc.format, enc.layout, enc.sample_rate = 32000, "s16", "mono", 48000
    enc.time_base = fractions.Fraction(1, 48000)
    enc.options = {"application": "voip", "frame_duration": str(ms)}
    step = 48 * ms
    x = np.concatenate([np.zeros(int(LEAD_S * 48000), np.float32), soxr.resample(pcm24.astype(np.float32), 24000, 48000),
                        np.zeros(48000, np.float32)])
    x = np.clip(np.round(x), -32768, 32767).astype("<i2")
    packets: list[bytes] = []
    for i in range(0, x.size - step + 1, step):
        frame = av.AudioFrame(format="s16", layout="mono", samples=step)
        frame.planes[0].update(x[i:i + step].tobytes())
        frame.sample_rate, frame.time_base, frame.pts = 48000, fractions.Fraction(1, 48000), i
        packets += [bytes(p) for p in enc.encode(frame)]
    return packets


async def arrive(packets: list[bytes]) -> list[bytes]:
    """The packets arriving at a call's ``MicPackets`` as aiortc's receiver hands them over (RTP,
    sequence-numbered), 1 ms apart; the binary microphone frames ``pump_audio`` made of them."""
    mic = MicPackets()
    appends: list[bytes] = []
    pump = asyncio.create_task(pump_audio(mic, appends.append, AUDIO_EXECUTOR))
    for n, payload in enumerate(packets):
        rtp = RtpPacket(payload_type=111, sequence_number=n % 65536, timestamp=0, payload=payload)
        rtp._data = payload  # what aiortc's receiver sets (the depayloaded frame) before the buffer
        mic.add(rtp)
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.2)
    pump.cancel()
    return appends


def onset(x: np.ndarray, level: float) -> int:
    return int(np.flatnonzero(np.abs(x) > level)[0])


@pytest.mark.asyncio
@pytest.mark.parametrize("ms", [20, 40])
async def test_a_calls_microphone_reaches_the_worker_sample_true(ms):
    clip = spoken_clip()
    packets = browser_packets(clip, ms)
    assert {opus_packet_ms(p) for p in packets} == {ms}
    appends = await arrive(packets)
    frames_read = [read_mic_frame(a) for a in appends]
    assert {rate for _, rate in frames_read} == {INPUT_RATE}
    got = np.concatenate([np.frombuffer(pcm, "<i2") for pcm, _ in frames_read]).astype(np.float32)
    sent = np.concatenate([np.zeros(int(LEAD_S * INPUT_RATE), np.float32), clip.astype(np.float32)])

    # Every sample: the stream is as long as the packets' audio, less a last 20 ms packet waiting for
    # its pair (40 ms frames) and the resampler's few samples of delay.
    assert 0 <= len(packets) * ms * 24 - got.size < (480 if ms == 20 else 0) + 0.002 * INPUT_RATE

    # Aligned (the codec's and resampler's delay: a few ms at most), one gain, one waveform.
    lags = range(0, 480)
    k = int(np.argmax([got[lag:lag + sent.size] @ sent for lag in lags]))
    assert k < 0.01 * INPUT_RATE, f"{k / INPUT_RATE * 1000:.1f} ms of delay"
    seg = got[k:k + sent.size]
    gain = float(seg @ sent / (sent @ sent))
    assert abs(20 * np.log10(gain)) < 1.0, f"level changed by {20 * np.log10(gain):.1f} dB"
    voiced = slice(int(LEAD_S * INPUT_RATE), sent.size)
    corr = float(seg[voiced] @ sent[voiced] / (np.linalg.norm(seg[voiced]) * np.linalg.norm(sent[voiced])))
    assert corr > 0.85, f"waveform correlation {corr:.2f}"

    # The onset where it was, and the silence before it (the VAD's pre-roll) kept as silence.
    # (the codec softens the first few ms of a voice after digital silence, no more)
    assert abs(onset(seg, 300) - onset(sent, 300)) < 0.01 * INPUT_RATE
    assert np.abs(seg[: int((LEAD_S - 0.05) * INPUT_RATE)]).max() < 100
    assert np.abs(got).max() < 32767  # nothing clipped


@pytest.mark.asyncio
async def test_a_40_ms_packet_is_a_frame_by_itself_and_a_20_ms_one_waits_for_its_pair():
    """The pump takes 40 ms of audio by the packets' own lengths: one 40 ms packet is handed on at
    once (two were awaited before, 80 ms), a 20 ms packet waits for the next."""
    long, short = browser_packets(spoken_clip(), 40)[30], browser_packets(spoken_clip(), 20)[60]
    mic = MicPackets()

    def add(n: int, payload: bytes) -> None:
        rtp = RtpPacket(payload_type=111, sequence_number=n, timestamp=0, payload=payload)
        rtp._data = payload
        mic.add(rtp)

    add(0, long)
    assert await asyncio.wait_for(mic.take(), 0.5) == [long]
    add(1, short)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(mic.take(), 0.2)
    add(2, short)
    assert await asyncio.wait_for(mic.take(), 0.5) == [short, short]


def test_a_packet_libopus_refuses_is_skipped_and_the_microphone_goes_on():
    good = browser_packets(spoken_clip())[30:32]
    decoder = MicDecoder()
    pcm, rate = read_mic_frame(decoder.frame([good[0], b"\x03\x00", good[1]]))  # code 3 with no frame count
    assert rate == INPUT_RATE and 900 <= len(pcm) // 2 <= 960  # the two good packets' 40 ms, the bad one's skipped


@pytest.mark.parametrize("ms", [10, 20, 40, 60])
@pytest.mark.parametrize("rate,bits", [(48000, 32000), (16000, 12000), (48000, 96000)])
def test_an_opus_packets_length_is_read_from_its_table_of_contents(ms, rate, bits):
    """SILK, hybrid and CELT packets, one frame or several (libopus packs 40 and 60 ms of CELT or
    hybrid as 2 or 3 frames): each one's length is what was encoded into it."""
    enc = av.CodecContext.create("libopus", "w")
    enc.bit_rate, enc.format, enc.layout, enc.sample_rate = bits, "s16", "mono", rate
    enc.time_base = fractions.Fraction(1, rate)
    enc.options = {"application": "voip" if bits < 64000 else "audio", "frame_duration": str(ms)}
    step = rate // 1000 * ms
    x = (spoken_clip()[: 20 * step]).astype("<i2")
    packets = []
    for i in range(0, x.size - step + 1, step):
        frame = av.AudioFrame(format="s16", layout="mono", samples=step)
        frame.planes[0].update(x[i:i + step].tobytes())
        frame.sample_rate, frame.time_base, frame.pts = rate, enc.time_base, i
        packets += [bytes(p) for p in enc.encode(frame)]
    assert packets and {opus_packet_ms(p) for p in packets} == {ms}
    assert opus_packet_ms(b"") == 20.0 and opus_packet_ms(b"\x03") == 20.0  # unreadable: counted as 20 ms
