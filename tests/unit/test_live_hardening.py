"""Issue 68, findings 1, 4 and 5: the Live dialect holds like the Realtime one. A hostile message
is an ``error`` event and the session goes on; a reader that fails for any other reason ends the
session at once (close 1011, ``worker_error``) instead of holding the slot; every queue a Live
client can fill is bounded, with an error or a close; MCP credentials never leave the server in
a Live event. In memory, on the scripted backend or with the test acting as the session."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from core.config import LimitsConfig
from core.json_limits import MAX_DEPTH, parse_client_json
from core.protocol import Dialect, ProtocolError
from core.transport import ChannelClosed
from tests.support.scripted_backend import ScriptedToolBackend
from tests.support.session_channel import SessionChannel
from tests.unit.test_live_dialect import LiveClientChannel
from worker.live import channel as live_channel
from worker.live.channel import MAX_UNANSWERED, MAX_WAITING_RESPONSES, LiveChannel
from worker.live.pacer import MAX_REMEMBERED
from worker.session import RealtimeSession

BOMB = "[" * 100_000 + "]" * 100_000  # issue 68's reproduction: far past Python's recursion limit
SECRET_TOKEN = "sk-live-secret-token"
SECRET_HEADER = "hdr-live-secret"
MCP = {"type": "mcp", "server_label": "crm", "server_url": "https://mcp.example/sse",
       "authorization": SECRET_TOKEN, "headers": {"X-Api-Key": SECRET_HEADER}}


# ---------------------------------------------------------------- one parsing path


@pytest.mark.parametrize(("message", "code"), [
    (BOMB, "nesting_too_deep"),
    ('{"type":"x","a":' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}", "nesting_too_deep"),
    ("x" * 300_001, "message_too_large"),
    ("{not json", "invalid_json"),
    ("[1, 2]", "invalid_json"),
    ('"text"', "invalid_json"),
    (b'{"type":"session.close"}', "invalid_json"),  # events are text frames
    ('{"type":"session.update","session":{"instructions":"\\ud800"}}', "invalid_json"),  # a lone surrogate
])
def test_every_refusal_of_the_one_parsing_path_has_its_code(message, code):
    with pytest.raises(ProtocolError) as refused:
        parse_client_json(message, max_bytes=300_000)
    assert refused.value.code == code
    assert parse_client_json('{"type":"a","s":"[[[["}', max_bytes=300_000) == {"type": "a", "s": "[[[["}
    assert parse_client_json('{"type":"a","s":"\\ud83d\\ude00"}', max_bytes=300_000)["s"] == "\U0001f600"  # a pair


async def _live_session(limits: LimitsConfig = LimitsConfig(), **session):
    """A Live client on a Realtime session over the scripted backend, started."""
    backend = ScriptedToolBackend(["hi"])
    client = LiveClientChannel()
    live = LiveChannel(client, "sess_hard", "omni", max_session_s=600, max_message_bytes=limits.max_message_bytes)
    realtime = RealtimeSession(live, backend, Dialect(False), limits, extensions=frozenset({"response.resumed"}))
    task = asyncio.create_task(realtime.run())
    client.client("session.start", event_id="c_start", session={"model": "gpt-live-1", **session})
    await client.until("session.started", client_event_id="c_start")
    return backend, client, realtime, task


async def test_hostile_messages_after_session_start_are_errors_and_the_session_goes_on():
    """The nesting bomb (it killed the Live reader), a message over the size limit, invalid JSON
    and JSON that is not an object: each an ``error`` with its code, then the session answers."""
    backend, client, realtime, task = await _live_session(LimitsConfig(max_message_bytes=300_000))
    for message in (BOMB, "x" * 300_001, "{not json", "[1, 2]"):
        client.inbox.put_nowait(message)
    await client.until("error", count=4, timeout=5)
    codes = [e["error"]["code"] for e in client.of("error")]
    assert codes == ["nesting_too_deep", "message_too_large", "invalid_json", "invalid_json"], codes
    client.client("session.input_audio.mute", event_id="c_mute")
    await client.until("session.input_audio.muted", client_event_id="c_mute", timeout=2)
    client.client("session.close", event_id="c_close")
    await client.until("session.closed", timeout=5)
    await asyncio.wait_for(task, 5)
    assert realtime.end_reason != "worker_error" and client.closed_with == 1000
    assert not client.invalid, client.invalid[:5]
    backend.close()


async def test_an_unexpected_failure_of_the_live_reader_ends_the_session_at_once_as_a_worker_error(monkeypatch):
    """A bug in the reader (not hostile input) must not leave the session waiting for events that
    never come: the session ends at once, close 1011, ``worker_error``, so the slot frees."""
    backend, client, realtime, task = await _live_session()

    def broken(self, ev, cid):
        raise RuntimeError("a bug in the Live reader")

    monkeypatch.setattr(LiveChannel, "_handle", broken)
    client.client("session.input_audio.mute", event_id="c_mute")
    await asyncio.wait_for(task, 2)
    assert realtime.end_reason == "worker_error" and realtime.close_code == 1011
    assert client.closed_with == 1011
    assert client.of("error")[-1]["error"]["type"] == "server_error"
    assert client.of("session.closed"), "the client is told the session ended"
    assert not client.invalid, client.invalid[:5]
    backend.close()


async def test_a_delegation_update_after_one_that_cleared_its_responses_is_answered():
    """Found by sweeping odd but valid Live events through the channel: ``responses: null`` in one
    update made the next update's merge raise (a dead reader before; a worker_error now)."""
    client = QuietClient()
    live = await _started(client, delegation={"type": "responses", "responses": {"model": "omni"}})
    for cid, responses in (("c_null", None), ("c_tools", {"model": "omni", "tools": []})):
        client.event("session.update", event_id=cid, session={"delegation": {"type": "responses",
                                                                              "responses": responses}})
        assert json.loads(await asyncio.wait_for(live.receive(), 1))["type"] == "session.update"
        await live.send(json.dumps({"type": "session.updated", "session": {}}))
    client.event("session.input_audio.mute", event_id="c_mute")  # the reader reads on
    await asyncio.sleep(0.05)
    assert [e.get("client_event_id") for e in client.sent if e["type"] == "session.updated"] == ["c_null", "c_tools"]
    assert client.sent[-1]["type"] == "session.input_audio.muted"
    await live.close()


# ---------------------------------------------------------------- bounded queues


class QuietClient(SessionChannel):
    """A Live client whose events the test puts in (``event``); what it is sent is kept in
    ``sent`` (or, ``reading`` False, never taken: a client that stopped reading its socket)."""

    def __init__(self, reading: bool = True) -> None:
        super().__init__()
        self.reading = reading
        self.closed_with: int | None = None

    @property
    def sent(self) -> list[dict]:
        return self.events

    async def send(self, message: str) -> None:  # Live events: not checked against the Realtime types
        if not self.reading:
            await asyncio.Event().wait()  # the socket's buffers are full: this send never ends
        self.events.append(json.loads(message))
        self.arrived.set()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed_with = code

    event = SessionChannel.client

    def errors(self) -> list[str]:
        return [e["error"]["code"] for e in self.sent if e["type"] == "error"]


async def _started(client: QuietClient, **session) -> LiveChannel:
    """A LiveChannel, started, with the test as the session under it."""
    live = LiveChannel(client, "sess_q", "omni", max_session_s=600)
    client.event("session.start", session={"model": "gpt-live-1", **session})
    update = json.loads(await live.receive())
    assert update["type"] == "session.update"
    await live.send(json.dumps({"type": "session.updated", "session": {}}))
    assert live.started
    return live


async def _take(live: LiveChannel, until) -> list[dict]:
    """Take the channel's events for the session (answering none) until ``until()`` holds."""
    taken = []
    async with asyncio.timeout(5):
        while not until():
            try:
                taken.append(json.loads(await asyncio.wait_for(live.receive(), 0.05)))
            except TimeoutError:
                pass
    return taken


async def test_response_requests_past_the_bound_are_refused_not_queued():
    """Issue 68: 600,000 ``response.create`` queued behind one reply (+166 MiB). Past
    ``MAX_WAITING_RESPONSES`` each gets ``too_many_pending_requests``; the queue stays bounded."""
    client = QuietClient()
    live = await _started(client, delegation={"type": "responses", "responses": {"model": "omni", "tools": []}})
    extra = 20
    for i in range(MAX_WAITING_RESPONSES + 1 + extra):  # one is made now, the rest wait for it
        client.event("response.create", event_id=f"c_{i}")
    taken = await _take(live, lambda: len(client.errors()) >= extra)
    await asyncio.sleep(0.05)
    assert client.errors() == ["too_many_pending_requests"] * extra
    assert len(live._waiting) == MAX_WAITING_RESPONSES
    assert [e["type"] for e in taken] == ["response.create"]
    await live.close()


async def test_context_appends_and_updates_the_session_never_answers_are_bounded():
    """Appends wait for their item to be added, updates for ``session.updated``: past
    ``MAX_UNANSWERED`` unanswered ones each gets ``too_many_pending_requests``; an answer that is an
    error frees its place (it used to stay forever)."""
    client = QuietClient()
    live = await _started(client)
    for i in range(MAX_UNANSWERED + 5):
        client.event("session.instructions.append", event_id=f"c_i{i}", content="Be brief.", delegation_id=None)
    taken = await _take(live, lambda: len(client.errors()) >= 5)
    await asyncio.sleep(0.05)
    assert client.errors() == ["too_many_pending_requests"] * 5 and len(live._acks) == MAX_UNANSWERED
    refused = taken[0]  # the session refuses the first item: its place is free again
    await live.send(json.dumps({"type": "error", "event_id": "evt_1", "error": {
        "type": "invalid_request_error", "code": "invalid_value", "message": "no", "event_id": refused["event_id"]}}))
    await asyncio.sleep(0.05)
    assert len(live._acks) == MAX_UNANSWERED - 1
    assert client.sent[-1]["type"] == "error" and client.sent[-1]["client_event_id"] == "c_i0"

    for i in range(MAX_UNANSWERED + 3):
        client.event("session.update", event_id=f"c_u{i}", session={"instructions": "Be brief."})
    await _take(live, lambda: len(client.errors()) >= 5 + 1 + 3)
    assert client.errors()[-3:] == ["too_many_pending_requests"] * 3 and len(live._pending) == MAX_UNANSWERED
    await live.close()


async def test_a_client_that_stops_reading_is_closed_not_buffered_for():
    """A client that sends and never reads: the events for it stop at ``MAX_OUTBOX`` and the
    session ends with 1008, as the Realtime path's send-queue limit does."""
    client = QuietClient()
    live = await _started(client)
    client.reading = False
    for i in range(live_channel.MAX_OUTBOX + 50):
        client.event("session.input_audio.mute", event_id=f"c_{i}")
    with pytest.raises(ChannelClosed) as closed:
        await _take(live, lambda: False)
    assert closed.value.code == 1008 and client.closed_with == 1008
    assert len(live._outbox) <= live_channel.MAX_OUTBOX


async def test_what_the_channel_remembers_per_reply_and_per_turn_stays_bounded():
    """Per-turn and per-reply bookkeeping (speech times, transcripts made, audio sent) keeps only
    recent entries: a long session of short turns does not grow it."""
    client = QuietClient()
    live = await _started(client)
    for i in range(3 * MAX_REMEMBERED):
        await live.send(json.dumps({"type": "input_audio_buffer.speech_started", "item_id": f"u{i}",
                                    "audio_start_ms": i}))
        await live.send(json.dumps({"type": "response.output_audio_transcript.delta", "item_id": f"a{i}",
                                    "delta": "word "}))
        await live.send(json.dumps({"type": "response.output_audio.delta", "item_id": f"a{i}",
                                    "delta": base64.b64encode(b"\x00\x00" * 24).decode()}))
    await asyncio.sleep(0.1)
    assert len(live._speech) <= MAX_REMEMBERED
    assert len(live._made) <= MAX_REMEMBERED
    assert len(live.pacer.sent_ms) <= MAX_REMEMBERED
    assert len(live.pacer.sent_text) <= MAX_REMEMBERED
    await live.close()


# ---------------------------------------------------------------- credentials


async def test_mcp_credentials_never_leave_the_server_in_a_live_event():
    """Issue 68: ``session.started`` / ``updated`` / ``closed`` echoed a delegation's MCP
    ``authorization`` and ``headers``. They are redacted as the recording redacts them; the
    session still passes them on to the Realtime session under it (its MCP client needs them)."""
    client = QuietClient()
    live = await _started(client, delegation={"type": "responses", "responses": {"model": "omni", "tools": [MCP]}})
    client.event("session.update", event_id="c_upd", session={"delegation": {"type": "responses", "responses": {
        "tools": [MCP, {**MCP, "server_label": "crm2"}]}}})
    update = json.loads(await live.receive())
    assert SECRET_TOKEN in json.dumps(update), "the credentials still reach the session's own MCP client"
    await live.send(json.dumps({"type": "session.updated", "session": {}}))
    await live.close()
    kinds = [e["type"] for e in client.sent]
    assert {"session.started", "session.updated", "session.closed"} <= set(kinds), kinds
    out = json.dumps(client.sent)
    assert SECRET_TOKEN not in out and SECRET_HEADER not in out
    started = next(e for e in client.sent if e["type"] == "session.started")
    tool = started["session"]["delegation"]["responses"]["tools"][0]
    assert tool["server_url"] == MCP["server_url"] and tool["authorization"] == "[redacted]"
    assert tool["headers"] == {"X-Api-Key": "[redacted]"}


async def test_a_client_that_stops_reading_stops_the_reply_audio_queue_too():
    """The reply's audio waits in the pacer at real-time pace; with a client that stopped reading
    it would hold every reply after it. Past ``MAX_QUEUED_MS`` the pacer takes no more and says so."""
    import time

    from worker.live.pacer import MAX_QUEUED_MS, Pacer

    overflows = []

    async def stuck(event):
        await asyncio.Event().wait()  # the client's socket takes nothing

    pacer = Pacer(stuck, time.monotonic(), on_overflow=lambda: overflows.append(1))
    piece = {"type": "session.output_audio.delta", "delta": ""}
    for _ in range(MAX_QUEUED_MS // 1000 + 10):  # one-second pieces
        pacer.audio(dict(piece), 1000.0, "item_1")
    await asyncio.sleep(0.05)
    assert overflows and pacer.queued_ms <= MAX_QUEUED_MS
    pacer.stop()


# ---------------------------------------------------------------- the WebRTC edge


def test_the_webrtc_edge_peeks_at_a_client_event_through_the_same_parsing_path():
    """The call's channel reads a client's ``session.update`` to pin its formats: a nested bomb
    that looks like one is passed on for the worker to refuse (``nesting_too_deep``), not an
    exception in aiortc's data-channel callback."""
    from gateway.realtime.webrtc.channel import WebRTCChannel

    channel = WebRTCChannel()
    bomb = '{"type":"session.update","session":{"metadata":' + BOMB + "}}"
    assert channel._from_client(bomb)
    assert channel._inbox.get_nowait() == bomb
    channel._from_client(json.dumps({"type": "session.update", "session": {"audio": {"output": {
        "format": {"type": "audio/pcmu"}}}}}))
    pinned = json.loads(channel._inbox.get_nowait())
    assert pinned["session"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
