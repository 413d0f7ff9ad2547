"""One session's conversation, the same for every backend: items, turn-taking and responses.

The core keeps the item history, runs turn detection on the input audio (VAD, barge-in, the
speculative reply held during the silence hangover), owns each response's lifecycle (start,
cancel, truncate to the share the listener heard, ``ResponseDone`` bookkeeping) and emits one
ordered stream of ``ConversationEvent``s. The backend (``core/processors/``) supplies only what
differs by model: a reply generator, transcription, image preparation, and what it offers.

Two ways a backend can take user speech, chosen by ``backend.capabilities.transcript_first``:
- transcript first (a text LLM, the cascade): each turn is transcribed before the reply, the
  transcript is what the model reads, and a turn with no words is dropped;
- audio (an omni model): the clip itself enters the history and the reply starts at once; its
  transcript, for the client's display only, is made when no reply is running.

Model work runs in the backend's threads; the event loop only routes. User speech and turns
are ``turns.py`` (a part of this class, split out by job).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.audio import OUTPUT_RATE, pcm16_to_float, resample
from core.conversation.audio_input import VAD_RATE, AudioInput
from core.conversation.barge_in import BargeIn
from core.conversation.config import ConversationConfig
from core.conversation.events import (
    AudioChunk,
    CancelResult,
    ConversationError,
    ConversationEvent,
    FunctionCall,
    FunctionCallDelta,
    FunctionCallDone,
    FunctionCallStarted,
    ResponseDone,
    ResponseStarted,
    TextDelta,
)
from core.conversation.idle_timeout import IdleTimeout
from core.conversation.items import ROOT, HistoryMessage, Item, ItemHistory, Part, PartKind, Role
from core.conversation.mcp_calls import McpCalls
from core.conversation.mcp_tools import SEPARATOR, McpTools, for_model
from core.conversation.model import ConversationModel
from core.conversation.playback import PlaybackClock
from core.conversation.reply import ReplyJob, Response, Segment, heard_text
from core.conversation.truncation import ContextWindow
from core.conversation.turns import TurnTaking
from core.errors import (
    DuplicateItemError,
    InvalidAudioError,
    InvalidInputError,
    InvalidTextError,
    ItemNotFoundError,
    NoActiveResponseError,
    ResponseActiveError,
)
from core.ids import new_id

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 20_000
PAST_REPLIES_KEPT = 8  # replies whose audio accounting truncation can still use


@dataclass(slots=True)
class ConversationStats:
    """Figures the benchmarks read; cheap to keep."""

    last_cancel_stop_ms: float | None = None
    last_prefill_ms: float | None = None
    last_reused_tokens: int = 0
    speculative_hits: int = 0
    speculative_misses: int = 0
    speculative_replies_used: int = 0
    speculative_replies_dropped: int = 0
    turn_scores: int = 0  # semantic_vad: pauses scored
    last_turn_score: float | None = None
    turn_score_ms: float | None = None  # the last score's time on the model thread, queue included


class Conversation(TurnTaking, BargeIn, McpCalls):
    """One session's model state. Not thread-safe: call from one event loop.

    Backends with per-mode behaviour (MiniCPM-o's duplex loop) subclass it and use the hooks
    ``_on_audio``, ``_on_config`` and ``_on_history_edited``.
    """

    def __init__(self, backend: ConversationModel, config: ConversationConfig) -> None:
        self.backend = backend
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[ConversationEvent | None] = asyncio.Queue()
        self._items = ItemHistory()
        self._frames: deque[Any] = deque(maxlen=backend.capabilities.max_frames)
        self._response: Response | None = None
        self._past_segments: dict[str, list[Segment]] = {}
        self._audio_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._speech_item: str | None = None
        self._speculation: tuple[int, concurrent.futures.Future] | None = None
        self._spec_generation = 0
        self._idle = asyncio.Event()  # no reply running: display transcripts wait for this
        self._idle.set()
        self.stats = ConversationStats()
        self.playback = PlaybackClock()  # what the listener has heard of the assistant's audio
        self._overlap = None  # speech over the assistant's audio, being judged (barge_in.py)
        self._cut: Response | None = None  # a reply cut by an interruption, until its turn has words
        self._last_spoken: Response | None = None  # the last reply with audio, once finished
        self.model_state = backend.new_model_state()
        self.config = self._checked(config)
        self._input = AudioInput(backend.vad_model, self.config)
        self.context = ContextWindow(backend)  # what each reply reads under ``truncation``
        self.idle_timeout = IdleTimeout(self)  # ``turn_detection.idle_timeout_ms``
        self.mcp = McpTools(self)  # MCP servers' tools, run by the server (the worker sets the connector)

    # ------------------------------------------------------------------ config & state

    def _checked(self, config: ConversationConfig) -> ConversationConfig:
        td = config.turn_detection
        types = self.backend.capabilities.turn_detection_types
        if td is not None and td.type not in types:
            raise InvalidInputError(
                f"turn_detection.type {td.type!r} is not supported by backend {self.backend.name}; "
                f"use one of {', '.join(repr(t) for t in types)} or null",
                param="turn_detection.type",
            )
        if (config.tools or config.mcp_servers) and not self.backend.capabilities.supports_tools:
            raise InvalidInputError(f"backend {self.backend.name} cannot call functions; send no tools",
                                    param="tools")
        labels = [s.server_label for s in config.mcp_servers]
        if len(set(labels)) != len(labels):
            raise InvalidInputError("two MCP tools share a server_label; each needs its own", param="tools")
        if config.tool_choice not in ("auto", "none", "required") and config.tool_choice not in {
                t.name for t in config.tools} and config.tool_choice.partition(SEPARATOR)[0] not in labels:
            raise InvalidInputError(f"tool_choice names {config.tool_choice!r}, which is not among the tools",
                                    param="tool_choice")
        self.backend.check_tools(config.tools)
        voice = self.backend.resolve_voice(config.voice)
        return config if voice == config.voice else config.model_copy(update={"voice": voice})

    def update(self, config: ConversationConfig) -> None:
        """Apply new settings (between turns)."""
        config = self._checked(config)
        old, self.config = self.config, config
        if old.input_sample_rate != config.input_sample_rate or (old.turn_detection is None) != (
            config.turn_detection is None
        ):
            self._input = AudioInput(self.backend.vad_model, config)
            self._speech_item = None
            self._forget_speculation()
        elif config.turn_detection is not None:
            self._input.configure(config.turn_detection)
        self._on_config(old)
        self.idle_timeout.configure()
        self.mcp.sync(config.mcp_servers)

    def _on_config(self, old: ConversationConfig | None) -> None:
        """Hook for backends with per-mode state (MiniCPM-o's duplex session)."""

    @property
    def history(self) -> list[HistoryMessage]:
        return self._items.messages()

    @property
    def items(self) -> list[Item]:
        return self._items.snapshot()

    @property
    def response_active(self) -> bool:
        return self._response is not None and not self._response.held

    def _emit(self, event: ConversationEvent) -> None:
        if not self._closed:
            if isinstance(event, AudioChunk):
                self.playback.sent(event.item_id, len(event.pcm) // 2)
            self._queue.put_nowait(event)
            self.idle_timeout.observe(event)

    def _emit_for(self, resp: Response, event: ConversationEvent) -> None:
        if resp.held:
            resp.held_events.append(event)
        else:
            self._emit(event)

    async def events(self) -> AsyncIterator[ConversationEvent]:
        """Every event, in order, until ``close``."""
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    def _spawn(self, coro) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def call_soon(self, fn: Callable, *args) -> None:
        """Run ``fn`` on the conversation's loop; safe from any thread."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: the session is gone
            pass

    def _remember(self, item: Item) -> Item:
        return self._items.append(item, self.config.max_history_messages)

    async def _in_thread(self, pool, fn, *args):
        return await self._loop.run_in_executor(pool, fn, *args)

    # ------------------------------------------------------------------ items

    def item(self, item_id: str) -> Item | None:
        return self._items.get(item_id)

    def previous_item_id(self, item_id: str) -> str | None:
        """The id of the item before ``item_id`` in the history (None if it is first)."""
        return self._items.previous_id(item_id)

    def _check_placement(self, item_id: str | None, previous_item_id: str | None) -> None:
        if item_id is not None and item_id in self._items:
            raise DuplicateItemError(f"the conversation already has an item with id {item_id!r}", param="item.id")
        if previous_item_id not in (None, ROOT) and previous_item_id not in self._items:
            raise ItemNotFoundError(f"previous_item_id {previous_item_id!r} is not in the conversation "
                                    "(use 'root' to place an item first)", param="previous_item_id")

    async def prepare_message(self, role: Role, parts: list[tuple[PartKind, Any]], item_id: str | None = None) -> Item:
        """Build a message from text, speech (PCM16 at the input rate) and images (JPEG/PNG bytes),
        in the client's order: speech is resampled (and transcribed where the backend reads words
        or the client wants a transcript), images prepared. Not placed in the history."""
        if not parts:
            raise InvalidInputError("a message needs at least one content part", param="item.content")
        item = Item(role, item_id=item_id or new_id("item"))
        item.parts.clear()
        clips: list[np.ndarray] = []
        for kind, payload in parts:
            if kind == "text":
                if not isinstance(payload, str) or len(payload) > MAX_TEXT_CHARS:
                    raise InvalidTextError(f"text must be a string of at most {MAX_TEXT_CHARS} characters",
                                           param="text")
                item.parts.append(Part("text", payload))
            elif kind == "audio":
                samples = pcm16_to_float(payload, self.config.input_sample_rate)
                clips.append(await self._in_thread(self.backend.io_pool, resample, samples,
                                                   self.config.input_sample_rate, VAD_RATE))
                item.parts.append(Part("audio", None))
            else:
                prepared = await self._in_thread(self.backend.io_pool, self.backend.prepare_image, payload)
                item.images.append(prepared)
                item.image_bytes.append(bytes(payload))
                item.parts.append(Part("image", self.backend.image_text(prepared)))
        if clips:
            audio = np.concatenate(clips)
            if not self.backend.capabilities.transcript_first:
                item.audio = audio
            transcript = None
            if self.backend.capabilities.transcript_first or self._transcribes_for_display():
                transcript = await self._in_thread(self.backend.transcribe_pool, self.backend.transcribe_turn, audio)
            item.set_transcript((transcript or "").strip())
        else:
            item.refresh_text()
        if not clips and not item.images and not item.text:
            raise InvalidTextError("text must be a non-empty string", param="text")
        return item

    async def add_message(self, role: Role, parts: list[tuple[PartKind, Any]], *, item_id: str | None = None,
                          previous_item_id: str | None = None) -> Item:
        """Add a message after ``previous_item_id`` (``"root"``: first; None: last)."""
        self._check_placement(item_id, previous_item_id)
        item = await self.prepare_message(role, parts, item_id)
        return self.insert_item(item, previous_item_id)

    def insert_item(self, item: Item, previous_item_id: str | None = None) -> Item:
        """Place a ready item (a message, a function call or its output) in the history."""
        self._check_placement(item.item_id, previous_item_id)  # again: the history may have moved on
        appended = previous_item_id is None or (previous_item_id != ROOT and previous_item_id == self._items.last_id())
        self._items.insert(item, previous_item_id, self.config.max_history_messages)
        if not appended:
            self._on_history_edited()  # placed inside the history: a cached prompt no longer matches
        return item

    async def add_text(self, text: str, role: Role = "user") -> str:
        """Append a text item to the history; returns its item id."""
        return (await self.add_message(role, [("text", text)])).item_id

    async def add_image(self, data: bytes, *, frame: bool = False) -> str:
        """Add an image (JPEG/PNG). ``frame`` marks a camera frame (only the latest few are kept)."""
        if frame:
            self._frames.append(await self._in_thread(self.backend.io_pool, self.backend.prepare_image, data))
            return new_id("item")
        return (await self.add_message("user", [("image", data)])).item_id

    async def add_audio_item(self, pcm: bytes) -> tuple[str, str]:
        """Add a whole user audio clip (PCM16 at the input rate) as one item; returns (id, transcript)."""
        item = await self.add_message("user", [("audio", pcm)])
        return item.item_id, item.text

    def delete_item(self, item_id: str) -> bool:
        """Remove an item from the history; False if there is none with that id."""
        deleted = self._items.remove(item_id)
        if deleted:
            self._on_history_edited()
        return deleted

    def _on_history_edited(self) -> None:
        """Hook: a backend that caches the prompt (MiniCPM-o's KV session) must rebuild it."""

    # ------------------------------------------------------------------ responses

    def system_prompt(self, instructions: str | None) -> str:
        return instructions or self.config.instructions or self.backend.default_instructions or ""

    async def create_response(
        self,
        *,
        instructions: str | None = None,
        output_audio: bool | None = None,
        max_output_tokens: int | None = None,
        input_items: list[Item] | None = None,
        in_conversation: bool = True,
        metadata: dict[str, str] | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> str:
        """Start a reply to the history so far (optionally overriding settings for this one
        reply); returns its response id. ``input_items``: the context for this reply instead of
        the history; ``in_conversation=False``: an out-of-band reply that leaves the history as
        it is. ``overrides``: other config fields for this reply (``tools``, ``tool_choice``)."""
        self._drop_held()
        self._confirm_cut()
        if self._response is not None:
            raise ResponseActiveError(f"conversation already has an active response {self._response.response_id}")
        cfg = self.config
        if output_audio is not None or max_output_tokens is not None or overrides:
            cfg = self._checked(cfg.model_copy(update={
                "output_audio": cfg.output_audio if output_audio is None else output_audio,
                "max_output_tokens": max_output_tokens or cfg.max_output_tokens,
                **(overrides or {}),
            }))
        resp = Response(new_id("resp"), new_id("item"), cfg.output_audio, in_conversation, metadata)
        self._run(resp, cfg, instructions, items=input_items)
        return resp.response_id

    def begin_response(self, output_audio: bool) -> Response:
        """Open a response record and announce it (the caller produces its output)."""
        resp = Response(new_id("resp"), new_id("item"), output_audio)
        self._open(resp)
        return resp

    def _open(self, resp: Response) -> None:
        self._response = resp
        self._idle.clear()
        previous = self._items.last_id() if resp.in_conversation else None
        self._emit_for(resp, ResponseStarted(resp.response_id, resp.item_id, resp.output_audio, resp.in_conversation,
                                             previous, resp.metadata))

    def reply_job(self, resp: Response, cfg: ConversationConfig, instructions: str | None = None,
                  items: list[Item] | None = None) -> ReplyJob:
        items = self._items.snapshot() if items is None else items
        return ReplyJob(self, resp, items, list(self._frames), self.system_prompt(instructions), cfg)

    def _run(self, resp: Response, cfg: ConversationConfig, instructions: str | None,
             pending: Item | None = None, items: list[Item] | None = None) -> None:
        """Open ``resp`` and generate it from ``items`` (default: the history, plus ``pending``)."""
        self._open(resp)
        given = items is not None
        items = list(items) if items is not None else self._items.snapshot() + ([pending] if pending else [])
        items = self._fit_context(resp, cfg, instructions, items, from_history=not given)
        if items is not None:
            self._spawn(self._generate(resp, self.reply_job(resp, cfg, instructions, for_model(items))))

    def _fit_context(self, resp: Response, cfg: ConversationConfig, instructions: str | None, items: list[Item],
                     from_history: bool) -> list[Item] | None:
        """The items this reply reads under ``cfg.truncation`` (``truncation.py``): over the limit,
        the oldest leave the history (or only this reply's ``input``); None when the reply cannot
        fit with truncation disabled (it has failed: ``context_length_exceeded``)."""
        fit = self.context.fit(items, self.system_prompt(instructions), cfg)
        if fit.error is not None:
            self._emit_for(resp, ConversationError("context_length_exceeded", fit.error))
            self._finish(resp, "failed", "context_length_exceeded", "")
            return None
        if fit.dropped and from_history:
            for item in fit.dropped:
                self._items.remove(item.item_id)
            self._on_history_edited()
        return fit.items

    async def _generate(self, resp: Response, job: ReplyJob) -> None:
        status, reason = "completed", None
        ran_tools = False
        try:
            try:
                if job.config.mcp_servers:
                    await self._prepare_tools(resp, job)
                stats = await self.backend.generate_reply(job)
            finally:
                if resp.scores_turn and not resp.turn_scored:
                    job.end_of_message(None)  # the turn's wait must not hang on a reply that never scored
            resp.output_tokens, resp.prompt_tokens = stats.output_tokens, stats.prompt_tokens
            if stats.prefill_ms is not None:
                self.stats.last_prefill_ms = stats.prefill_ms
                self.stats.last_reused_tokens = stats.reused_tokens
            if stats.stop_reason == "length":
                status, reason = "incomplete", "max_output_tokens"
        except asyncio.CancelledError:
            resp.cancel.set()  # session closing: stop the model threads too
            raise
        except Exception as exc:  # one failed reply must not end the session
            log.exception("response failed")
            resp.cancel.set()
            status, reason = "failed", "server_error"
            self._emit_for(resp, ConversationError("response_failed", f"response failed: {exc}"))
        # Output queued with call_soon_threadsafe by the model threads lands before the final event.
        await asyncio.sleep(0)
        resp.generating = False
        if not resp.cancelled and status == "completed":
            ran_tools = await self._run_tool_calls(resp)
        if resp.cancelled:
            if resp.forward is not None:  # resumed after a false interruption: that response ends now
                self._finish(resp.forward, status, reason, resp.forward.text)
            elif resp.cancel_at is not None and resp.cancel.is_set():
                self.stats.last_cancel_stop_ms = (time.perf_counter() - resp.cancel_at) * 1000
            return
        self._finish(resp, status, reason, resp.text)
        if ran_tools and resp.in_conversation and self._response is None and not self._closed:
            self._speak_tool_results(resp, job)

    def _finish(self, resp: Response, status: str, reason: str | None, history_text: str) -> None:
        if resp.held:
            resp.pending_finish = (status, reason, history_text)
            return
        if self._response is resp:
            self._response = None
            self._idle.set()
        self._past_segments[resp.item_id] = resp.segments
        if resp.output_audio and resp.in_conversation:
            self._last_spoken = resp
        while len(self._past_segments) > PAST_REPLIES_KEPT:
            self._past_segments.pop(next(iter(self._past_segments)))
        item_status = "completed" if status == "completed" else "incomplete"
        if history_text.strip() and resp.in_conversation:
            text = history_text.strip()
            self._remember(Item("assistant", text, item_id=resp.item_id,
                                parts=[Part("audio" if resp.output_audio else "text", text)], status=item_status))
        for call in (c for c in resp.calls if c.complete and resp.in_conversation):
            if call.kind == "function_call":
                self._remember(Item("assistant", item_id=call.item_id, type="function_call", call_id=call.call_id,
                                    name=call.name, arguments=call.arguments, parts=[], status=item_status))
            elif call.kind == "mcp_approval_request":  # the user answers it (mcp_approval_response)
                self._remember(Item("assistant", item_id=call.item_id, type="mcp_approval_request",
                                    server_label=call.server_label, name=call.tool, arguments=call.arguments,
                                    parts=[]))
            # an mcp_call joined the history when it ran
        self._emit_for(resp, ResponseDone(resp.response_id, resp.item_id, status, reason, resp.text,
                                          resp.audio_ms, resp.output_tokens, resp.prompt_tokens,
                                          resp.in_conversation, resp.metadata, resp.output_audio,
                                          tuple(resp.calls)))

    def finish_response(self, resp: Response) -> None:
        """End a response whose output the caller produced (``begin_response``), unless cancelled."""
        if self._response is resp and not resp.cancelled:
            self._finish(resp, "completed", None, resp.text)

    def emit_text(self, resp: Response, delta: str) -> None:
        if resp.forward is not None:
            resp.text += delta
            self.emit_text(resp.forward, delta)
            return
        if resp.cancelled:
            if resp.shadow:
                resp.text += delta
            return
        resp.text += delta
        self._emit_for(resp, TextDelta(resp.response_id, resp.item_id, delta))

    def add_segment(self, resp: Response, segment: Segment) -> None:
        resp.segments.append(segment)
        if resp.forward is not None:
            resp.forward_segments[len(resp.segments) - 1] = len(resp.forward.segments)
            self.add_segment(resp.forward, Segment(segment.text))

    def emit_audio(self, resp: Response, index: int, pcm: bytes) -> None:
        n = len(pcm) // 2
        seg = resp.segments[index]
        seg.total_samples += n  # made, whether or not it goes out: the share heard is of this
        if resp.output_audio and resp.in_conversation:
            resp.pcm.append(pcm)  # a false interruption replays the rest (barge_in.py)
        if resp.forward is not None:
            self.emit_audio(resp.forward, resp.forward_segments.get(index, 0), pcm)
            return
        if resp.cancelled:
            return
        resp.audio_samples += n
        seg.emitted_samples += n
        self._emit_for(resp, AudioChunk(resp.response_id, resp.item_id, pcm, OUTPUT_RATE))

    def begin_call(self, resp: Response, name: str) -> None:
        if resp.cancelled:
            return
        call = FunctionCall(new_id("item"), new_id("call"), name)
        route = self.mcp.route(name)
        if route is not None:  # an MCP server's tool: the server runs it, or asks the user first
            server, tool = route
            call = replace(call, server_label=server.server_label, tool=tool.name,
                           approval=server.needs_approval(tool.name, tool.read_only))
        resp.calls.append(call)
        self._emit_for(resp, FunctionCallStarted(resp.response_id, call))

    def call_arguments(self, resp: Response, index: int, delta: str) -> None:
        if resp.cancelled or index >= len(resp.calls):
            return
        call = resp.calls[index]
        call = resp.calls[index] = replace(call, arguments=call.arguments + delta)
        self._emit_for(resp, FunctionCallDelta(resp.response_id, call, delta))

    def end_call(self, resp: Response, index: int) -> None:
        if resp.cancelled or index >= len(resp.calls):
            return
        call = resp.calls[index] = replace(resp.calls[index], complete=True)
        self._emit_for(resp, FunctionCallDone(resp.response_id, call))

    async def cancel_response(self, reason: str = "client_cancelled", heard_samples: int | None = None,
                              shadow: bool = False) -> CancelResult:
        """Stop the active reply now; raises ``NoActiveResponseError`` if there is none. The
        history keeps what was heard: ``heard_samples`` of its audio (a barge-in's estimate),
        else all that was sent. ``shadow``: the reply is held, not stopped, so a false
        interruption can resume it (``barge_in.py``): held at its gate until then."""
        resp = self._response
        if resp is None or resp.held:
            raise NoActiveResponseError("there is no active response to cancel")
        resp.cancel_at = time.perf_counter()
        resp.cancelled = True
        resp.shadow = shadow and resp.output_audio and resp.in_conversation
        if resp.shadow:
            resp.gate.clear()  # its generator waits until it resumes or is stopped
        else:
            resp.cancel.set()
        samples = resp.audio_samples if heard_samples is None else min(heard_samples, resp.audio_samples)
        heard = heard_text(resp.segments, samples, resp.text) if resp.output_audio else resp.text
        if heard_samples is not None and resp.text.strip() and heard.strip() != resp.text.strip():
            heard = heard.strip() + "…"  # cut here: the next reply reads where (the item stays, as the client saw it)
        self._finish(resp, "cancelled", reason, heard)
        return CancelResult(resp.response_id, resp.item_id, resp.text, resp.audio_ms)

    def truncate(self, item_id: str, audio_end_ms: int) -> str:
        """Cut an assistant item to what was heard; returns the kept text."""
        item = self._items.get(item_id)
        if item is None or item.role != "assistant":
            raise InvalidTextError(f"no assistant item {item_id!r} in the conversation", param="item_id")
        segments = self._past_segments.get(item_id)
        if segments is None:
            return item.text
        emitted = sum(s.emitted_samples for s in segments)
        if audio_end_ms < 0 or audio_end_ms * OUTPUT_RATE // 1000 > emitted + OUTPUT_RATE // 50:
            raise InvalidAudioError(
                f"audio_end_ms {audio_end_ms} is beyond the {emitted * 1000 // OUTPUT_RATE} ms of audio sent",
                param="audio_end_ms",
            )
        self.playback.stop(item_id, audio_end_ms * OUTPUT_RATE // 1000)
        kept = heard_text(segments, audio_end_ms * OUTPUT_RATE // 1000, item.text).strip()
        if kept:
            item.set_transcript(kept)
        else:
            self._items.remove(item_id)
        self._on_history_edited()
        return kept

    # ------------------------------------------------------------------ lifetime

    async def wait_idle(self) -> None:
        """Wait for background work (transcripts, replies) to finish; for tests and benches."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel work and free resources; idempotent."""
        if self._closed:
            return
        self._drop_held()
        self._confirm_cut()
        if self._response is not None:
            await self.cancel_response("session_closed")
        self._closed = True
        self.idle_timeout.stop()
        await self.mcp.close()
        for task in list(self._tasks):
            task.cancel()
        self._queue.put_nowait(None)
        self.backend.release_model_state(self.model_state)
