"""``WebRTCChannel``: a call as the ``EventChannel`` the realtime proxy runs on.

``receive()`` yields what the worker should get: the client's events from the ``oai-events`` data
channel, the microphone's audio as binary frames (``tracks.py``, ``core/audio_frames.py``), and the
few client events the gateway itself sends for the call (a truncate after barge-in, a cancel after
a client's clear). ``send()`` routes the worker's messages: the reply's audio comes as binary
frames (the worker's socket is opened with ``media=frames``), encoded to Opus off the event loop
and queued for the outbound track (``Playback``), never sent on the data channel; every event goes
to the data channel as the same JSON text the WebSocket carries. Events sent before the data channel is open wait for it.

The channel watches a few events on the way (the type is read from the text's head, so most events
are never parsed): ``session.created`` starts the media, ``session.updated`` says whether barge-in
applies, ``input_audio_buffer.speech_started`` during playback is a barge-in, ``response.done``
lets the buffer say ``stopped``; and ``error`` events answering the gateway's own events are kept
from the client. The client's ``output_audio_buffer.clear`` is handled here, not forwarded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from core.audio_frames import read_reply_frame
from core.config import LimitsConfig
from core.json_limits import BINARY_REFUSED, parse_client_json
from core.protocol import ProtocolError, error_event
from core.transport import ChannelClosed, EventChannel, Message
from gateway.realtime.budget import CLOSE_POLICY, InboundBudget
from gateway.realtime.webrtc.playback import FRAME_MS, GATEWAY_EVENT_PREFIX, Playback
from gateway.realtime.webrtc.session import interrupts, pin_update
from gateway.realtime.webrtc.tracks import AUDIO_EXECUTOR, OpusFramer

if TYPE_CHECKING:
    from aiortc import RTCDataChannel

log = logging.getLogger(__name__)

MAX_PENDING = 1024  # events for the client before its data channel opened
MAX_INBOX = 1000  # events for the worker not yet taken (40 s of microphone): a stalled relay drops audio
EARLY_AUDIO_APPENDS = 75  # the microphone's last 3 s before the session starts, kept for it
MAX_BUFFERED_BYTES = 8 * 2**20  # a client this far behind on the data channel is not reading
CLOSE_NOT_READING = 1008
DRAIN_S = 2.0  # how long a closing call waits for the client to acknowledge its last events
# aiortc's SCTP association keeps what it has not handed on, not sent and not acknowledged in
# these (private) queues; it has no graceful shutdown (closing sends an ABORT that drops them).
_SCTP_QUEUES = ("_data_channel_queue", "_outbound_queue", "_sent_queue")
WATCHED = frozenset({"session.created", "session.updated", "response.done", "input_audio_buffer.speech_started",
                     "error"})
_CLIENT_MARKERS = ('"output_audio_buffer.clear"', '"session.update"', '"response.cancel"')


def _settled() -> None:
    """Nothing: run on the audio thread, it returns once what was submitted before it is done."""


def event_type(text: str) -> str:
    """The ``type`` of a server event; ours and the worker's put it first, so no parse is needed."""
    if text.startswith('{"type":"'):
        end = text.find('"', 9)
        if end > 0:
            return text[9:end]
    try:
        event = json.loads(text)
    except ValueError:
        return ""
    return event.get("type", "") if isinstance(event, dict) else ""


def client_event_type(text: str, max_bytes: int) -> str:
    """The ``type`` of a client's event, read as the worker reads it (``parse_client_json``): a
    message it will refuse (too large, nested too deep, not a JSON object) has none here and goes
    on unchanged, for the worker to answer with its error."""
    try:
        event = parse_client_json(text, max_bytes)
    except ProtocolError:
        return ""
    kind = event.get("type")
    return kind if isinstance(kind, str) else ""


def _unacknowledged(dc: RTCDataChannel) -> bool:
    """Whether the client may still lack something sent on ``dc``: ``bufferedAmount`` 0 only
    means it was handed to SCTP, not that it arrived."""
    sctp = getattr(dc, "transport", None)
    return dc.bufferedAmount > 0 or any(getattr(sctp, queue, None) for queue in _SCTP_QUEUES)


class WebRTCChannel(EventChannel):
    """One call's events and audio, as the realtime proxy sees a client."""

    transport = "webrtc"
    # The client speaks Realtime: its clear, cancel and session.update are read here (a Live
    # call's client sends none of them; its events go to the worker as they are).
    realtime_client = True
    binary_audio = True  # the microphone and the reply cross to the worker as binary frames

    def __init__(self, beta: bool = False, framer: OpusFramer | None = None,
                 budget: InboundBudget | None = None, frame_ms: int = FRAME_MS) -> None:
        self.beta = beta
        # The session's one byte budget (``budget.py``): the proxy counts what it holds while queued
        # against it too.
        self.budget = budget or InboundBudget(LimitsConfig().queued_bytes)
        self._inbox: asyncio.Queue[Message | None] = asyncio.Queue()
        self._dc: RTCDataChannel | None = None
        self._pending: list[str] = []
        self._gone: ChannelClosed | None = None  # the peer left, or the call was closed
        self._closing = False
        self.on_close: Callable[[], Awaitable[None]] | None = None  # ends the call (``Call.close``)
        self.live = False  # the worker's session.created has passed: media flows to it
        self.interrupts = True
        # The reply's packet length (``webrtc.reply_packet_ms``): the queue's frames and the encoder's.
        self.playback = Playback(self._to_client, self._to_worker, frame_ms)
        self.framer = framer or OpusFramer(frame_ms)
        self._encode_failed: Exception | None = None
        self._dropped = 0
        # Sideband connections (``sideband.py``): each gets a copy of every event for the client,
        # and None when the call ends.
        self._taps: list[Callable[[str | None], None]] = []
        # What the microphone said before the session started (connected, still queued or being
        # assigned): its last seconds go to the worker first, so a user who speaks as soon as the
        # call connects is heard from the first word.
        self._early_audio: collections.deque[bytes] = collections.deque(maxlen=EARLY_AUDIO_APPENDS)

    # ------------------------------------------------------------------ the client side

    def attach(self, dc: RTCDataChannel) -> None:
        """The client's ``oai-events`` data channel is open: events flow both ways."""
        if self._dc is not None or self._gone is not None:
            return
        self._dc = dc
        dc.on("message", self._from_data_channel)
        dc.on("close", lambda: self.peer_gone(1000, "data channel closed"))
        pending, self._pending = self._pending, []
        for text in pending:
            self._to_dc(text)

    @property
    def open(self) -> bool:
        return self._dc is not None

    def peer_gone(self, code: int = 1000, reason: str = "") -> None:
        """The call ended on the client's side (hangup, ICE failure, closed connection)."""
        if self._gone is None:
            self._gone = ChannelClosed(code, reason)
            self._inbox.put_nowait(None)
            for tap in list(self._taps):
                tap(None)

    def add_tap(self, tap: Callable[[str | None], None]) -> bool:
        """A sideband joins: ``tap`` gets every later event for the client (None at the end);
        False if the call has ended already."""
        if self._gone is not None:
            return False
        self._taps.append(tap)
        return True

    def remove_tap(self, tap: Callable[[str | None], None]) -> None:
        with contextlib.suppress(ValueError):
            self._taps.remove(tap)

    def inject(self, message: Message) -> bool:
        """A client event from a sideband connection: handled as one from the data channel; False
        when the session's budget is spent (the sideband is then closed, not the call)."""
        return self._from_client(message)

    def deliver(self, message: Message) -> None:
        """An event for the worker, from the media tracks (dropped while the relay is stalled)."""
        if self._gone is not None:
            return
        if self._inbox.qsize() >= MAX_INBOX or not self.budget.take(message):
            self._dropped += 1
            if self._dropped == 1:
                log.warning("the worker is not taking this call's media; dropping it")
            return
        self._inbox.put_nowait(message)

    def deliver_microphone(self, frame: bytes) -> None:
        """A binary microphone frame (``core/audio_frames.py``) from the track: to the worker once
        the session has started, kept (the last few seconds) until then."""
        if self.live:
            self.deliver(frame)
        elif self._gone is None:
            self._early_audio.append(frame)

    def start_media(self) -> None:
        """The worker's session has started: the microphone flows to it, its last seconds first."""
        self.live = True
        early, self._early_audio = list(self._early_audio), collections.deque()
        for append in early:
            self.deliver(append)

    def _from_data_channel(self, message: Message) -> None:
        """The browser's event; a browser that sends faster than the session takes ends the call
        (1008, with an ``error`` event saying why) rather than growing the inbox."""
        if self._from_client(message):
            return
        reason = self.budget.overflow_reason("on the data channel")
        log.warning("call closed: %s", reason)
        with contextlib.suppress(ChannelClosed):
            self._write(json.dumps(error_event(reason, "inbound_overflow"), separators=(",", ":")))
        self.peer_gone(CLOSE_POLICY, reason)

    def _from_client(self, message: Message) -> bool:
        """Queue a client event for the worker; False if it does not fit the session's budget."""
        if self._gone is not None:
            return True
        if isinstance(message, bytes):  # the worker takes binary frames from the microphone only
            with contextlib.suppress(ChannelClosed):
                self._write(json.dumps(self.binary_refusal(), separators=(",", ":")))
            return True
        if isinstance(message, str) and self.realtime_client and any(marker in message for marker in _CLIENT_MARKERS):
            kind = client_event_type(message, self.budget.limit)
            if kind == "output_audio_buffer.clear":
                self.playback.clear(barge_in=False)
                return True
            if kind == "response.cancel":
                self.playback.client_cancelled()
            elif kind == "session.update":
                message = pin_update(message, self.beta)
        if not self.budget.take(message):
            return False
        self._inbox.put_nowait(message)
        return True

    def binary_refusal(self) -> dict[str, Any]:
        """The error a binary message from the client gets: events are JSON text, as on a socket."""
        return error_event(BINARY_REFUSED, "invalid_json", "message")

    def _to_worker(self, event: dict[str, Any]) -> None:
        if self.live:
            self.deliver(json.dumps(event, separators=(",", ":")))

    def _to_client(self, event: dict[str, Any]) -> None:
        # Also called from the outbound track's pacing: a gone client is the proxy's to notice.
        with contextlib.suppress(ChannelClosed):
            self._write(json.dumps(event, separators=(",", ":")))

    def _write(self, text: str) -> None:
        for tap in self._taps:
            tap(text)
        self._to_dc(text)

    def _to_dc(self, text: str) -> None:
        dc = self._dc
        if dc is None:
            if len(self._pending) >= MAX_PENDING:
                raise ChannelClosed(CLOSE_NOT_READING, "the data channel never opened")
            self._pending.append(text)
            return
        if dc.readyState != "open":
            self.peer_gone(1000, "data channel closed")
            raise ChannelClosed(1000, "data channel closed")
        if dc.bufferedAmount > MAX_BUFFERED_BYTES:
            raise ChannelClosed(CLOSE_NOT_READING, "client is not reading the data channel")
        dc.send(text)

    # ------------------------------------------------------------------ EventChannel

    async def receive(self) -> Message:
        message = await self._inbox.get()
        if message is None:
            self._inbox.put_nowait(None)  # every later receive ends the same way
            raise self._gone or ChannelClosed(1000, "")
        self.budget.give(message)
        return message

    async def send(self, message: Message) -> None:
        if self._gone is not None:
            raise ChannelClosed(self._gone.code, self._gone.reason)
        if isinstance(message, bytes):  # the reply's audio: a binary frame (``core/audio_frames.py``)
            if self._encode_failed is not None:
                raise self._encode_failed
            # Encoded and queued on the audio thread, in order; not awaited, so the loop is not
            # woken for it while the track plays (``Playback.push_encoded``).
            AUDIO_EXECUTOR.submit(self._encode_reply, message, asyncio.get_running_loop())
            return
        kind = event_type(message)
        if kind in WATCHED:
            message = await self._watch(kind, message)
            if message is None:
                return
        self._write(message)

    async def _offloop(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(AUDIO_EXECUTOR, fn, *args)

    def _encode_reply(self, frame: bytes, loop: asyncio.AbstractEventLoop) -> None:
        """On the audio thread: a reply frame -> Opus frames, queued for the track. A frame that does
        not read (or encode) is our bug: logged, and the next one the worker sends fails the relay."""
        try:
            response_id, item_id, pcm = read_reply_frame(frame)
            frames = self.framer.encode(response_id, pcm)
        except Exception as exc:  # noqa: BLE001 - kept for the loop: a thread's exception is lost otherwise
            log.exception("a reply frame from the worker not encoded")
            self._encode_failed = exc
            return
        self.playback.push_encoded(loop, response_id, item_id, frames)

    async def _watch(self, kind: str, text: str) -> str | None:
        """Act on a watched event; the text to pass on, or None to keep it from the client."""
        event = json.loads(text)
        if kind == "session.created":
            self.interrupts = interrupts(event.get("session"), self.beta)
            self.start_media()
        elif kind == "session.updated":
            self.interrupts = interrupts(event.get("session"), self.beta)
        elif kind == "response.done":
            response_id = (event.get("response") or {}).get("id", "")
            tail = await self._offloop(self.framer.flush, response_id)
            if tail:
                self.playback.push(response_id, "", tail)
            self._write(text)  # stopped comes after response.done
            self.playback.done(response_id)
            return None
        elif kind == "input_audio_buffer.speech_started":
            if self.interrupts:
                await self._offloop(_settled)  # the reply's frames sent before it are queued first
                if self.playback.active is not None:
                    self._write(text)
                    self.playback.clear(barge_in=True)
                    return None
        elif kind == "error":
            answered = (event.get("error") or {}).get("event_id") or ""
            if answered.startswith(GATEWAY_EVENT_PREFIX):
                log.info("the worker refused the call's own event: %s", event.get("error"))
                return None
        return text

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """The session ended: let the last events leave (briefly), then end the call."""
        if self._closing:
            return
        self._closing = True
        dc = self._dc
        if dc is not None and self._gone is None:
            deadline = time.monotonic() + DRAIN_S
            while dc.readyState == "open" and _unacknowledged(dc) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        self.peer_gone(code, reason)
        if self.on_close is not None:
            with contextlib.suppress(Exception):
                await self.on_close()
