"""A Live client as the ``EventChannel`` a ``RealtimeSession`` talks to: the dialect translated both ways.

The Realtime session keeps everything it already does (turn detection with yield and resume,
backchannels, tools, limits, recording, metrics); this channel only changes the words:

- ``session.start`` / ``session.update`` become a ``session.update`` (semantic turn detection,
  transcription on, the format and voice, function tools from Responses delegation) and the
  startup ``input`` items; the next ``session.updated`` answers as ``session.started`` /
  ``session.updated``;
- microphone appends become ``input_audio_buffer.append`` (silence while muted; ``microphone.py``);
- instructions, thinking and commentary appends become system messages (commentary then asks for
  a reply that says it), acknowledged once the session added them;
- the user's transcript, the reply's audio and transcript go out as Live deltas with their times
  on the session's timeline; the reply's audio at real-time pace (``pacer.py``), dropped the
  moment the user's voice takes the floor;
- a function call of the model is a delegation to ``responses``: ``session.delegation.created``
  and the call as ``response.event``s; ``response.item.create`` / ``response.create`` bring the
  output back and continue; with client delegation, a call of the hidden delegation function is
  a delegation to ``client`` (``delegation.py``);
- ``session.close`` drains the reply being spoken (at most ``CLOSE_DRAIN_S``), then
  ``session.closed``.

The session hands this channel its events as dicts (``send_event``: translated before anything is
serialised) and the reply's audio as PCM; it becomes base64 in JSON only for a WebSocket client,
and a call's gateway gets it (and sends the microphone) as binary frames (``core/audio_frames.py``).

The client's messages are read as the Realtime session reads its own (``parse_client_json``): a
hostile one is an ``error`` and the session goes on; anything else that goes wrong in the reader
ends the session at once (close 1011, ``worker_error``), so the slot never waits for an idle
timeout. Every queue the client can fill here is bounded (the constants below): past its bound a
request gets ``too_many_pending_requests``, and a client that stops reading is closed (1008).
Credentials in the config the client sent are redacted in every event built from it.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from core.audio_frames import read_mic_frame, reply_frame
from core.cascade.tool_calls import DELEGATION_TOOL
from core.config import LimitsConfig
from core.conversation.replies import words_after
from core.ids import new_id
from core.json_limits import parse_client_json
from core.live_events import (
    CLOSE_DRAIN_S,
    DEFAULT_FORMAT,
    expires_at,
    live_error,
    live_event,
    parse_client_event,
    session_resource,
)
from core.protocol import EXTENSION_EVENTS, ProtocolError
from core.transport import ChannelClosed, EventChannel, Message
from worker.live.config import initial_message, realtime_update
from worker.live.delegation import ACKNOWLEDGE, Delegations
from worker.live.fork import forked_start, stored_session
from worker.live.microphone import LiveMicrophone
from worker.live.pacer import Pacer, remember
from worker.session import CLOSE_SLOW_CLIENT, LIMIT_CODES, SEND_QUEUE_LIMIT, SLOW_CLIENT

log = logging.getLogger(__name__)

# Events for the session not taken yet: past this the reader waits, so a client that sends faster
# than the session takes (a flood of appends) is held back by its socket, not buffered here.
MAX_PENDING = 256
# Start/update requests and context appends waiting for the session's answer (``_pending``,
# ``_acks``). The reader runs at most MAX_PENDING events ahead of the session, so twice that
# leaves room for answers in flight; past it answers were lost and the client is refused.
MAX_UNANSWERED = 2 * MAX_PENDING
# Response requests waiting behind the reply being made (``_waiting``): a client continues one
# delegation at a time and commentary comes a few at a time; past this it is a flood (issue 68:
# 600,000 of them, +166 MiB) and each one more is refused.
MAX_WAITING_RESPONSES = 16
# Events for the client outside the reply's pacing not yet written (``_outbox``): as many as the
# Realtime session holds for a client (its send queue); past it the client is not reading: 1008.
MAX_OUTBOX = SEND_QUEUE_LIMIT
TOO_MANY = "too_many_pending_requests"
INTERNAL = "live_"  # event ids of the Realtime events this channel makes itself (their errors are logged)
CLOSE_REASONS = {4003: "expired", 4001: "expired", 4002: "expired"}  # the session's own limits
SAY_COMMENTARY = "Say this to the user now, briefly and in your own words: "
SILENT_THINKING = "Context for you (do not read it out): "
# The output of the hidden delegation function's call: the request is with the application.
HANDED_OVER = "Handed to the application; its answer will come as a message to say."


class LiveChannel(EventChannel):
    """Live outside, Realtime inside. ``inner`` is the client's channel."""

    def __init__(self, inner: EventChannel, session_id: str, model: str, max_session_s: float,
                 client_extensions: frozenset[str] = frozenset(),
                 turn_types: tuple[str, ...] = ("server_vad", "semantic_vad"),
                 max_message_bytes: int = LimitsConfig().max_message_bytes,
                 client_left: asyncio.Event | None = None, binary_audio: bool = False,
                 fork: dict[str, Any] | None = None) -> None:
        self.inner = inner
        self.fork = fork  # a stored session this one forks (worker/live/fork.py): its session.start holds overrides
        self.binary_audio = binary_audio  # the microphone may come as binary frames (a call, via its gateway)
        # Set once the client has gone (``worker/read_ahead.py``): the reader stops waiting for the
        # session to take what is pending and learns of it, so a flood is not worked through first.
        self.client_left = client_left if client_left is not None else asyncio.Event()
        self.max_message_bytes = max_message_bytes
        self.on_limit: Callable[[str], None] | None = None  # the worker's limit counter (worker/app.py)
        # Who decides turns: a backend that does it itself (MiniCPM-o's duplex mode) natively,
        # any other by the semantic turn policy (end of turn, backchannels, barge-in with resume).
        self.turn_detection = {"type": "model_duplex" if "model_duplex" in turn_types else "semantic_vad"}
        self.client_extensions = client_extensions  # extension events the client (or gateway) asked for
        self.transport = inner.transport
        self.session_id = session_id
        self.model = model
        self.max_session_s = max_session_s
        self.origin = time.monotonic()  # the session timeline's zero
        self.config: dict[str, Any] = {}  # the Live session config, resolved
        self.started = False
        self.closed = False
        self.microphone = LiveMicrophone(INTERNAL)  # what the session hears, muted or not; usage.seconds
        # Events for the session, or why it ends (the client left, or the reader failed).
        self._to_session: asyncio.Queue[Message | BaseException] = asyncio.Queue()
        self._taken = asyncio.Event()  # the session took an event (room for the reader)
        self._reader: asyncio.Task | None = None
        self._send_lock = asyncio.Lock()
        self._outbox: collections.deque[dict[str, Any]] = collections.deque()
        self._writer: asyncio.Task | None = None
        self._pending: list[tuple[str, str | None, str]] = []  # (start|update, client event id, internal id)
        self._acks: dict[str, tuple[str, str | None, bool]] = {}  # item id -> (ack type, client id, speak)
        # Per turn and per reply, the recent ones only (``MAX_REMEMBERED``): a long session of short
        # turns does not grow them.
        self._speech: dict[str, list[int]] = {}  # user item id -> [start_ms, end_ms]
        self._responding: str | None = None
        # Response requests go one at a time: the one sent (its event id, the delegation it
        # continues) until its response.created, the others after the reply being made.
        self._creating: tuple[str, str | None] | None = None
        self._waiting: list[tuple[dict[str, Any], str | None]] = []
        self._made: dict[str, str] = {}  # item id -> its transcript as made (sent or not)
        self._resuming: dict[str, str] = {}  # a resumed reply's item id -> the cut item it goes on with
        self._closing: asyncio.Task | None = None
        self.pacer = Pacer(self._emit, self.origin, on_overflow=self._not_reading)
        self.delegations = Delegations(self.pacer.event, self._acknowledge, self._now_ms)

    # ------------------------------------------------------------------ EventChannel, the session's side

    async def receive(self) -> Message:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        got = await self._to_session.get()
        self._taken.set()
        if isinstance(got, BaseException):
            self._to_session.put_nowait(got)  # every later receive raises too
            raise got
        return got

    takes_events = True  # the session's events arrive as dicts, its reply's audio as PCM

    async def send_event(self, event: dict[str, Any]) -> None:
        if not self.closed:
            self._from_session(event)

    async def send(self, message: Message) -> None:
        if isinstance(message, str) and not self.closed:
            self._from_session(json.loads(message))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed:
            return
        if self.started:
            await self._flush_direct()
            await self._send_closed(CLOSE_REASONS.get(code, "close_requested" if code == 1000 else "connection_lost"))
        await self._shut(code, reason)

    async def _shut(self, code: int, reason: str) -> None:
        self.closed = True
        self.delegations.cancel_acknowledgement()
        self.pacer.stop()
        if self._reader is not None:
            self._reader.cancel()
        self._to_session.put_nowait(ChannelClosed(code, reason))
        await self.inner.close(code, reason)

    # ------------------------------------------------------------------ out to the client

    def _reply_audio(self, delta: str | bytes, item_id: str) -> None:
        """The reply's audio (PCM from the session, or base64 sent as text), paced out as Live's one
        stream."""
        size = len(delta) if isinstance(delta, bytes) else len(delta) * 3 // 4
        # Live has one audio format both ways: the microphone's rate is the reply's
        self.pacer.audio({"type": "session.output_audio.delta", "delta": delta},
                         size * 1000 / self.microphone.bytes_per_s, item_id)

    async def _emit(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        if isinstance(delta, bytes) and self.binary_audio:  # a call's gateway takes it as a binary frame
            message: Message = reply_frame("live", "", delta, self.config["format"].get("rate", 24000))
        else:
            if isinstance(delta, bytes):  # the one place a Live client's audio becomes base64
                event = {**event, "delta": base64.b64encode(delta).decode("ascii")}
            message = json.dumps(event, separators=(",", ":"))
        async with self._send_lock:
            with contextlib.suppress(ChannelClosed):
                await self.inner.send(message)

    def _now_ms(self) -> int:
        return round((time.monotonic() - self.origin) * 1000)

    def _direct(self, event: dict[str, Any]) -> None:
        """Not tied to the reply's audio: out now, in order with the other such events, through one
        short-lived writer (not a task per event)."""
        if len(self._outbox) >= MAX_OUTBOX:
            self._not_reading()
            return
        self._outbox.append(event)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _flush_direct(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer

    async def _write(self) -> None:
        while self._outbox:
            await self._emit(self._outbox.popleft())

    def _not_reading(self) -> None:
        """The client stopped reading: what is queued for it is dropped and the session ends with
        1008, as the Realtime session's send-queue limit ends it (nothing more is written: the
        socket does not take it)."""
        if self.closed:
            return
        log.warning("session %s: %s", self.session_id, SLOW_CLIENT)
        self.closed = True
        self._outbox.clear()
        if self._writer is not None:
            self._writer.cancel()
        asyncio.get_running_loop().create_task(self._shut(CLOSE_SLOW_CLIENT, SLOW_CLIENT))

    def _resource(self) -> dict[str, Any]:
        return session_resource(self.session_id, self.model, self.config, expires_at(self.max_session_s))

    async def _send_closed(self, reason: str, cid: str | None = None) -> None:
        await self._emit(live_event("session.closed", cid, reason=reason, session=self._resource(),
                                    usage={"seconds": round(self.microphone.seconds, 3)}))

    # ------------------------------------------------------------------ in from the client

    def _push(self, event: dict[str, Any]) -> None:
        self._to_session.put_nowait(json.dumps(event, separators=(",", ":")))

    async def _read(self) -> None:
        """The client's events, one by one. It never ends silently: the client leaving or any
        failure goes to the session (its ``receive`` raises it), which ends at once."""
        try:
            while True:
                try:
                    message = await self.inner.receive()
                except ChannelClosed as exc:
                    while not self._to_session.empty():  # the client is gone: what it sent is unheard
                        self._to_session.get_nowait()
                    self._to_session.put_nowait(exc)
                    return
                self._take(message)
                while self._to_session.qsize() >= MAX_PENDING and not self.client_left.is_set():
                    self._taken.clear()  # the session is behind: stop reading (the socket's own
                    await _first(self._taken, self.client_left)  # buffers then hold the client back)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug, not the client's input (that is a ProtocolError)
            log.exception("session %s: the Live reader failed; the session ends", self.session_id)
            self._to_session.put_nowait(exc)

    def _take(self, message: Message) -> None:
        """One client message: handled, or refused with a Live ``error`` (the session goes on)."""
        client_id = None
        try:
            if isinstance(message, bytes) and self.binary_audio:
                self._microphone(message)
                return
            event = parse_client_json(message, self.max_message_bytes)
            if isinstance(event.get("event_id"), str):
                client_id = event["event_id"]
            self._handle(parse_client_event(event, fork=self.fork is not None), client_id)
        except ProtocolError as exc:
            if exc.code in LIMIT_CODES and self.on_limit is not None:
                self.on_limit(exc.code)
            self._direct(live_error(exc.message, exc.code, exc.param, client_id))

    def _room(self, waiting: int, limit: int, what: str) -> None:
        """``ProtocolError`` when ``waiting`` requests already wait (bounded queues, issue 68)."""
        if waiting >= limit:
            raise ProtocolError(f"{limit} {what} are already waiting for the session; wait for their answers "
                                "before sending more", code=TOO_MANY)

    def _handle(self, ev: dict[str, Any], cid: str | None) -> None:
        kind = ev["type"]
        if self._closing is not None:
            if kind == "session.input_audio.append":
                return  # the microphone goes on while the reply drains (a call's track does): unheard
            raise ProtocolError("the session is closing", code="session_closing")
        if kind == "session.start":
            if self.started or self._pending:
                raise ProtocolError("the session has already started", code="session_already_started")
            self._start(forked_start(self.fork, ev["session"]) if self.fork is not None else ev["session"], cid)
            return
        if not self.started:
            raise ProtocolError(f"send session.start and wait for session.started before {kind}",
                                code="session_not_started")
        if kind == "session.input_audio.append":
            self._to_session.put_nowait(self.microphone.append(ev["audio"]))
        elif kind in ("session.input_audio.mute", "session.input_audio.unmute"):
            self.microphone.muted = kind.endswith(".mute")
            self._direct(live_event("session.input_audio.muted" if self.microphone.muted
                                    else "session.input_audio.unmuted", cid))
        elif kind in ("session.instructions.append", "session.thinking.append", "session.commentary.append"):
            self._context(kind, ev, cid)
        elif kind == "session.update":
            self._room(len(self._pending), MAX_UNANSWERED, "session updates")
            self._update(ev["session"], cid)
        elif kind == "response.item.create":
            self._response_item(ev["item"], cid)
        elif kind == "response.create":
            if self._delegation_type() != "responses":
                raise ProtocolError("response.create needs Responses delegation (session.delegation.type "
                                    "'responses')", code="delegation_not_responses")
            self._room(len(self._waiting), MAX_WAITING_RESPONSES, "response requests")
            delegation = self.delegations.continues()
            self._request_response({"type": "response.create", "event_id": cid or new_id(INTERNAL)}, delegation)
        elif kind == "session.close":
            self._closing = asyncio.get_running_loop().create_task(self._drain_and_close(cid))
        else:  # decisions, output audio fixtures
            raise ProtocolError(f"{kind} is not supported by this server yet", code="unsupported_event", param="type")

    def stored(self, items: list) -> dict[str, Any] | None:
        """What a fork of this session will start from, if it asked to be stored (``store``)."""
        return stored_session(self.model, self.config, items)

    # ------------------------------------------------------------------ client events, one by one

    def _start(self, s: dict[str, Any], cid: str | None) -> None:
        update, self.microphone.bytes_per_s = realtime_update(s, self.turn_detection)
        voice = update["audio"]["output"]["voice"]
        self.config = {"format": (s.get("audio") or {}).get("format") or DEFAULT_FORMAT, "voice": voice,
                       "delegation": s.get("delegation"), "instructions": s.get("instructions"),
                       "input": s.get("input"), "store": s.get("store")}
        self.microphone.format = self.config["format"].get("type", "audio/pcm")
        internal = new_id(INTERNAL)
        self._pending.append(("start", cid, internal))
        self._push({"type": "session.update", "event_id": internal, "session": update})
        for item in s.get("input") or []:
            self._push({"type": "conversation.item.create", "event_id": new_id(INTERNAL), "item": initial_message(item)})

    def _update(self, s: dict[str, Any], cid: str | None) -> None:
        if s.get("triggers"):
            raise ProtocolError("Decisions triggers are not supported by this server yet", code="unsupported_value",
                                param="session.triggers")
        delegation = s.get("delegation")
        current = self._delegation_type() or "client"
        if delegation is not None and delegation.get("type") != current:
            raise ProtocolError("the delegation type cannot change", code="invalid_value",
                                param="session.delegation.type")
        internal = new_id(INTERNAL)
        self._pending.append(("update", cid, internal))
        self._push({"type": "session.update", "event_id": internal, "session": realtime_update(s)[0]})
        if delegation is not None:
            merged = dict(self.config.get("delegation") or {})
            for key, value in delegation.items():
                before = merged.get(key)
                merged[key] = {**(before if isinstance(before, dict) else {}), **value} if isinstance(value, dict) else value
            self.config["delegation"] = merged

    def _microphone(self, frame: bytes) -> None:
        """A binary microphone frame from a call: dropped while the session closes."""
        if self._closing is not None:
            read_mic_frame(frame)  # a bad one is still refused
            return
        if not self.started:
            raise ProtocolError("send session.start and wait for session.started before the microphone",
                                code="session_not_started")
        self._to_session.put_nowait(self.microphone.frame(frame))

    def _delegation_type(self) -> str | None:
        """``client`` or ``responses`` as the session set it; None: no delegation named."""
        return (self.config.get("delegation") or {}).get("type")

    def _context(self, kind: str, ev: dict[str, Any], cid: str | None) -> None:
        if ev.get("delegation_id") is not None and self._delegation_type() == "responses":
            raise ProtocolError("delegation_id is not accepted with Responses delegation", code="invalid_value",
                                param="delegation_id")
        if ev.get("delegation_id") is not None and ev["delegation_id"] not in self.delegations.known:
            raise ProtocolError(f"no delegation {ev['delegation_id']!r} in this session", code="invalid_value",
                                param="delegation_id")
        self._room(len(self._acks), MAX_UNANSWERED, "context appends")
        speak = kind == "session.commentary.append"
        if speak:  # its reply waits with the others
            self._room(len(self._waiting) + self._speaking(), MAX_WAITING_RESPONSES, "response requests")
        text = ev["content"]
        self.delegations.cancel_acknowledgement()  # any commentary or thinking cancels it, as Live
        if speak:
            text = SAY_COMMENTARY + text
        elif kind == "session.thinking.append":
            text = SILENT_THINKING + text
        item_id = new_id("item")
        internal = new_id(INTERNAL)
        self._acks[item_id] = (kind.removesuffix("append") + "appended", cid, speak, internal)
        self._push({"type": "conversation.item.create", "event_id": internal,
                    "item": {"id": item_id, "type": "message", "role": "system",
                             "content": [{"type": "input_text", "text": text}]}})

    def _response_item(self, item: dict[str, Any], cid: str | None) -> None:
        kind = item.get("type")
        if kind == "function_call_output":
            self.delegations.output(item.get("call_id"))
            output = item.get("output")
            if not isinstance(output, str):
                output = json.dumps(output)
            created = {"type": "function_call_output", "call_id": item.get("call_id"), "output": output}
        elif kind in (None, "message") and item.get("role") in ("user", "system", "developer"):
            content = item.get("content")
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
            created = initial_message({"role": item["role"], "content": [{"text": text}]})
        else:
            raise ProtocolError(f"response.item.create: item type {kind!r} is not supported by this server; use "
                                "'function_call_output' or a message", code="unsupported_value", param="item.type")
        self._push({"type": "conversation.item.create", "event_id": cid or new_id(INTERNAL), "item": created})

    async def _drain_and_close(self, cid: str | None) -> None:
        """Let the reply being spoken finish (at most ``CLOSE_DRAIN_S``), then ``session.closed``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_DRAIN_S):
                while self._responding is not None:
                    await asyncio.sleep(0.05)
                await self.pacer.idle()
        await self._flush_direct()
        if self.closed:
            return
        await self._send_closed("close_requested", cid)
        await self._shut(1000, "session closed")

    # ------------------------------------------------------------------ in from the session

    def _from_session(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind in EXTENSION_EVENTS:
            if kind == "response.resumed":
                remember(self._resuming, ev["item_id"], ev["resumed_item_id"])
            if kind in self.client_extensions:  # asked for by the client (or the gateway, for its figures)
                self._direct(ev)
        elif kind == "session.updated":
            self._updated()
        elif kind == "error":
            self._error(ev["error"])
        elif kind == "conversation.item.added":
            self._added(ev["item"])
        elif kind == "input_audio_buffer.speech_started":
            # The user's voice has the floor: what is not sent is not heard, and what was sent is
            # (a Live client plays all it gets), so the cut item is truncated there: a reply that
            # resumes after a backchannel starts where the listener's audio ended.
            playing = self.pacer.still_playing()
            dropped = self.pacer.flush()
            item = playing or (self.pacer.last_item if dropped else None)
            if item:
                self._push({"type": "conversation.item.truncate", "event_id": new_id(INTERNAL), "item_id": item,
                            "content_index": 0, "audio_end_ms": int(self.pacer.sent_ms.get(item, 0))})
            remember(self._speech, ev["item_id"], [ev.get("audio_start_ms", self._now_ms()), self._now_ms()])
        elif kind == "input_audio_buffer.speech_stopped":
            speech = self._speech.get(ev["item_id"]) or remember(self._speech, ev["item_id"], [self._now_ms(), 0])
            speech[1] = ev.get("audio_end_ms", self._now_ms())
        elif kind == "conversation.item.input_audio_transcription.completed":
            text = (ev.get("transcript") or "").strip()
            start, end = self._speech.pop(ev["item_id"], [self._now_ms(), self._now_ms()])
            if text:
                self._direct(live_event("session.input_transcript.delta", delta=" " + text, start_ms=int(start),
                                        end_ms=int(max(start, end))))
        elif kind == "response.created":
            self._responding = ev["response"]["id"]
            creating, self._creating = self._creating, None
            if creating is not None and creating[1] is not None:
                self.delegations.created(self._responding, creating[1])
        elif kind == "response.output_audio.delta":
            self._reply_audio(ev["delta"], ev.get("item_id", ""))
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            self._transcript(ev.get("item_id", ""), ev.get("delta") or "")
        elif kind == "response.output_item.done" and ev["item"].get("type") == "function_call":
            if ev["item"].get("name") == DELEGATION_TOOL["name"] and self._delegation_type() == "client":
                self.delegations.to_client(ev["response_id"])
                self._push({"type": "conversation.item.create", "event_id": new_id(INTERNAL), "item": {
                    "type": "function_call_output", "call_id": ev["item"].get("call_id"), "output": HANDED_OVER}})
            else:
                self.delegations.called(ev["response_id"], ev["item"])
        elif kind == "response.done":
            self._response_done(ev["response"])

    def _transcript(self, item: str, delta: str) -> None:
        """A transcript delta of the reply, out with its audio. A reply that resumes a cut one
        starts with the word the cut fell in, whose text the listener already got with its
        first sound: those words are not sent twice."""
        remember(self._made, item, self._made.get(item, "") + delta)
        cut = self._resuming.pop(item, None)
        if cut is not None:
            heard = len(self._made.get(cut, "").split()) - len(delta.split())  # words the worker says were heard
            extra = len(self.pacer.sent_text.get(cut, "").split()) - heard
            if extra > 0:
                delta = words_after(delta, extra)
                delta = " " + delta if delta else ""
        if delta:
            self.pacer.timed(live_event("session.output_transcript.delta", delta=delta), item)

    def _updated(self) -> None:
        if not self._pending:
            return
        what, cid, _ = self._pending.pop(0)
        if what == "start":
            self.started = True
            self._direct(live_event("session.started", cid, session=self._resource()))
        else:
            self._direct(live_event("session.updated", cid, session=self._resource()))

    def _error(self, error: dict[str, Any]) -> None:
        about = error.get("event_id")
        if self._creating is not None and about == self._creating[0]:  # the response was refused
            self._creating = None
            self._next_response()
        failed = next((p for p in self._pending if p[2] == about), None)
        acked = next((item for item, ack in self._acks.items() if ack[3] == about), None)
        if failed is not None:  # a start or update the session refused: the client's own event
            self._pending.remove(failed)
            about = failed[1]
        elif acked is not None:  # a context append the session refused: never acknowledged now
            about = self._acks.pop(acked)[1]
        elif isinstance(about, str) and about.startswith(INTERNAL):
            log.warning("the session refused an event this channel made: %s", error.get("message"))
            return
        self._direct(live_error(error.get("message") or "error", error.get("code") or "error", error.get("param"),
                                about, error.get("type") or "invalid_request_error"))

    def _added(self, item: dict[str, Any]) -> None:
        ack = self._acks.pop(item.get("id"), None)
        if ack is None:
            return
        kind, cid, speak, _ = ack
        now = self._now_ms()
        self._direct(live_event(kind, cid, start_ms=now, end_ms=now))
        if speak:  # said, never a call (a delegation's result must not be delegated again)
            self._request_response({"type": "response.create", "event_id": new_id(INTERNAL),
                                    "response": {"tool_choice": "none"}})

    def _request_response(self, event: dict[str, Any], delegation: str | None = None) -> None:
        """Ask the session for a response now, or after the one being made. The client's requests
        were checked against ``MAX_WAITING_RESPONSES``; an acknowledgement past it is not said."""
        if self._responding is None and self._creating is None:
            self._creating = (event["event_id"], delegation)
            self._push(event)
        elif len(self._waiting) < MAX_WAITING_RESPONSES:
            self._waiting.append((event, delegation))
        else:
            log.warning("session %s: %d response requests waiting; one of the channel's own dropped",
                        self.session_id, len(self._waiting))

    def _speaking(self) -> int:
        """Commentary appends not yet added: each asks for a reply once it is."""
        return sum(1 for ack in self._acks.values() if ack[2])

    def _next_response(self) -> None:
        if self._waiting and self._closing is None and self._responding is None and self._creating is None:
            self._request_response(*self._waiting.pop(0))

    def _acknowledge(self) -> None:
        """A delegation's spoken acknowledgement: a reply of its own, outside the conversation."""
        self._request_response({"type": "response.create", "event_id": new_id(INTERNAL), "response": {
            "conversation": "none", "instructions": ACKNOWLEDGE, "tool_choice": "none"}})

    def _response_done(self, response: dict[str, Any]) -> None:
        self._responding = None
        # Said only when the session asks for it (acknowledgement_delay_ms set): told to just say
        # "One moment.", the cascade's small model invented the answer instead (seen with Pipecat:
        # "The weather in London today is quite exceptional..." before the function's result).
        delay = (self.config.get("delegation") or {}).get("acknowledgement_delay_ms")
        self.delegations.done(response, delay)
        self.pacer.event(live_event("session.usage.updated", usage={"seconds": round(self.microphone.seconds, 3)}))
        self._next_response()


async def _first(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
