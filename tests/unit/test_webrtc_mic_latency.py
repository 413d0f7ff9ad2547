"""The microphone's latency at the gateway. aiortc's audio receiver holds four packets (80 ms) for a
smooth playout, and after one lost packet it waits for sixteen and then hands out one frame per
packet, so ~300 ms of lag stay for the rest of the call. The gateway plays nothing (the audio goes
to VAD and ASR), so a call's receiver gets ``microphone.MicPackets``: each packet is queued for
decoding as it arrives, and aiortc's own decoder thread is never handed one. Found by
``python -m bench calls`` (issue 33): speech_stopped reached a call ~110 ms after a WebSocket
session, 80 ms of it in aiortc's buffer."""

from __future__ import annotations

from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import AudioStreamTrack
from aiortc.rtp import RtpPacket

from gateway.realtime.webrtc.call import Call
from gateway.realtime.webrtc.channel import WebRTCChannel
from gateway.realtime.webrtc.sdp import check_offer
from gateway.realtime.webrtc.microphone import MicPackets, quick_mic


def packet(n: int) -> RtpPacket:
    seq = n % 65536
    p = RtpPacket(payload_type=111, sequence_number=seq, timestamp=(n * 960) % 2**32, payload=bytes([0xF8, n % 256]))
    p._data = p.payload  # what aiortc's receiver sets (the depayloaded frame) before the buffer
    return p


def feed(jb: JitterBuffer, order: list[int]) -> list[tuple[int, int]]:
    """(packet just added, packet whose frame came out) for each frame released: by aiortc's buffer
    to its decoder, by ``MicPackets`` to the call's own queue (never to aiortc's decoder)."""
    out = []
    for n in order:
        _, frame = jb.add(packet(n))
        if isinstance(jb, MicPackets):
            assert frame is None
            out += [(n, data[1]) for data in jb._payloads]
            jb._payloads.clear()
        elif frame is not None:
            out.append((n, frame.data[1]))
    return out


async def test_a_calls_microphone_is_decoded_as_each_packet_arrives():
    client = RTCPeerConnection()
    client.addTrack(AudioStreamTrack())
    client.createDataChannel("oai-events")
    await client.setLocalDescription(await client.createOffer())
    call = Call("rtc_test", WebRTCChannel(), 1.0)
    try:
        answer = await call.answer(await check_offer(client.localDescription.sdp))
        # The answer asks for 40 ms microphone packets (Chromium then sends them: tests/e2e/test_browser.py),
        # in its audio section alone, and a peer still takes it.
        audio_section = answer.split("m=audio", 1)[1].split("\r\nm=", 1)[0]
        assert answer.count("a=ptime:") == 1 and "a=ptime:40" in audio_section.split("\r\n") and answer.endswith("\r\n")
        await client.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        audio = [t.receiver for t in call.pc.getTransceivers() if t.kind == "audio"]
        assert audio and all(isinstance(r._RTCRtpReceiver__jitter_buffer, MicPackets) for r in audio)
    finally:
        await call.close()
        await client.close()
    assert feed(MicPackets(), [0, 1, 2]) == [(0, 0), (1, 1), (2, 2)]  # no wait at all
    assert feed(JitterBuffer(capacity=16, prefetch=4), range(6))[0] == (4, 0)  # aiortc's: 80 ms


def test_a_lost_packet_leaves_no_lag_behind():
    order = [n for n in range(60) if n != 5]
    lag = [added - out for added, out in feed(MicPackets(), order)]
    assert lag == [0] * len(order)
    stock = [added - out for added, out in feed(JitterBuffer(capacity=16, prefetch=4), order)]
    assert stock[-1] >= 14  # aiortc's buffer: ~300 ms behind for good after one loss


def test_late_and_duplicate_packets_are_dropped_in_order():
    got = [out for _, out in feed(MicPackets(), [0, 1, 3, 2, 4, 4, 5])]
    assert got == [0, 1, 3, 4, 5]  # 2 came after 3: dropped, as a duplicate 4 is
    wrapped = [out for _, out in feed(MicPackets(), [65534, 65535, 65536, 65537])]
    assert wrapped == [254, 255, 0, 1]  # sequence numbers wrap at 2**16


async def test_quick_mic_leaves_an_unexpected_receiver_alone():
    class Odd:
        pass

    assert quick_mic(Odd()) is None
    pc = RTCPeerConnection()
    receiver = pc.addTransceiver("audio").receiver
    packets = quick_mic(receiver)
    assert isinstance(packets, MicPackets) and receiver._RTCRtpReceiver__jitter_buffer is packets
    await pc.close()


def test_a_microphone_nobody_keeps_up_with_keeps_its_last_3_s_and_says_so(caplog):
    from gateway.realtime.webrtc.microphone import KEEP_PACKETS

    mic = MicPackets()
    with caplog.at_level("WARNING", logger="gateway.realtime.webrtc.microphone"):
        for n in range(KEEP_PACKETS + 10):
            mic.add(packet(n))
    assert [p[1] for p in mic._payloads] == [n % 256 for n in range(10, KEEP_PACKETS + 10)]  # the newest
    assert len([r for r in caplog.records if "behind" in r.getMessage()]) == 1  # said once, not per packet


def test_an_answer_that_says_its_ptime_already_is_left_alone():
    from gateway.realtime.webrtc.sdp import with_mic_ptime

    sdp = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=ptime:20\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"
    assert with_mic_ptime(sdp, 40) == sdp
    assert with_mic_ptime("v=0\r\nm=application 9 UDP/DTLS/SCTP x\r\n", 40).count("ptime") == 0  # no audio
    added = with_mic_ptime(sdp.replace("a=ptime:20\r\n", ""), 40)
    assert added == ("v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=ptime:40\r\n"
                     "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n")
