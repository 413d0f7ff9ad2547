"""One realtime session: client events in, conversation events out, limits enforced.

Three tasks share the session: the reader (client events, handled in order, so a
``response.create`` after a ``commit`` sees the committed turn), the pump (conversation events
translated into server events) and the writer (the only coroutine that writes the socket).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from core.config import LimitsConfig
from core.errors import NoActiveResponseError, OmniDuplexError, ResponseActiveError
from core.conversation import ConversationConfig
from core.ids import new_id
from core.processors.base import Backend
from core.protocol import (
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
    error_event,
    message_item,
    parse_client_event,
    server_event,
)
from worker.limits import FrameRate, check_image, check_image_b64, message_too_large
from worker.recorder import SessionRecorder
from worker.session_config import _max_tokens, _modalities, apply_session_update, session_object

log = logging.getLogger(__name__)

CLOSE_IDLE = 4001
CLOSE_PAUSE_TIMEOUT = 4002
CLOSE_MAX_LENGTH = 4003
CLOSE_SLOW_CLIENT = 1008
SEND_QUEUE_LIMIT = 4000
LIMIT_CODES = ("message_too_large", "image_too_large", "frame_rate_exceeded")


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class RealtimeSession:
    def __init__(
        self,
        ws: WebSocket,
        backend: Backend,
        dialect: Dialect,
        limits: LimitsConfig,
        model: str = "omniduplex-cascade",
        session_id: str | None = None,
        on_state: Callable[[str], None] | None = None,
        recorder: SessionRecorder | None = None,
    ) -> None:
        self.ws = ws
        self.backend = backend
        self.dialect = dialect
        self.limits = limits
        self.model = model
        self.session_id = session_id or new_id("sess")
        self.on_state = on_state or (lambda _s: None)
        self.recorder = recorder
        self._out: asyncio.Queue[dict | None] = asyncio.Queue()
        self.paused_at: float | None = None
        self.started = time.monotonic()
        self.last_client_event = self.started
        self._last_item_id: str | None = None
        self._responses: dict[str, dict[str, Any]] = {}
        self._speech_stopped_at: float | None = None
        self.frames_received = 0
        self.close_code = 1000
        self.close_reason = ""
        self.end_reason = "worker_shutdown"  # unless a task says otherwise (cancelled = shutdown)
        self.frame_rate = FrameRate(limits.max_frame_rate)
        # Hooks for the worker's metrics (set by worker/app.py); called on the event loop.
        self.on_turn_metrics: Callable[[dict[str, Any]], None] | None = None
        self.on_limit: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ plumbing

    def send(self, event: dict[str, Any]) -> None:
        if self._out.qsize() >= SEND_QUEUE_LIMIT:
            raise _Close(CLOSE_SLOW_CLIENT, "client is not reading; send buffer full")
        self._out.put_nowait(event)

    def send_error(self, message: str, code: str = "invalid_request_error", param: str | None = None,
                   client_event_id: str | None = None, kind: str = "invalid_request_error") -> None:
        self.send(error_event(message, code, param, client_event_id, kind))

    async def _writer(self) -> None:
        while True:
            event = await self._out.get()
            if event is None:
                return
            await self.ws.send_text(json.dumps(event, separators=(",", ":")))
            if self.recorder is not None:
                self.recorder.server_event(event)

    def _state(self) -> str:
        if self.paused_at is not None:
            return "DUPLEX_PAUSED"
        return "BUSY_HALF_DUPLEX" if self.conv.config.turn_detection is None else "DUPLEX_ACTIVE"

    async def run(self) -> None:
        self.conv = self.backend.open_conversation(ConversationConfig())
        self.on_state(self._state())
        self.send(server_event("session.created", session=self._session()))
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
                elif isinstance(exc, WebSocketDisconnect):
                    # 1012/1001 come from our own server going down, not from the client.
                    self.end_reason = "worker_shutdown" if exc.code in (1001, 1012) else "client_closed"
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
            try:
                await self.ws.close(self.close_code, self.close_reason)
            except Exception:  # noqa: BLE001 - already closed by the peer
                pass
            if self.recorder is not None:
                self.recorder.finish(self.end_reason, self.close_code)

    def _session(self) -> dict[str, Any]:
        return session_object(self.conv.config, self.dialect, self.session_id, self.model)

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
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            text = message.get("text")
            if text is None:
                self.send_error("binary frames are not supported; send JSON text", param="frame")
                continue
            self.last_client_event = time.monotonic()
            if message_too_large(text, self.limits.max_message_bytes):
                # Dropped unread; the session goes on (docs/protocol.md "Errors and close codes").
                self._count_limit("message_too_large")
                self.send_error(f"message larger than {self.limits.max_message_bytes} bytes was dropped",
                                "message_too_large", param="message")
                continue
            data: Any = None
            try:
                data = json.loads(text)
                event = parse_client_event(data)
                await self._handle(event)
                if self.recorder is not None:
                    self.recorder.client_event(data, self.conv.config.input_sample_rate)
            except json.JSONDecodeError as exc:
                self.send_error(f"message is not valid JSON: {exc.msg}", param="message")
            except ProtocolError as exc:
                if exc.code in LIMIT_CODES:
                    self._count_limit(exc.code)
                self.send_error(exc.message, exc.code, exc.param, exc.event_id)
            except OmniDuplexError as exc:
                ev_id = data.get("event_id") if isinstance(data, dict) else None
                self.send_error(exc.message, exc.code, exc.param, ev_id if isinstance(ev_id, str) else None)

    async def _handle(self, ev) -> None:
        conv = self.conv
        if isinstance(ev, InputAudioBufferAppend):
            if self.paused_at is not None:
                return  # audio sent while paused is dropped, by design
            await conv.append_audio(_b64(ev.audio, "audio", ev.event_id))
        elif isinstance(ev, SessionUpdate):
            cfg = apply_session_update(conv.config, ev.session, self.dialect, self.backend.turn_detection_types)
            conv.update(cfg)  # the conversation maps the voice to one the backend has
            self.on_state(self._state())
            self.send(server_event("session.updated", session=self._session()))
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
            item = next((m for m in conv.history if m.item_id == ev.item_id), None)
            if item is None:
                raise ProtocolError(f"no item {ev.item_id!r} in the conversation", code="item_not_found",
                                    param="item_id", event_id=ev.event_id)
            self.send(server_event("conversation.item.retrieved", item=_history_item(item)))
        elif isinstance(ev, ResponseCreate):
            params = ev.response or {}
            audio = _modalities(params.get("output_modalities", params.get("modalities")), "response.output_modalities")
            tokens = _max_tokens(params.get("max_output_tokens", params.get("max_response_output_tokens")),
                                 "response.max_output_tokens")
            instructions = params.get("instructions")
            try:
                await conv.create_response(instructions=instructions if isinstance(instructions, str) else None,
                                           output_audio=audio, max_output_tokens=tokens)
            except ResponseActiveError as exc:
                raise ProtocolError(exc.message, code=exc.code, event_id=ev.event_id) from None
        elif isinstance(ev, ResponseCancel):
            try:
                await conv.cancel_response("client_cancelled")
            except NoActiveResponseError as exc:
                raise ProtocolError(exc.message, code=exc.code, event_id=ev.event_id) from None
        elif isinstance(ev, OutputAudioBufferClear):
            if conv.response_active:
                await conv.cancel_response("client_cancelled")
            self.send(server_event("output_audio_buffer.cleared"))
        elif isinstance(ev, InputImageBufferAppend):
            if not self.frame_rate.allow():
                if self.frame_rate.should_report():
                    raise ProtocolError(
                        f"camera frames above {self.limits.max_frame_rate:g} per second are dropped "
                        f"({self.frame_rate.dropped} so far)", code="frame_rate_exceeded", param="image",
                        event_id=ev.event_id)
                self._count_limit("frame_rate_exceeded")
                return
            check_image_b64(ev.image, self.limits, "image", ev.event_id)
            frame = _b64(ev.image, "image", ev.event_id)
            check_image(frame, self.limits, "image", ev.event_id)
            await conv.add_image(frame, frame=True)
            self.frames_received += 1
            # Acknowledged so a camera client knows its frames arrive (and are decodable).
            self.send(server_event("input_image_buffer.appended", frames_received=self.frames_received))
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

    async def _create_item(self, ev: ConversationItemCreate) -> None:
        item = ev.item
        if item.get("type", "message") != "message":
            raise ProtocolError(f"item type {item.get('type')!r} is not supported; use 'message'",
                                param="item.type", event_id=ev.event_id)
        role = item.get("role", "user")
        if role not in ("user", "assistant", "system"):
            raise ProtocolError(f"item.role {role!r} must be user, assistant or system", param="item.role",
                                event_id=ev.event_id)
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise ProtocolError("item.content must be a non-empty list", param="item.content", event_id=ev.event_id)
        # Validate and decode every part first, then add them: a bad part later in the list
        # must not leave earlier parts in the history that the client was never told about.
        parts: list[tuple[str, Any]] = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_text", "text", "output_text"):
                text = part.get("text")
                parts.append((kind, text if isinstance(text, str) else ""))
            elif kind == "input_audio" and role == "user":
                parts.append((kind, _b64(part.get("audio") or "", f"item.content.{i}.audio", ev.event_id)))
            elif kind == "input_image" and role == "user":
                url = part.get("image_url") or ""
                if not isinstance(url, str) or not url.startswith("data:") or "," not in url:
                    raise ProtocolError("input_image.image_url must be a data: URL (base64 JPEG or PNG)",
                                        param=f"item.content.{i}.image_url", event_id=ev.event_id)
                param = f"item.content.{i}.image_url"
                check_image_b64(url.split(",", 1)[1], self.limits, param, ev.event_id)
                image = _b64(url.split(",", 1)[1], param, ev.event_id)
                check_image(image, self.limits, param, ev.event_id)
                parts.append((kind, image))
            else:
                raise ProtocolError(f"content type {kind!r} is not supported for role {role}",
                                    param=f"item.content.{i}.type", event_id=ev.event_id)
        out_content = []
        item_id = None
        for kind, payload in parts:
            if kind == "input_audio":
                item_id, transcript = await self.conv.add_audio_item(payload)
                out_content.append({"type": "input_audio", "transcript": transcript})
            elif kind == "input_image":
                item_id = await self.conv.add_image(payload)
                out_content.append({"type": "input_image"})
            else:
                item_id = await self.conv.add_text(payload, role)
                out_content.append({"type": kind, "text": payload})
        full = message_item(item_id or new_id("item"), role, out_content)
        self.send(server_event(self.dialect.item_added, previous_item_id=self._last_item_id, item=full))
        if not self.dialect.beta:
            self.send(server_event("conversation.item.done", previous_item_id=self._last_item_id, item=full))
        self._last_item_id = full["id"]

    # ------------------------------------------------------------------ model -> client

    async def _pump(self) -> None:
        d = self.dialect
        async for e in self.conv.events():
            kind = e.type
            if kind == "audio_chunk":
                r = self._responses.get(e.response_id)
                if r is not None:
                    now = time.monotonic()
                    r.setdefault("first_audio", now)
                self.send(server_event(d.audio_delta, response_id=e.response_id, item_id=e.item_id,
                                       output_index=0, content_index=0,
                                       delta=base64.b64encode(e.pcm).decode("ascii")))
            elif kind == "text_delta":
                r = self._responses.get(e.response_id)
                if r is not None:
                    r.setdefault("first_text", time.monotonic())
                    audio = r["audio"]
                else:
                    audio = True
                self.send(server_event(d.transcript_delta if audio else d.text_delta, response_id=e.response_id,
                                       item_id=e.item_id, output_index=0, content_index=0, delta=e.delta))
            elif kind == "speech_started":
                self.send(server_event("input_audio_buffer.speech_started", audio_start_ms=e.audio_start_ms,
                                       item_id=e.item_id))
            elif kind == "speech_stopped":
                self._speech_stopped_at = time.monotonic()
                self.send(server_event("input_audio_buffer.speech_stopped", audio_end_ms=e.audio_end_ms,
                                       item_id=e.item_id))
            elif kind == "input_committed":
                self.send(server_event("input_audio_buffer.committed", previous_item_id=self._last_item_id,
                                       item_id=e.item_id))
                item = message_item(e.item_id, "user", [{"type": "input_audio", "transcript": None}], "completed")
                self.send(server_event(d.item_added, previous_item_id=self._last_item_id, item=item))
                self._last_item_id = e.item_id
            elif kind == "input_transcript":
                self.send(server_event("conversation.item.input_audio_transcription.completed", item_id=e.item_id,
                                       content_index=0, transcript=e.transcript))
                if not d.beta:
                    item = message_item(e.item_id, "user", [{"type": "input_audio", "transcript": e.transcript}])
                    self.send(server_event("conversation.item.done", item=item))
            elif kind == "response_started":
                self._response_started(e)
            elif kind == "response_done":
                self._response_done(e)
            elif kind == "error":
                self.send_error(e.message, e.code, kind="server_error")

    def _response_started(self, e) -> None:
        d = self.dialect
        audio = e.output_audio
        self._responses[e.response_id] = {"start": time.monotonic(), "audio": audio,
                                          "speech_stopped": self._speech_stopped_at}
        self._speech_stopped_at = None
        modalities = ["audio"] if audio else ["text"]
        response = {"id": e.response_id, "object": "realtime.response", "status": "in_progress",
                    "status_details": None, "output": [], "usage": None,
                    ("modalities" if d.beta else "output_modalities"): ["text", "audio"] if (audio and d.beta) else modalities}
        self.send(server_event("response.created", response=response))
        item = message_item(e.item_id, "assistant", [], "in_progress")
        self.send(server_event("response.output_item.added", response_id=e.response_id, output_index=0, item=item))
        self.send(server_event(d.item_added, previous_item_id=self._last_item_id, item=item))
        self._last_item_id = e.item_id
        part = {"type": "audio", "transcript": ""} if audio else {"type": "text", "text": ""}
        self.send(server_event("response.content_part.added", response_id=e.response_id, item_id=e.item_id,
                               output_index=0, content_index=0, part=part))

    def _response_done(self, e) -> None:
        d = self.dialect
        r = self._responses.pop(e.response_id, {"start": time.monotonic(), "audio": True, "speech_stopped": None})
        audio = r["audio"]
        ids = {"response_id": e.response_id, "item_id": e.item_id, "output_index": 0, "content_index": 0}
        if audio:
            self.send(server_event(d.audio_done, **ids))
            self.send(server_event(d.transcript_done, transcript=e.text, **ids))
            part = {"type": "audio", "transcript": e.text}
            content = [{"type": "output_audio" if not d.beta else "audio", "transcript": e.text}]
        else:
            self.send(server_event(d.text_done, text=e.text, **ids))
            part = {"type": "text", "text": e.text}
            content = [{"type": "output_text" if not d.beta else "text", "text": e.text}]
        self.send(server_event("response.content_part.done", part=part, **ids))
        item_status = "completed" if e.status == "completed" else "incomplete"
        item = message_item(e.item_id, "assistant", content, item_status)
        self.send(server_event("response.output_item.done", response_id=e.response_id, output_index=0, item=item))
        if not d.beta:
            self.send(server_event("conversation.item.done", item=item))
        details = None
        if e.status != "completed":
            details = {"type": e.status, "reason": e.reason}
        response = {"id": e.response_id, "object": "realtime.response", "status": e.status,
                    "status_details": details, "output": [item],
                    "usage": {"total_tokens": e.output_tokens, "input_tokens": 0, "output_tokens": e.output_tokens}}
        self.send(server_event("response.done", response=response))
        start = r["start"]
        metrics = {
            "response_id": e.response_id,
            "ttft_ms": _ms(r.get("first_text"), start),
            "ttfp_ms": _ms(r.get("first_audio"), start),
            "v2v_ms": _ms(r.get("first_audio"), r.get("speech_stopped")),
            "e2e_ms": _ms(time.monotonic(), start),
            "audio_ms": round(e.audio_ms, 1),
            "status": e.status,
        }
        self.send(server_event("session.metrics", metrics=metrics))
        if self.on_turn_metrics is not None:
            self.on_turn_metrics(metrics)


def _ms(t: float | None, t0: float | None) -> float | None:
    if t is None or t0 is None:
        return None
    return round(max(0.0, t - t0) * 1000, 1)


def _b64(data: str, param: str, event_id: str | None = None) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"{param} is not valid base64", code="invalid_base64", param=param,
                            event_id=event_id) from None


def _history_item(m) -> dict[str, Any]:
    kind = "input_text" if m.role != "assistant" else "output_text"
    return message_item(m.item_id, m.role, [{"type": kind, "text": m.content}])
