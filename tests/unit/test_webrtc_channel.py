"""A WebRTC call's event logic in one process, no network: what the outbound track played and the
``output_audio_buffer.*`` events (``Playback``), the channel's routing (audio deltas to the track,
everything else to the data channel, the gateway's own events kept from the client, barge-in), the
call's pinned wire formats, and the offer checks (``sdp.py``).

The end-to-end calls with a real ``aiortc`` peer are in ``tests/e2e/webrtc/test_calls.py``.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiortc.sdp import SessionDescription

from core.audio_frames import reply_frame
from core.openai_events import validation_error
from core.transport import ChannelClosed
from gateway.realtime.webrtc.channel import WebRTCChannel, event_type
from gateway.realtime.webrtc.playback import FRAME_MS, OUTPUT_RATE, Playback
from gateway.realtime.webrtc.sdp import parse_offer
from gateway.realtime.webrtc.tracks import AUDIO_EXECUTOR, OpusFramer
from gateway.realtime.webrtc.session import interrupts, pin_formats, pin_update
from gateway.rest.models import ApiError
from tests.support.webrtc_client import OFFER



class Recorder:
    def __init__(self) -> None:
        self.client: list[dict] = []
        self.worker: list[dict] = []

    def types(self, side: str = "client") -> list[str]:
        return [e["type"] for e in getattr(self, side)]


def frames(ms: int) -> list[bytes]:
    """Encoded frames of ``FRAME_MS`` (their bytes do not matter to the bookkeeping)."""
    return [b"opus"] * (ms // FRAME_MS)


def play(p: Playback, ms: int) -> int:
    """Let the track take ``ms`` of frames; how many ms it got."""
    got = 0
    for _ in range(ms // FRAME_MS):
        got += FRAME_MS if p.pull() is not None else 0
    return got


def playback() -> tuple[Playback, Recorder]:
    rec = Recorder()
    return Playback(rec.client.append, rec.worker.append), rec


def test_started_on_first_played_frame_and_stopped_after_done_and_drained():
    p, rec = playback()
    p.push("resp_1", "item_1", frames(2 * FRAME_MS))
    assert rec.client == []  # queued, not played
    assert play(p, FRAME_MS) == FRAME_MS
    assert rec.types() == ["output_audio_buffer.started"]
    p.done("resp_1")
    assert rec.types() == ["output_audio_buffer.started"]  # a frame still to play
    assert play(p, 2 * FRAME_MS) == FRAME_MS  # the rest; then the track sends silence
    assert rec.types() == ["output_audio_buffer.started", "output_audio_buffer.stopped"]
    assert all(e["response_id"] == "resp_1" and validation_error(e, beta=False) is None for e in rec.client)
    assert p.pull() is None and rec.worker == []


def test_a_reply_without_audio_says_nothing():
    p, rec = playback()
    p.done("resp_1")
    p.response("resp_2")
    p.done("resp_2")
    assert rec.client == [] and p.active is None


def test_barge_in_clears_and_truncates_to_what_was_played_once_done():
    p, rec = playback()
    p.push("resp_1", "item_1", frames(1000))
    play(p, 8 * FRAME_MS)
    cut = p.clear(barge_in=True)
    assert cut is not None and cut.played_ms == 8 * FRAME_MS
    assert rec.types() == ["output_audio_buffer.started", "output_audio_buffer.cleared"]
    assert rec.worker == []  # the worker cancels on barge-in itself; truncate waits for response.done
    p.push("resp_1", "item_1", frames(500))  # late audio of the cut reply: not played
    assert p.pull() is None and p.buffered == 0
    p.done("resp_1")
    assert rec.worker == [{"type": "conversation.item.truncate", "event_id": rec.worker[0]["event_id"],
                           "item_id": "item_1", "content_index": 0, "audio_end_ms": 8 * FRAME_MS}]
    assert rec.worker[0]["event_id"].startswith("gw_")
    assert "output_audio_buffer.stopped" not in rec.types()
    p.done("resp_1")
    assert len(rec.worker) == 1


def test_client_clear_cancels_a_running_reply_unless_the_client_did():
    p, rec = playback()
    p.push("resp_1", "item_1", frames(200))
    play(p, 2 * FRAME_MS)
    p.clear(barge_in=False)
    assert rec.types("worker") == ["response.cancel"] and rec.worker[0]["response_id"] == "resp_1"
    p.done("resp_1")
    assert rec.types("worker") == ["response.cancel", "conversation.item.truncate"]
    assert rec.worker[1]["audio_end_ms"] == 2 * FRAME_MS

    p, rec = playback()
    p.push("resp_2", "item_2", frames(200))
    p.client_cancelled()
    p.clear(barge_in=False)
    assert rec.worker == []
    p.done("resp_2")
    assert rec.types("worker") == ["conversation.item.truncate"] and rec.worker[0]["audio_end_ms"] == 0


def test_clear_with_nothing_playing_still_answers_cleared():
    p, rec = playback()
    assert p.clear(barge_in=False) is None
    assert rec.types() == ["output_audio_buffer.cleared"] and rec.worker == []
    p.push("resp_1", "item_1", frames(FRAME_MS))
    play(p, FRAME_MS)
    p.done("resp_1")
    p.clear(barge_in=False)  # all played: nothing to truncate or cancel
    assert rec.types()[-1] == "output_audio_buffer.cleared" and rec.client[-1]["response_id"] == "resp_1"
    assert rec.worker == []


class LoopDouble:
    """What ``Playback.push_encoded`` uses of the event loop: the wake-ups it asks for."""

    def __init__(self) -> None:
        self.woken: list = []

    def call_soon_threadsafe(self, fn) -> None:
        self.woken.append(fn)


def test_the_audio_threads_frames_wake_the_loop_only_when_nothing_is_queued():
    p, rec = playback()
    loop = LoopDouble()
    p.push_encoded(loop, "resp_1", "item_1", [b"a1", b"a2"])
    assert len(loop.woken) == 1  # nothing queued: the track must wake for the reply's first frame
    p.push_encoded(loop, "resp_1", "item_1", [b"a3"])
    assert len(loop.woken) == 1  # already on its way
    loop.woken[0]()  # the loop runs the wake-up: the frames are queued for the track
    assert p.buffered == 3 * OUTPUT_RATE * FRAME_MS // 1000
    p.push_encoded(loop, "resp_1", "item_1", [b"a4"])  # while the track plays: no wake-up ...
    assert len(loop.woken) == 1
    p.push("resp_1", "", [b"tail"])  # ... taken in, in order, by whatever the loop does next
    assert [p.pull() for _ in range(6)] == [b"a1", b"a2", b"a3", b"a4", b"tail", None]
    assert rec.types() == ["output_audio_buffer.started"]


def test_a_barge_in_clears_the_audio_threads_frames_not_yet_taken_in():
    p, rec = playback()
    loop = LoopDouble()
    p.push_encoded(loop, "resp_1", "item_1", [b"a1"])
    loop.woken.pop()()
    assert p.pull() == b"a1"
    p.push_encoded(loop, "resp_1", "item_1", [b"a2", b"a3"])  # encoded while the first frame played
    assert p.clear(barge_in=True).played_ms == FRAME_MS
    p.push_encoded(loop, "resp_1", "item_1", [b"a4"])  # the cut reply's late audio
    for wake in loop.woken:
        wake()
    assert p.pull() is None and p.buffered == 0  # none of it is played
    assert rec.types() == ["output_audio_buffer.started", "output_audio_buffer.cleared"]


def test_opus_framer_whole_frames_a_padded_tail_and_a_cut_replys_tail_dropped():
    framer = OpusFramer()
    ms = 2 * 24  # bytes of PCM16 at 24 kHz a millisecond
    assert len(framer.encode("resp_1", bytes(ms * FRAME_MS * 5 // 2))) == 2  # two frames and a half left
    assert len(framer.flush("resp_1")) == 1  # padded to a frame
    assert framer.flush("resp_1") == []
    assert framer.encode("resp_2", bytes(ms * FRAME_MS * 3 // 2)) and framer.flush("resp_3") == []
    assert framer.encode("resp_3", bytes(ms * FRAME_MS // 2)) == [] and framer.flush("resp_3")  # resp_2's tail is gone


# ---------------------------------------------------------------------------- the channel


class FramerDouble:
    """One "frame" per ``FRAME_MS`` of PCM, no encoding: the channel's bookkeeping in exact ms."""

    def encode(self, response_id: str, pcm: bytes) -> list[bytes]:
        return frames(len(pcm) // 48)

    def flush(self, response_id: str) -> list[bytes]:
        return []


def channel_double() -> WebRTCChannel:
    return WebRTCChannel(framer=FramerDouble())


class DataChannelDouble:
    """What the channel uses of aiortc's ``RTCDataChannel``."""

    readyState = "open"
    bufferedAmount = 0

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.handlers: dict[str, object] = {}

    def on(self, name: str, handler=None):
        self.handlers[name] = handler

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text))

    def client_sends(self, event: dict) -> None:
        self.handlers["message"](json.dumps(event))


async def send_audio(channel: WebRTCChannel, frame: bytes) -> None:
    """Send a reply frame and wait for the audio thread to encode it (``send`` does not)."""
    await channel.send(frame)
    await asyncio.get_running_loop().run_in_executor(AUDIO_EXECUTOR, lambda: None)  # its queue is FIFO


def server(kind: str, **fields) -> str:
    return json.dumps({"type": kind, "event_id": "event_1", **fields}, separators=(",", ":"))


def delta(ms: int, response_id: str = "resp_1", item_id: str = "item_1") -> bytes:
    """``ms`` of the reply's audio as the worker sends it to a call's gateway: a binary frame."""
    return reply_frame(response_id, item_id, bytes(48 * ms), 24000)


def session(turn_detection) -> dict:
    return {"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}


async def inbox(channel: WebRTCChannel) -> list[dict]:
    out = []
    while not channel._inbox.empty():
        out.append(json.loads(await channel.receive()))
    return out


async def test_channel_routes_audio_to_the_track_and_the_rest_to_the_data_channel():
    channel = channel_double()
    await channel.send(server("session.created", session=session({"type": "server_vad"})))
    assert channel.live and channel.interrupts
    await send_audio(channel, delta(5 * FRAME_MS))
    dc = DataChannelDouble()
    channel.attach(dc)  # events sent before the data channel opened wait for it
    assert [e["type"] for e in dc.sent] == ["session.created"]
    assert channel.playback.buffered == 5 * FRAME_MS * 24
    play(channel.playback, 2 * FRAME_MS)
    await channel.send(server("response.done", response={"id": "resp_1"}))
    play(channel.playback, 4 * FRAME_MS)
    assert [e["type"] for e in dc.sent] == ["session.created", "output_audio_buffer.started", "response.done",
                                           "output_audio_buffer.stopped"]


async def test_channel_barge_in_and_the_gateways_own_events():
    channel = channel_double()
    dc = DataChannelDouble()
    channel.attach(dc)
    await channel.send(server("session.created", session=session({"type": "server_vad"})))
    await send_audio(channel, delta(1000))
    play(channel.playback, 10 * FRAME_MS)
    await channel.send(server("input_audio_buffer.speech_started", audio_start_ms=10, item_id="item_2"))
    assert [e["type"] for e in dc.sent][-2:] == ["input_audio_buffer.speech_started", "output_audio_buffer.cleared"]
    await channel.send(server("response.done", response={"id": "resp_1"}))
    truncate = (await inbox(channel))[-1]
    assert truncate["type"] == "conversation.item.truncate" and truncate["audio_end_ms"] == 10 * FRAME_MS
    sent = len(dc.sent)
    await channel.send(json.dumps({"type": "error", "event_id": "event_2", "error": {
        "type": "invalid_request_error", "code": "x", "message": "m", "param": None,
        "event_id": truncate["event_id"]}}))
    assert len(dc.sent) == sent  # an error about the gateway's own event is not the client's business


async def test_a_barge_in_waits_for_the_reply_frames_sent_before_it():
    """``send`` does not wait for a reply frame's encoding; a barge-in must still cut it."""
    channel = channel_double()
    dc = DataChannelDouble()
    channel.attach(dc)
    await channel.send(server("session.created", session=session({"type": "server_vad"})))
    gate = threading.Event()
    AUDIO_EXECUTOR.submit(gate.wait, 5)  # the audio thread is busy ...
    await channel.send(delta(200))  # ... so this frame is not encoded yet
    asyncio.get_running_loop().call_later(0.05, gate.set)
    await channel.send(server("input_audio_buffer.speech_started", audio_start_ms=10, item_id="item_2"))
    assert [e["type"] for e in dc.sent][-2:] == ["input_audio_buffer.speech_started", "output_audio_buffer.cleared"]
    assert play(channel.playback, 200) == 0


async def test_no_barge_in_without_interrupting_turn_detection():
    channel = channel_double()
    channel.attach(DataChannelDouble())
    await channel.send(server("session.created", session=session(None)))
    assert not channel.interrupts
    await channel.send(server("session.updated", session=session({"type": "server_vad",
                                                                  "interrupt_response": False})))
    await send_audio(channel, delta(1000))
    play(channel.playback, FRAME_MS)
    await channel.send(server("input_audio_buffer.speech_started", audio_start_ms=10, item_id="item_2"))
    assert channel.playback.buffered == (1000 - FRAME_MS) * 24


async def test_client_events_clear_handled_here_session_update_pinned_and_leaving():
    channel = channel_double()
    dc = DataChannelDouble()
    channel.attach(dc)
    dc.client_sends({"type": "output_audio_buffer.clear"})
    dc.client_sends({"type": "session.update", "session": {"type": "realtime", "instructions": "hi", "audio": {
        "input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcm", "rate": 24000}}}}})
    dc.client_sends({"type": "response.create"})
    got = await inbox(channel)
    assert [e["type"] for e in got] == ["session.update", "response.create"]  # the clear is not forwarded
    assert got[0]["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert got[0]["session"]["instructions"] == "hi"
    assert dc.sent[0]["type"] == "output_audio_buffer.cleared"
    channel.peer_gone(1000, "hangup")
    for _ in range(2):
        with pytest.raises(ChannelClosed):
            await channel.receive()
    with pytest.raises(ChannelClosed):
        await channel.send(server("response.created", response={"id": "resp_1"}))


def test_event_type_without_parsing_and_with():
    assert event_type('{"type":"response.output_audio.delta","delta":"AAAA"}') == "response.output_audio.delta"
    assert event_type('{"event_id": "e", "type": "session.update"}') == "session.update"
    assert event_type("not json") == ""


def test_pinned_formats_and_interrupts_in_both_dialects():
    assert pin_formats({"input_audio_format": "g711_ulaw", "voice": "joe"}, beta=True) == {
        "input_audio_format": "pcm16", "voice": "joe"}
    assert pin_formats({"type": "realtime"}, beta=False) == {"type": "realtime"}
    assert json.loads(pin_update('{"type":"session.update","session":{"audio":{"output":{"format":'
                                 '{"type":"audio/pcmu"},"voice":"joe"}}}}', beta=False))["session"] == {
        "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "joe"}}}
    assert pin_update("not json", beta=False) == "not json"
    assert interrupts({"turn_detection": {"type": "server_vad"}}, beta=True)
    assert not interrupts({"turn_detection": None}, beta=True)
    assert interrupts(session({"type": "semantic_vad"}), beta=False)


# ---------------------------------------------------------------------------- offers

def refused(text: str) -> str:
    with pytest.raises(ApiError) as err:
        parse_offer(text, SessionDescription)
    assert err.value.status == 400 and err.value.code == "invalid_offer" and err.value.param == "sdp"
    return err.value.message


def test_offer_checks():
    offer = parse_offer(OFFER, SessionDescription)
    assert not offer.video
    assert "empty" in refused("  ")
    assert "v=0" in refused("hello")
    assert "no audio m-line" in refused(OFFER.replace("m=audio 9", "m=audio 0"))
    assert "no data channel" in refused(OFFER.split("m=application")[0])
    assert "ICE credentials" in refused(OFFER.replace("a=ice-pwd:0123456789abcdefghijkl\r\n", ""))
    assert "fingerprint" in refused(OFFER.replace("a=fingerprint:", "a=x-fingerprint:"))
    assert "Opus" in refused(OFFER.replace("opus/48000/2", "G729/8000"))
    assert "parsed" in refused(OFFER.replace("m=audio 9 UDP/TLS/RTP/SAVPF 111 0", "m=audio 9 UDP/TLS/RTP/SAVPF x"))
    assert "larger than" in refused(OFFER + "a=x:" + "y" * 70_000 + "\r\n")


async def test_beta_dialect_audio_and_barge_in():
    channel = WebRTCChannel(beta=True, framer=FramerDouble())
    dc = DataChannelDouble()
    channel.attach(dc)
    await channel.send(server("session.created", session={"turn_detection": {"type": "server_vad"}}))
    await send_audio(channel, delta(200))
    assert channel.playback.buffered == 200 * 24 and [e["type"] for e in dc.sent] == ["session.created"]
    play(channel.playback, 100)
    await channel.send(server("input_audio_buffer.speech_started", audio_start_ms=10, item_id="item_2"))
    assert dc.sent[-1]["type"] == "output_audio_buffer.cleared"
    assert validation_error(dc.sent[-1], beta=True) is None


async def test_the_microphone_before_the_session_starts_is_kept_and_heard_first():
    """A user who speaks as soon as the call connects (still queued, or being assigned) is heard
    from the first word: the last 3 s of appends wait for ``session.created``, then go first."""
    from core.audio_frames import mic_frame, read_mic_frame
    from gateway.realtime.webrtc.channel import EARLY_AUDIO_APPENDS

    channel = channel_double()
    channel.attach(DataChannelDouble())
    for i in range(100):
        channel.deliver_microphone(mic_frame(i.to_bytes(2, "little"), 24000))
    assert channel._inbox.empty()  # nothing for the worker before its session exists
    await channel.send(server("session.created", session=session({"type": "server_vad"})))
    channel.deliver_microphone(mic_frame(b"\xff\x7f", 24000))
    got = []
    while not channel._inbox.empty():
        got.append(read_mic_frame(await channel.receive()))
    assert got == [(i.to_bytes(2, "little"), 24000) for i in range(100 - EARLY_AUDIO_APPENDS, 100)] + [
        (b"\xff\x7f", 24000)]


async def test_a_binary_message_from_the_client_is_refused_not_passed_to_the_worker():
    """The worker takes binary frames from the call's microphone only: one on the data channel is
    answered as a WebSocket's would be (``invalid_json``), and nothing reaches the worker."""
    from core.audio_frames import mic_frame

    channel = channel_double()
    dc = DataChannelDouble()
    channel.attach(dc)
    await channel.send(server("session.created", session=session({"type": "server_vad"})))
    channel._from_data_channel(mic_frame(b"\x00\x00" * 960, 24000))
    assert channel._inbox.empty()
    error = dc.sent[-1]
    assert error["type"] == "error" and error["error"]["code"] == "invalid_json", error
    assert "binary" in error["error"]["message"]


def test_each_channel_names_its_transport_for_traces():
    from core.transport import WebSocketChannel
    from gateway.realtime.webrtc.channel import WebRTCChannel

    assert WebRTCChannel().transport == "webrtc" and WebSocketChannel.transport == "websocket"
