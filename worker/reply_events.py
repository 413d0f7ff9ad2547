"""A response's protocol events, in the order OpenAI sends them: ``response.created``, the output
item and its content part, the deltas, their ``done`` events, ``response.done``; then our
``session.metrics`` (sent only to clients that asked for it).

Each response keeps its own record (timing, audio encoder, metadata), so out-of-band replies and
the history's replies render the same way; only the former stay out of the conversation.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.conversation.events import (
    AudioChunk,
    FunctionCall,
    FunctionCallDelta,
    FunctionCallDone,
    FunctionCallStarted,
    McpCallFinished,
    McpCallRunning,
    ResponseDone,
    ResponseStarted,
    TextDelta,
)
from core.protocol import Dialect, server_event
from worker.audio_formats import AudioFormat, OutputEncoder
from worker.items import in_progress_item


@dataclass(slots=True)
class _Reply:
    started: ResponseStarted
    start: float
    speech_stopped: float | None
    encoder: OutputEncoder
    marks: dict[str, float] = field(default_factory=dict)  # the turn's moments before the reply (monotonic)
    start_epoch: float = 0.0
    first_text: float | None = None
    first_audio: float | None = None
    message_index: int | None = None  # output index of the message item, once it has output
    outputs: int = 0  # output items opened so far
    last_item: str | None = None  # the previous item for the next output item
    call_index: dict[str, int] = field(default_factory=dict)  # call item id -> output index


class ReplyEvents:
    def __init__(self, dialect: Dialect, send: Callable[[dict[str, Any]], None], conversation_id: str,
                 record_audio: Callable[[dict[str, Any]], None] | None = None, raw_audio: bool = False) -> None:
        self.d = dialect
        # Audio deltas carry the PCM itself (``bytes``), for a writer that sends it as a binary
        # frame (a call's gateway, ``core/audio_frames.py``); else base64, as the API has it.
        self.raw_audio = raw_audio
        self.send = send
        self.conversation_id = conversation_id
        self.record_audio = record_audio  # G.711 sessions: the recording keeps the 24 kHz PCM
        self.output_format = AudioFormat()
        self.marks: dict[str, float] = {}  # this turn so far: voice_ended, speech_stopped, committed, transcribed
        self.on_turn_metrics: Callable[[dict[str, Any]], None] | None = None
        self._replies: dict[str, _Reply] = {}

    def _response(self, e: ResponseStarted, status: str, **extra: Any) -> dict[str, Any]:
        audio = e.output_audio
        modalities = (["text", "audio"] if self.d.beta else ["audio"]) if audio else ["text"]
        out: dict[str, Any] = {
            "id": e.response_id, "object": "realtime.response", "status": status, "status_details": None,
            "output": [], "usage": None, "metadata": e.metadata,
            "conversation_id": self.conversation_id if e.in_conversation else None,
            ("modalities" if self.d.beta else "output_modalities"): modalities,
        }
        if not self.d.beta and audio:
            out["audio"] = {"output": {"format": self.output_format.ga()}}
        out.update(extra)
        return out

    @property
    def speech_stopped_at(self) -> float | None:
        return self.marks.get("speech_stopped")

    def mark(self, moment: str, voice_ended_ms_ago: float | None = None) -> None:
        """A moment of the user's turn, for the next reply's stages: ``speech_stopped`` (a new
        turn's first; with when the voice itself ended), ``committed``, ``transcribed``."""
        now = time.monotonic()
        if moment == "speech_stopped":
            self.marks = {"voice_ended": now - max(0.0, voice_ended_ms_ago or 0.0) / 1000}
        self.marks[moment] = now

    def started(self, e: ResponseStarted, previous_item_id: str | None) -> None:
        self._replies[e.response_id] = _Reply(e, time.monotonic(), self.speech_stopped_at,
                                              OutputEncoder(self.output_format), last_item=previous_item_id,
                                              marks=dict(self.marks), start_epoch=time.time())
        self.marks.clear()
        self.send(server_event("response.created", response=self._response(e, "in_progress")))

    def _open_message(self, r: _Reply) -> None:
        """The reply's message item opens with its first output (a reply that only calls
        functions has none)."""
        if r.message_index is not None:
            return
        e = r.started
        r.message_index, r.outputs = r.outputs, r.outputs + 1
        item = in_progress_item(e.item_id)
        self.send(server_event("response.output_item.added", response_id=e.response_id,
                               output_index=r.message_index, item=item))
        if e.in_conversation:
            self.send(server_event(self.d.item_added, previous_item_id=r.last_item, item=item))
            r.last_item = e.item_id
        part = {"type": "audio", "transcript": ""} if e.output_audio else {"type": "text", "text": ""}
        self.send(server_event("response.content_part.added", response_id=e.response_id, item_id=e.item_id,
                               output_index=r.message_index, content_index=0, part=part))

    def call_started(self, e: FunctionCallStarted) -> None:
        """A call's item opens (an approval request opens only once its arguments are whole)."""
        if e.call.kind != "mcp_approval_request":
            self._open_call(e.response_id, e.call, "in_progress")

    def _open_call(self, response_id: str, call: FunctionCall, status: str) -> int:
        r = self._replies.get(response_id)
        if r is None:
            return 0
        index = r.call_index[call.item_id] = r.outputs
        r.outputs += 1
        item = _call_item(call, status)
        self.send(server_event("response.output_item.added", response_id=response_id, output_index=index, item=item))
        if r.started.in_conversation:
            self.send(server_event(self.d.item_added, previous_item_id=r.last_item, item=item))
            r.last_item = call.item_id
        return index

    def _index(self, response_id: str, call: FunctionCall) -> tuple[_Reply | None, int]:
        r = self._replies.get(response_id)
        return r, (r.call_index.get(call.item_id, 0) if r is not None else 0)

    def call_delta(self, e: FunctionCallDelta) -> None:
        r, index = self._index(e.response_id, e.call)
        if e.call.kind == "mcp_call":
            self.send(server_event("response.mcp_call_arguments.delta", response_id=e.response_id,
                                   item_id=e.call.item_id, output_index=index, delta=e.delta))
        elif e.call.kind == "function_call":
            self.send(server_event("response.function_call_arguments.delta", response_id=e.response_id,
                                   item_id=e.call.item_id, output_index=index, call_id=e.call.call_id,
                                   delta=e.delta))

    def call_done(self, e: FunctionCallDone) -> None:
        call = e.call
        if call.kind == "mcp_approval_request":  # the whole request at once; the response then ends
            index = self._open_call(e.response_id, call, "completed")
            self._close_item(e.response_id, index, call)
            return
        r, index = self._index(e.response_id, call)
        if call.kind == "mcp_call":  # the item closes once the server has run it (mcp_finished)
            self.send(server_event("response.mcp_call_arguments.done", response_id=e.response_id,
                                   item_id=call.item_id, output_index=index, arguments=call.arguments))
            return
        self.send(server_event("response.function_call_arguments.done", response_id=e.response_id,
                               item_id=call.item_id, output_index=index, call_id=call.call_id,
                               name=call.name, arguments=call.arguments))
        self._close_item(e.response_id, index, call)

    def _close_item(self, response_id: str, index: int, call: FunctionCall) -> None:
        r = self._replies.get(response_id)
        item = _call_item(call, "completed")
        self.send(server_event("response.output_item.done", response_id=response_id, output_index=index, item=item))
        if r is not None and r.started.in_conversation and not self.d.beta:
            self.send(server_event("conversation.item.done", item=item))

    def mcp_running(self, e: McpCallRunning) -> None:
        _, index = self._index(e.response_id, e.call)
        self.send(server_event("response.mcp_call.in_progress", item_id=e.call.item_id, output_index=index))

    def mcp_finished(self, e: McpCallFinished) -> None:
        _, index = self._index(e.response_id, e.call)
        outcome = "failed" if e.call.error is not None else "completed"
        self.send(server_event(f"response.mcp_call.{outcome}", item_id=e.call.item_id, output_index=index))
        self._close_item(e.response_id, index, e.call)

    def text(self, e: TextDelta) -> None:
        r = self._replies.get(e.response_id)
        audio, index = True, 0
        if r is not None:
            if r.first_text is None:
                r.first_text = time.monotonic()
            self._open_message(r)
            audio, index = r.started.output_audio, r.message_index
        d = self.d
        self.send(server_event(d.transcript_delta if audio else d.text_delta, response_id=e.response_id,
                               item_id=e.item_id, output_index=index, content_index=0, delta=e.delta))

    async def audio(self, e: AudioChunk) -> None:
        r = self._replies.get(e.response_id)
        if r is not None:
            if r.first_audio is None:
                r.first_audio = time.monotonic()
            self._open_message(r)
        pcm = e.pcm
        if r is not None and r.encoder.fmt.g711:
            pcm = await asyncio.to_thread(r.encoder.encode, e.pcm)
            if self.record_audio is not None:
                self.record_audio(self._audio_delta(e, e.pcm))
            if not pcm:
                return
        self.send(self._audio_delta(e, pcm))

    def _audio_delta(self, e: AudioChunk, data: bytes) -> dict[str, Any]:
        r = self._replies.get(e.response_id)
        index = r.message_index if r is not None and r.message_index is not None else 0
        return server_event(self.d.audio_delta, response_id=e.response_id, item_id=e.item_id, output_index=index,
                            content_index=0, delta=self._delta(data))

    def _delta(self, data: bytes) -> str | bytes:
        return data if self.raw_audio else base64.b64encode(data).decode("ascii")

    def done(self, e: ResponseDone, item: dict[str, Any]) -> None:
        """``item``: the assistant message as the output shows it (rendered by the session)."""
        d = self.d
        r = self._replies.pop(e.response_id, None)
        if r is None:
            r = _Reply(ResponseStarted(e.response_id, e.item_id, e.output_audio), time.monotonic(), None,
                       OutputEncoder(self.output_format))
        started = r.started
        output = [_call_item(c, "completed" if c.complete else "incomplete") for c in e.calls]
        if r.message_index is not None or not e.calls:  # a reply with no output at all still has its message
            self._open_message(r)
            ids = {"response_id": e.response_id, "item_id": e.item_id, "output_index": r.message_index,
                   "content_index": 0}
            if started.output_audio:
                tail = r.encoder.flush()
                if tail:
                    self.send(server_event(d.audio_delta, delta=self._delta(tail), **ids))
                self.send(server_event(d.audio_done, **ids))
                self.send(server_event(d.transcript_done, transcript=e.text, **ids))
                part = {"type": "audio", "transcript": e.text}
            else:
                self.send(server_event(d.text_done, text=e.text, **ids))
                part = {"type": "text", "text": e.text}
            self.send(server_event("response.content_part.done", part=part, **ids))
            self.send(server_event("response.output_item.done", response_id=e.response_id,
                                   output_index=r.message_index, item=item))
            if not d.beta and e.in_conversation:
                self.send(server_event("conversation.item.done", item=item))
            output.insert(r.message_index, item)
        details = None
        if e.status == "failed":  # OpenAI's shape: the why is an error object, not a reason
            kind = "invalid_request_error" if e.reason == "context_length_exceeded" else "server_error"
            details = {"type": "failed", "error": {"type": kind, "code": e.reason or "server_error"}}
        elif e.status != "completed":
            details = {"type": e.status, "reason": e.reason}
        usage = {"total_tokens": e.prompt_tokens + e.output_tokens, "input_tokens": e.prompt_tokens,
                 "output_tokens": e.output_tokens}
        response = self._response(started, e.status, status_details=details, output=output, usage=usage)
        self.send(server_event("response.done", response=response))
        start = r.start
        metrics = {
            "response_id": e.response_id,
            "ttft_ms": _ms(r.first_text, start),
            "ttfp_ms": _ms(r.first_audio, start),
            "v2v_ms": _ms(r.first_audio, r.speech_stopped),
            "e2e_ms": _ms(time.monotonic(), start),
            "audio_ms": round(e.audio_ms, 1),
            "status": e.status,
            "interrupted": e.status == "cancelled" and e.reason == "turn_detected",
            "input_tokens": e.prompt_tokens,
            "output_tokens": e.output_tokens,
            "start_epoch": round(r.start_epoch, 3),
            "stages": _stages(r),
        }
        self.send(server_event("session.metrics", metrics=metrics))
        if self.on_turn_metrics is not None:
            self.on_turn_metrics(metrics)


def _call_item(call: FunctionCall, status: str) -> dict[str, Any]:
    """A call as an output item: a function call, an MCP call (with its result once run) or an
    MCP approval request (the server's tool name, not the function name the model saw)."""
    if call.kind == "function_call":
        return {"id": call.item_id, "object": "realtime.item", "type": "function_call", "status": status,
                "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    out = {"id": call.item_id, "type": call.kind, "server_label": call.server_label, "name": call.tool,
           "arguments": call.arguments}
    if call.kind == "mcp_call":
        out.update(approval_request_id=call.approval_request_id, output=call.output, error=call.error)
    return out


def _stages(r: _Reply) -> dict[str, float | None]:
    """Where the turn's time went, in order (ms; None where a stage did not happen or came out of
    order): the wait after speech until the turn was decided, recognition, the model's first
    words from the reply's start, then its first audio after them."""
    m = r.marks
    return {
        "end_of_turn_ms": _ordered(m.get("committed"), m.get("voice_ended")),
        "asr_ms": _ordered(m.get("transcribed"), m.get("committed")),
        "llm_ms": _ms(r.first_text, r.start),
        "tts_ms": _ordered(r.first_audio, r.first_text),
    }


def _ordered(t: float | None, t0: float | None) -> float | None:
    """``t - t0`` in ms when both happened in that order."""
    return _ms(t, t0) if t is not None and t0 is not None and t >= t0 else None


def _ms(t: float | None, t0: float | None) -> float | None:
    if t is None or t0 is None:
        return None
    return round(max(0.0, t - t0) * 1000, 1)
