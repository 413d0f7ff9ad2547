"""The microphone's latency at the gateway: aiortc's audio receiver holds four frames (80 ms) for a
smooth playout; the gateway plays nothing (the audio goes to VAD and ASR), so a call's receiver
holds one (``tracks.quick_mic``). Found by ``python -m bench calls`` (issue 33): speech_stopped
reached a call ~100 ms after a WebSocket session, 80 ms of it in this buffer."""

from __future__ import annotations

from aiortc import RTCPeerConnection
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import AudioStreamTrack
from aiortc.rtp import RtpPacket

from gateway.realtime.webrtc.call import Call
from gateway.realtime.webrtc.channel import WebRTCChannel
from gateway.realtime.webrtc.sdp import check_offer
from gateway.realtime.webrtc.tracks import MIC_PREFETCH, quick_mic


def packet(n: int) -> RtpPacket:
    p = RtpPacket(payload_type=111, sequence_number=n, timestamp=n * 960, payload=bytes([0xF8, n % 256]))
    p._data = p.payload  # what aiortc's receiver sets (the depayloaded frame) before the buffer
    return p


def first_release(jb: JitterBuffer) -> int:
    """How many packets, one every 20 ms, the buffer takes before it lets the first frame out."""
    for n in range(16):
        _, frame = jb.add(packet(n))
        if frame is not None:
            assert frame.timestamp == 0
            return n + 1
    raise AssertionError("no frame out of 16 packets")


async def test_a_calls_microphone_waits_for_one_frame_not_four():
    client = RTCPeerConnection()
    client.addTrack(AudioStreamTrack())
    client.createDataChannel("oai-events")
    await client.setLocalDescription(await client.createOffer())
    call = Call("rtc_test", WebRTCChannel(), 1.0)
    try:
        await call.answer(await check_offer(client.localDescription.sdp))
        audio = [t.receiver for t in call.pc.getTransceivers() if t.kind == "audio"]
        assert audio
        for receiver in audio:
            jb = receiver._RTCRtpReceiver__jitter_buffer
            assert jb._prefetch == MIC_PREFETCH == 1
            assert first_release(jb) == 2  # out when the next packet shows: 20 ms, not 80
    finally:
        await call.close()
        await client.close()
    assert first_release(JitterBuffer(capacity=16, prefetch=4)) == 5  # aiortc's own audio default


async def test_a_late_packet_delays_frames_but_none_is_lost():
    """Reordering on the way: every frame still comes out, in order, with one frame's delay at most."""
    pc = RTCPeerConnection()
    receiver = pc.addTransceiver("audio").receiver
    assert quick_mic(receiver)
    jb = receiver._RTCRtpReceiver__jitter_buffer
    out = []
    for n in [0, 1, 3, 2, 4, 5, 6, 7]:
        _, frame = jb.add(packet(n))
        if frame is not None:
            out.append(frame.timestamp // 960)
    assert out == [0, 1, 2, 3, 4, 5]  # from the late one on, a frame leaves one packet later
    await pc.close()
