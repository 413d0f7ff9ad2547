"""One realtime session: client events in, conversation events out, limits enforced.

Three tasks share the session: the reader (client events, handled in order, so a
``response.create`` after a ``commit`` sees the committed turn), the pump (conversation events
translated into server events) and the writer (the only coroutine that writes the channel; it
also keeps extension events from clients that did not ask for them). Items are parsed and
rendered in ``items.py``, a response's events in ``reply_events.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from core.audio import OUTPUT_RATE
from core.audio_frames import read_mic_frame, reply_frame
from core.config import LimitsConfig, McpConfig
from core.conversation import ConversationConfig, Item
from core.conversation.items import Part
from core.errors import InvalidInputError, NoActiveResponseError, OmniDuplexError, ResponseActiveError
from core.ids import new_id
from core.json_limits import parse_client_json
from core.processors.base import Backend
from core.protocol import (
    EXTENSION_EVENTS,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    Dialect,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    InputImageBufferAppend,
    OutputAudioBufferClear,
    ProtocolError,
    ResponseCancel,
    ResponseCreate,
    SessionPause,
    SessionResume,
    SessionUpdate,
    TranscriptionSessionUpdate,
    error_event,
    parse_client_event,
    server_event,
)
from core.redaction import without_secrets
from core.transport import ChannelClosed, EventChannel
from worker.items import b64, parse_item, render_item
from worker.limits import FrameRate, check_image, check_image_b64
from worker.mcp_client import McpClient
from worker.recorder import SessionRecorder
from worker.reply_events import ReplyEvents
from worker.response_options import ResponseOptions, parse_response_options
from worker.session_config import SessionSettings, apply_session_update, session_object

log = logging.getLogger(__name__)

CLOSE_IDLE = 4001
CLOSE_PAUSE_TIMEOUT = 4002
CLOSE_MAX_LENGTH = 4003
CLOSE_SLOW_CLIENT = 1008
SEND_QUEUE_LIMIT = 4000
SLOW_CLIENT = "client is not reading; send buffer full"  # the close reason and end reason
# Refusals counted in omniduplex_worker_limit_events (the Live channel counts its own the same way).
LIMIT_CODES = ("message_too_large", "nesting_too_deep", "image_too_large", "frame_rate_exceeded")
ERROR_TYPES = {"context_length_exceeded": "invalid_request_error"}  # the conversation's errors that are not ours


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class RealtimeSession:
    def __init__(
        self,
        channel: EventChannel,
        backend: Backend,
        dialect: Dialect,
        limits: LimitsConfig,
        model: str = "omniduplex-cascade",
        session_id: str | None = None,
        on_state: Callable[[str], None] | None = None,
        recorder: SessionRecorder | None = None,
        extensions: frozenset[str] = frozenset(),
        transcription: bool = False,
        mcp_config: McpConfig | None = None,
        echo_cancelled: bool = False,
        binary_audio: bool = False,
        binary_reply: bool = False,
    ) -> None:
        self.channel = channel
        self.backend = backend
        self.dialect = dialect
        self.limits = limits
        self.model = model
        self.session_id = session_id or new_id("sess")
        self.on_state = on_state or (lambda _s: None)
        self.recorder = recorder
        self.extensions = extensions
        self.settings = SessionSettings(kind="transcription" if transcription else "realtime")
        self.mcp_config = mcp_config or McpConfig()  # default: no MCP host allowed
        self.echo_cancelled = echo_cancelled  # the client's input comes echo-cancelled (a WebRTC call)
        self.binary_audio = binary_audio  # the microphone may come as binary frames (a call, via its gateway)
        self.binary_reply = binary_reply  # the reply's audio goes as binary frames (a Realtime call's gateway)
        if binary_reply and channel.takes_events:
            raise ValueError("a channel that takes events frames the reply's audio itself")
        self._out: asyncio.Queue[dict | None] = asyncio.Queue()
        self.paused_at: float | None = None
        self.started = time.monotonic()
        self.last_client_event = self.started
        self.frames_received = 0
        self.close_code = 1000
        self.close_reason = ""
        self.end_reason = "worker_shutdown"  # unless a task says otherwise (cancelled = shutdown)
        self.frame_rate = FrameRate(limits.max_frame_rate)
        self.replies = ReplyEvents(dialect, self.send, "conv_" + self.session_id.rsplit("_", 1)[-1],
                                   record_audio=recorder.server_event if recorder is not None else None,
                                   raw_audio=binary_reply or channel.takes_events)
        self._last_response_id: str | None = None
        self._lost: asyncio.Task | None = None  # the conversation stopping for a dropped connection
        # Hooks for the worker's metrics (set by worker/app.py); called on the event loop.
        self.on_limit: Callable[[str], None] | None = None

    @property
    def on_turn_metrics(self) -> Callable[[dict[str, Any]], None] | None:
        return self.replies.on_turn_metrics

    @on_turn_metrics.setter
    def on_turn_metrics(self, hook: Callable[[dict[str, Any]], None] | None) -> None:
        self.replies.on_turn_metrics = hook

    # ------------------------------------------------------------------ plumbing

    def send(self, event: dict[str, Any]) -> None:
        if self._out.qsize() >= SEND_QUEUE_LIMIT:
            raise _Close(CLOSE_SLOW_CLIENT, SLOW_CLIENT)
        self._out.put_nowait(event)

    def send_error(self, message: str, code: str = "invalid_request_error", param: str | None = None,
                   client_event_id: str | None = None, kind: str = "invalid_request_error") -> None:
        self.send(error_event(message, code, param, client_event_id, kind))

    async def _writer(self) -> None:
        while True:
            event = await self._out.get()
            if event is None:
                return
            kind = event["type"]
            if kind not in EXTENSION_EVENTS or kind in self.extensions:
                delta = event.get("delta")
                if isinstance(delta, bytes) and self.binary_reply:  # the reply's audio, for a call's gateway
                    await self.channel.send(reply_frame(event["response_id"], event["item_id"], delta, OUTPUT_RATE))
                else:
                    await self.channel.send_event(event)
            if self.recorder is not None and not (kind == self.dialect.audio_delta and self.settings.output_format.g711):
                self.recorder.server_event(event)  # the recording has every event (G.711 audio as PCM)

    def _state(self) -> str:
        if self.paused_at is not None:
            return "DUPLEX_PAUSED"
        return "BUSY_HALF_DUPLEX" if self.conv.config.turn_detection is None else "DUPLEX_ACTIVE"

    async def run(self) -> None:
        config = ConversationConfig(echo_cancellation=not self.echo_cancelled)
        if self.settings.kind == "transcription":
            config, self.settings = apply_session_update(config, {"type": "transcription"}, self.dialect,
                                                         self.backend.capabilities.turn_detection_types,
                                                         self.settings)
        self.conv = self.backend.open_conversation(config)
        self.conv.mcp.connector = McpClient(self.mcp_config)
        self.on_state(self._state())
        created = "transcription_session.created" if self._beta_transcription else "session.created"
        self.send(server_event(created, session=self._session()))
        if self.settings.kind == "transcription" and not self._can_transcribe:
            self.send_error(f"backend {self.backend.name} has no transcriber; transcription sessions are not "
                            "available on it", "transcription_unavailable", param="intent")
        tasks = [
            asyncio.create_task(self._writer(), name="writer"),
            asyncio.create_task(self._pump(), name="pump"),
            asyncio.create_task(self._limits(), name="limits"),
            asyncio.create_task(self._reader(), name="reader"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if isinstance(exc, _Close):
                    self.close_code, self.close_reason = exc.code, exc.reason
                    self.end_reason = exc.reason
                elif isinstance(exc, ChannelClosed):
                    # 1012/1001 come from our own server going down, not from the client; a channel
                    # that closed a client for not reading (the Live one) ends as this session would.
                    self.end_reason = "worker_shutdown" if exc.code in (1001, 1012) else \
                        SLOW_CLIENT if (exc.code, exc.reason) == (CLOSE_SLOW_CLIENT, SLOW_CLIENT) else "client_closed"
                elif exc is not None and not isinstance(exc, asyncio.CancelledError):
                    log.error("session %s failed", self.session_id, exc_info=exc)
                    self.close_code, self.close_reason = 1011, "internal error"
                    self.end_reason = "worker_error"
                    self._out.put_nowait(error_event(f"internal error: {exc}", "server_error", kind="server_error"))
        finally:
            for task in tasks:
                if task.get_name() != "writer":
                    task.cancel()
            await self.conv.close()
            # let the writer flush what is queued (the error, say), briefly
            self._out.put_nowait(None)
            writer = tasks[0]
            try:
                await asyncio.wait_for(writer, timeout=2.0)
            except (TimeoutError, Exception):  # noqa: BLE001 - socket may be gone
                writer.cancel()
            await self.channel.close(self.close_code, self.close_reason)
            if self.recorder is not None:
                self.recorder.finish(self.end_reason, self.close_code)

    @property
    def _beta_transcription(self) -> bool:
        return self.dialect.beta and self.settings.kind == "transcription"

    @property
    def _can_transcribe(self) -> bool:
        caps = self.backend.capabilities
        return caps.transcript_first or caps.transcribes_input

    def _session(self) -> dict[str, Any]:
        return session_object(self.conv.config, self.dialect, self.session_id, self.model, self.settings)

    # ------------------------------------------------------------------ a dropped connection (issue 72)

    def client_lost(self) -> None:
        """The connection dropped and the session is held for its resume token
        (``worker/reattachable.py``): what the listener was hearing stops at what it heard."""
        # the conversation's own task set: awaited (or cancelled) when the session closes
        self._lost = self.conv.rt.spawn(self.conv.listener_gone())

    def client_back(self) -> None:
        self.last_client_event = time.monotonic()  # the time away is not idleness

    def reattach_opening(self, away_s: float) -> list[str]:
        """What a reattached connection hears first: ``session.created`` (where the session stands,
        so a client that opened a new socket needs nothing else) and, if asked for,
        ``session.reattached``; what was kept for it while away follows."""
        opening = [server_event("session.created", session=self._session())]
        if "session.reattached" in self.extensions:
            opening.append(server_event("session.reattached", session_id=self.session_id,
                                        items=len(self.conv.items), away_ms=round(away_s * 1000)))
        return [json.dumps(e, separators=(",", ":")) for e in opening]

    # ------------------------------------------------------------------ limits

    async def _limits(self) -> None:
        lim = self.limits
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            if now - self.started > lim.max_session_s:
                self._limit_error("session_expired", f"session reached the maximum length of {lim.max_session_s:.0f} s")
                raise _Close(CLOSE_MAX_LENGTH, "maximum session length reached")
            if self.paused_at is not None:
                if now - self.paused_at > lim.pause_timeout_s:
                    self._limit_error("pause_timeout", f"session paused for longer than {lim.pause_timeout_s:.0f} s")
                    raise _Close(CLOSE_PAUSE_TIMEOUT, "pause timeout")
            elif now - self.last_client_event > lim.idle_timeout_s and not self.conv.response_active:
                self._limit_error("idle_timeout", f"no client event for {lim.idle_timeout_s:.0f} s")
                raise _Close(CLOSE_IDLE, "idle timeout")

    def _limit_error(self, code: str, message: str) -> None:
        self._count_limit(code)
        self._out.put_nowait(error_event(message, code, kind="invalid_request_error"))

    def _count_limit(self, code: str) -> None:
        if self.on_limit is not None:
            self.on_limit(code)

    # ------------------------------------------------------------------ client -> model

    async def _reader(self) -> None:
        while True:
            message = await self.channel.receive()
            self.last_client_event = time.monotonic()
            data: Any = None
            try:
                # Refusals are dropped unread or unparsed; the session goes on (docs/protocol.md
                # "Errors and close codes").
                if isinstance(message, bytes) and self.binary_audio:
                    await self._microphone(message)
                    continue
                data = parse_client_json(message, self.limits.max_message_bytes)
                event = parse_client_event(data)
                recorded = await self._handle(event)
                if self.recorder is not None:  # MCP headers never reach the recording
                    self.recorder.client_event(recorded or without_secrets(data), self.conv.config.input_sample_rate)
            except ProtocolError as exc:
                if exc.code in LIMIT_CODES:
                    self._count_limit(exc.code)
                ev_id = data.get("event_id") if isinstance(data, dict) else None  # so the client can match it
                self.send_error(exc.message, exc.code, exc.param, exc.event_id or (ev_id if isinstance(ev_id, str) else None))
            except OmniDuplexError as exc:
                ev_id = data.get("event_id") if isinstance(data, dict) else None
                self.send_error(exc.message, exc.code, exc.param, ev_id if isinstance(ev_id, str) else None)

    async def _microphone(self, frame: bytes) -> None:
        """A binary microphone frame (``core/audio_frames.py``): an append without base64 or JSON."""
        pcm, rate = read_mic_frame(frame)
        expected = self.conv.config.input_sample_rate
        if rate != expected or self.settings.input_format.g711:
            raise ProtocolError(f"a microphone frame of PCM16 at {rate} Hz; this session takes "
                                f"{self.settings.input_format.type} at {expected} Hz", code="invalid_audio",
                                param="audio")
        if self.paused_at is not None:
            return  # audio sent while paused is dropped, by design
        await self.conv.append_audio(pcm)
        if self.recorder is not None:
            self.recorder.user_audio(pcm, rate)

    async def _pcm(self, data: bytes, param: str, event_id: str | None) -> bytes:
        fmt = self.settings.input_format
        if fmt.g711:
            return await asyncio.to_thread(fmt.to_pcm16, data, param, event_id)
        return fmt.to_pcm16(data, param, event_id)

    async def _handle(self, ev) -> dict[str, Any] | None:
        """Handle one client event; returns what the recording should keep instead of the event
        itself (G.711 audio as PCM), if anything."""
        conv = self.conv
        if isinstance(ev, InputAudioBufferAppend):
            if self.paused_at is not None:
                return None  # audio sent while paused is dropped, by design
            pcm = await self._pcm(b64(ev.audio, "audio", ev.event_id), "audio", ev.event_id)
            await conv.append_audio(pcm)
            if self.settings.input_format.g711:
                return {"type": ev.type, "audio": base64.b64encode(pcm).decode("ascii")}
        elif isinstance(ev, SessionUpdate | TranscriptionSessionUpdate):
            self._update_session(ev)
        elif isinstance(ev, InputAudioBufferCommit):
            try:
                await conv.commit_audio()
            except OmniDuplexError as exc:
                raise ProtocolError(exc.message, code="input_audio_buffer_commit_empty", event_id=ev.event_id)
        elif isinstance(ev, InputAudioBufferClear):
            conv.clear_audio()
            self.send(server_event("input_audio_buffer.cleared"))
        elif isinstance(ev, ConversationItemCreate):
            await self._create_item(ev)
        elif isinstance(ev, ConversationItemTruncate):
            conv.truncate(ev.item_id, ev.audio_end_ms)
            self.send(server_event("conversation.item.truncated", item_id=ev.item_id,
                                   content_index=ev.content_index, audio_end_ms=ev.audio_end_ms))
        elif isinstance(ev, ConversationItemDelete):
            if not conv.delete_item(ev.item_id):
                raise ProtocolError(f"no item {ev.item_id!r} in the conversation", code="item_not_found",
                                    param="item_id", event_id=ev.event_id)
            self.send(server_event("conversation.item.deleted", item_id=ev.item_id))
        elif isinstance(ev, ConversationItemRetrieve):
            item = conv.item(ev.item_id)
            if item is None:
                raise ProtocolError(f"no item {ev.item_id!r} in the conversation", code="item_not_found",
                                    param="item_id", event_id=ev.event_id)
            self.send(server_event("conversation.item.retrieved", item=render_item(item, self.dialect.beta)))
        elif isinstance(ev, ResponseCreate):
            if self.settings.kind == "transcription":
                raise ProtocolError("a transcription session makes no responses", code="invalid_request_error",
                                    param="type", event_id=ev.event_id)
            await self._create_response(await parse_response_options(ev, self))
        elif isinstance(ev, ResponseCancel):
            try:
                await conv.cancel_response("client_cancelled")
            except NoActiveResponseError as exc:
                raise ProtocolError(exc.message, code=exc.code, event_id=ev.event_id) from None
        elif isinstance(ev, OutputAudioBufferClear):
            if conv.response_active:
                await conv.cancel_response("client_cancelled")
            self.send(server_event("output_audio_buffer.cleared", response_id=self._last_response_id or ""))
        elif isinstance(ev, InputImageBufferAppend):
            await self._camera_frame(ev)
        elif isinstance(ev, SessionPause):
            if self.paused_at is None:
                self.paused_at = time.monotonic()
                conv.clear_audio()
                if conv.response_active:
                    await conv.cancel_response("client_cancelled")
                self.on_state(self._state())
            self.send(server_event("session.paused", pause_timeout_s=self.limits.pause_timeout_s))
        elif isinstance(ev, SessionResume):
            if self.paused_at is not None:
                self.paused_at = None
                self.last_client_event = time.monotonic()
                self.on_state(self._state())
            self.send(server_event("session.resumed"))
        return None

    def _update_session(self, ev: SessionUpdate | TranscriptionSessionUpdate) -> None:
        beta_transcription = isinstance(ev, TranscriptionSessionUpdate)
        if beta_transcription != self._beta_transcription and self.dialect.beta:
            want = "transcription_session.update" if self._beta_transcription else "session.update"
            raise ProtocolError(f"this is a {self.settings.kind} session: send {want} "
                                "(connect with ?intent=transcription for a transcription session)",
                                param="type", event_id=ev.event_id)
        if beta_transcription and not self.dialect.beta:
            raise ProtocolError("transcription_session.update is a beta event; GA clients send session.update "
                                "with session.type 'transcription'", param="type", event_id=ev.event_id)
        body = dict(ev.session)
        if beta_transcription:
            body.pop("type", None)
        cfg, settings = apply_session_update(self.conv.config, body, self.dialect,
                                             self.backend.capabilities.turn_detection_types, self.settings,
                                             self.mcp_config)
        self._check_token_limit(cfg, ev.event_id)
        if settings.kind == "transcription" and not self._can_transcribe:
            raise ProtocolError(f"backend {self.backend.name} has no transcriber; transcription sessions are not "
                                "available on it", code="transcription_unavailable", param="session.type",
                                event_id=ev.event_id)
        self.conv.update(cfg)  # the conversation maps the voice to one the backend has
        self.settings = settings
        self.replies.output_format = settings.output_format
        self.on_state(self._state())
        updated = "transcription_session.updated" if beta_transcription else "session.updated"
        self.send(server_event(updated, session=self._session()))

    def _check_token_limit(self, cfg: ConversationConfig, event_id: str | None) -> None:
        """``truncation.token_limits.post_instructions`` may not exceed the model's context less
        ``max_output_tokens`` (OpenAI's rule)."""
        post, context = cfg.truncation.post_instructions, self.backend.context_tokens
        if post is not None and context is not None and post > context - cfg.max_output_tokens:
            raise ProtocolError(
                f"session.truncation.token_limits.post_instructions {post} is over this model's context of "
                f"{context} tokens less max_output_tokens {cfg.max_output_tokens} (at most "
                f"{context - cfg.max_output_tokens})", param="session.truncation.token_limits.post_instructions",
                event_id=event_id)

    async def _camera_frame(self, ev: InputImageBufferAppend) -> None:
        if not self.frame_rate.allow():
            if self.frame_rate.should_report():
                raise ProtocolError(
                    f"camera frames above {self.limits.max_frame_rate:g} per second are dropped "
                    f"({self.frame_rate.dropped} so far)", code="frame_rate_exceeded", param="image",
                    event_id=ev.event_id)
            self._count_limit("frame_rate_exceeded")
            return
        check_image_b64(ev.image, self.limits, "image", ev.event_id)
        frame = b64(ev.image, "image", ev.event_id)
        check_image(frame, self.limits, "image", ev.event_id)
        await self.conv.add_image(frame, frame=True)
        self.frames_received += 1
        # Acknowledged so a camera client knows its frames arrive (and are decodable).
        self.send(server_event("input_image_buffer.appended", frames_received=self.frames_received))

    async def new_item(self, data: Any, event_id: str | None, param: str = "item") -> tuple[Item, str | None]:
        """A client item checked, decoded and prepared, not yet placed: (item, client id)."""
        parsed = parse_item(data, self.limits, self.settings.input_format, event_id, param)
        for i, (kind, payload) in enumerate(parsed.parts):
            if kind == "audio":
                parsed.parts[i] = (kind, await self._pcm(payload, f"{param}.content.{i}.audio", event_id))
        if parsed.ready is not None:
            return parsed.ready, parsed.item_id
        if parsed.item_id is not None and self.conv.item(parsed.item_id) is not None:
            raise ProtocolError(f"the conversation already has an item with id {parsed.item_id!r}",
                                code="item_already_exists", param=f"{param}.id", event_id=event_id)
        return await self.conv.prepare_message(parsed.role, parsed.parts, parsed.item_id), parsed.item_id

    async def _create_item(self, ev: ConversationItemCreate) -> None:
        previous = ev.previous_item_id
        if previous is not None and previous != "root" and self.conv.item(previous) is None:
            raise ProtocolError(f"previous_item_id {previous!r} is not in the conversation (use 'root' to place "
                                "an item first)", code="item_not_found", param="previous_item_id",
                                event_id=ev.event_id)
        item, _ = await self.new_item(ev.item, ev.event_id)
        if item.type == "mcp_approval_response":
            self._check_approval(item, ev.event_id)
        self.conv.insert_item(item, previous)
        self._announce_item(item)

    def _check_approval(self, item: Item, event_id: str | None) -> None:
        request = self.conv.item(item.approval_request_id or "")
        if request is None or request.type != "mcp_approval_request":
            raise ProtocolError(f"no mcp_approval_request {item.approval_request_id!r} in the conversation",
                                code="item_not_found", param="item.approval_request_id", event_id=event_id)
        if any(i.type == "mcp_approval_response" and i.approval_request_id == request.item_id for i in self.conv.items):
            raise ProtocolError(f"approval request {request.item_id!r} was already answered",
                                code="invalid_value", param="item.approval_request_id", event_id=event_id)

    def _announce_item(self, item: Item) -> None:
        rendered = render_item(item, self.dialect.beta)
        previous = self.conv.previous_item_id(item.item_id)
        self.send(server_event(self.dialect.item_added, previous_item_id=previous, item=rendered))
        if not self.dialect.beta:
            self.send(server_event("conversation.item.done", previous_item_id=previous, item=rendered))

    async def _create_response(self, opts: ResponseOptions) -> None:
        try:
            self._last_response_id = await self.conv.create_response(
                instructions=opts.instructions, output_audio=opts.output_audio,
                max_output_tokens=opts.max_output_tokens, input_items=opts.input_items,
                in_conversation=opts.in_conversation, metadata=opts.metadata, overrides=opts.tools)
        except (ResponseActiveError, InvalidInputError) as exc:
            raise ProtocolError(exc.message, code=exc.code, param=exc.param, event_id=opts.event_id) from None

    # ------------------------------------------------------------------ model -> client

    async def _pump(self) -> None:
        replies = self.replies
        async for e in self.conv.events():
            kind = e.type
            if kind == "audio_chunk":
                await replies.audio(e)
            elif kind == "text_delta":
                replies.text(e)
            elif kind == "speech_started":
                self.send(server_event("input_audio_buffer.speech_started", audio_start_ms=e.audio_start_ms,
                                       item_id=e.item_id))
            elif kind == "speech_stopped":
                # the voice ended audio_end_ms into the stream; the turn's end was decided later
                lag = e.stream_ms - e.audio_end_ms if e.stream_ms is not None else None
                replies.mark("speech_stopped", voice_ended_ms_ago=lag)
                self.send(server_event("input_audio_buffer.speech_stopped", audio_end_ms=e.audio_end_ms,
                                       item_id=e.item_id))
            elif kind == "timeout_triggered":
                if not self.dialect.beta:  # a GA event: the beta has no idle timeout to report
                    self.send(server_event("input_audio_buffer.timeout_triggered", audio_start_ms=e.audio_start_ms,
                                           audio_end_ms=e.audio_end_ms, item_id=e.item_id))
            elif kind == "input_committed":
                replies.mark("committed")
                self.send(server_event("input_audio_buffer.committed", previous_item_id=e.previous_item_id,
                                       item_id=e.item_id))
                self.send(server_event(self.dialect.item_added, previous_item_id=e.previous_item_id,
                                       item=self._user_audio_item(e.item_id, None)))
            elif kind == "input_transcript":
                replies.mark("transcribed")
                self._transcript(e)
            elif kind == "response_started":
                self._last_response_id = e.response_id
                replies.started(e, e.previous_item_id)
            elif kind == "function_call_started":
                replies.call_started(e)
            elif kind == "function_call_delta":
                replies.call_delta(e)
            elif kind == "function_call_done":
                replies.call_done(e)
            elif kind == "mcp_call_running":
                replies.mcp_running(e)
            elif kind == "mcp_call_finished":
                replies.mcp_finished(e)
            elif kind == "mcp_list_started":
                self.send(server_event("conversation.item.added", previous_item_id=e.previous_item_id,
                                       item=render_item(Item("assistant", item_id=e.item_id, type="mcp_list_tools",
                                                             server_label=e.server_label, tools=[], parts=[]),
                                                        False)))
                self.send(server_event("mcp_list_tools.in_progress", item_id=e.item_id))
            elif kind == "mcp_list_finished":
                self._listed(e)
            elif kind == "response_done":
                part = Part("audio" if e.output_audio else "text", e.text)
                status = "completed" if e.status == "completed" else "incomplete"
                item = Item("assistant", e.text, item_id=e.item_id, parts=[part], status=status)
                replies.done(e, render_item(item, self.dialect.beta))
            elif kind == "backchannel":
                self.send(server_event("input_audio_buffer.backchannel", item_id=e.item_id,
                                       audio_start_ms=e.audio_start_ms, audio_end_ms=e.audio_end_ms,
                                       transcript=e.transcript))
            elif kind == "item_truncated":
                self.send(server_event("conversation.item.truncated", item_id=e.item_id, content_index=0,
                                       audio_end_ms=e.audio_end_ms))
            elif kind == "response_resumed":
                self.send(server_event("response.resumed", response_id=e.response_id, item_id=e.item_id,
                                       resumed_item_id=e.resumed_item_id, audio_start_ms=e.audio_start_ms))
            elif kind == "error":
                self.send_error(e.message, e.code, kind=ERROR_TYPES.get(e.code, "server_error"))

    def _listed(self, e) -> None:
        """An MCP server's listing ended: its item with the tools, or the failure and why."""
        item = Item("assistant", item_id=e.item_id, type="mcp_list_tools", server_label=e.server_label,
                    tools=list(e.tools), parts=[])
        self.send(server_event("mcp_list_tools.failed" if e.error else "mcp_list_tools.completed", item_id=e.item_id))
        self.send(server_event("conversation.item.done", item=render_item(item, False)))
        if e.error:
            self.send_error(e.error, "mcp_list_tools_failed", param="session.tools")

    def _user_audio_item(self, item_id: str, transcript: str | None) -> dict[str, Any]:
        item = self.conv.item(item_id) or Item("user", item_id=item_id, parts=[Part("audio", transcript)])
        return render_item(item, self.dialect.beta)

    def _transcript(self, e) -> None:
        ids = {"item_id": e.item_id, "content_index": 0}
        self.send(server_event("conversation.item.input_audio_transcription.delta", delta=e.transcript, **ids))
        self.send(server_event("conversation.item.input_audio_transcription.completed", transcript=e.transcript,
                               usage={"type": "duration", "seconds": round(e.audio_ms / 1000, 3)}, **ids))
        if not self.dialect.beta:
            self.send(server_event("conversation.item.done", previous_item_id=self.conv.previous_item_id(e.item_id),
                                   item=self._user_audio_item(e.item_id, e.transcript)))
