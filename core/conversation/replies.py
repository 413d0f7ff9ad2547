"""Replies: each response's lifecycle, what its listener heard, and cutting an item to that.

The one part that opens, feeds, cancels and finishes responses. It owns the active response, the
audio accounting of the last few replies (``segments``: what truncation and a barge-in's cut
read) and the last spoken reply. Who may start a reply, and when one is cut or resumed, is the
turn policy's (``vad_turns``); running tools inside a reply is ``tools``.

Model output arrives from the backend's threads through ``ReplyJob``, which calls the methods
below on the loop (``emit_text``, ``add_segment``, ``emit_audio``, the ``*_call`` methods).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from core.audio import OUTPUT_RATE
from core.conversation.config import ConversationConfig
from core.conversation.end_of_turn import MessageEnd
from core.conversation.events import (
    AudioChunk,
    CancelResult,
    ConversationError,
    ConversationEvent,
    FunctionCall,
    FunctionCallDelta,
    FunctionCallDone,
    FunctionCallStarted,
    ItemTruncated,
    ResponseDone,
    ResponseResumed,
    ResponseStarted,
    TextDelta,
)
from core.conversation.items import Item, Part
from core.conversation.mcp_tools import McpTools, for_model
from core.conversation.reply import ReplyJob, Response, Segment, heard_text
from core.conversation.runtime import Runtime
from core.conversation.tools import ToolCalls
from core.conversation.truncation import ContextWindow
from core.errors import InvalidAudioError, InvalidTextError, NoActiveResponseError, ResponseActiveError
from core.ids import new_id

log = logging.getLogger(__name__)

PAST_REPLIES_KEPT = 8  # replies whose audio accounting truncation can still use
CUT_MARK = "…"  # ends an item cut by an interruption: the next reply reads where it was cut


class Replies:
    """Responses of one conversation (at most one active)."""

    def __init__(self, rt: Runtime, mcp: McpTools, check: Callable[[ConversationConfig], ConversationConfig],
                 turn_scored: Callable[[Response, MessageEnd | float | None], None]) -> None:
        self.rt = rt
        self.tools = ToolCalls(rt, mcp, self)  # calls run inside the reply that made them
        self.context = ContextWindow(rt.backend)  # what each reply reads under ``truncation``
        self._turn_scored = turn_scored  # a held reply's prefill scored the turn (the hearing's semantic_vad)
        self.last_spoken: Response | None = None  # the last reply with audio, once finished
        self._check = check  # validates a reply's own settings (the conversation's config rules)
        self._response: Response | None = None
        self._reading: Response | None = None  # a read-ahead not yet done (``read_ahead``)
        self._past_segments: dict[str, list[Segment]] = {}
        self._truncated: dict[str, int] = {}  # item -> samples a client (or the gateway) said were heard
        self._idle = rt.replies_idle  # no reply running: display transcripts wait for this

    # ------------------------------------------------------------------ state

    @property
    def backend(self) -> Any:
        return self.rt.backend

    @property
    def model_state(self) -> Any:
        return self.rt.model_state

    def call_soon(self, fn: Callable, *args) -> None:
        """Run ``fn`` on the conversation's loop; safe from any thread (model output arrives so)."""
        self.rt.call_soon(fn, *args)

    @property
    def current(self) -> Response | None:
        """The response being made (or held, a speculative one), if any."""
        return self._response

    @property
    def active(self) -> bool:
        return self._response is not None and not self._response.held

    @property
    def held(self) -> Response | None:
        resp = self._response
        return resp if resp is not None and resp.held else None

    def segments(self, item_id: str) -> list[Segment] | None:
        """The audio accounting of a recent reply's item (None once forgotten)."""
        return self._past_segments.get(item_id)

    def system_prompt(self, instructions: str | None) -> str:
        return instructions or self.rt.config.instructions or self.rt.backend.default_instructions or ""

    def emit_for(self, resp: Response, event: ConversationEvent) -> None:
        """A held (speculative) reply's events wait until it is released."""
        if resp.held:
            resp.held_events.append(event)
        else:
            self.rt.emit(event)

    # ------------------------------------------------------------------ starting

    def create(self, *, instructions: str | None = None, output_audio: bool | None = None,
               max_output_tokens: int | None = None, input_items: list[Item] | None = None,
               in_conversation: bool = True, metadata: dict[str, str] | None = None,
               overrides: dict[str, Any] | None = None) -> str:
        """Start a reply to the history so far (see ``Conversation.create_response``)."""
        self.drop_held()
        if self._response is not None:
            raise ResponseActiveError(f"conversation already has an active response {self._response.response_id}")
        cfg = self.rt.config
        if output_audio is not None or max_output_tokens is not None or overrides:
            cfg = self._check(cfg.model_copy(update={
                "output_audio": cfg.output_audio if output_audio is None else output_audio,
                "max_output_tokens": max_output_tokens or cfg.max_output_tokens,
                **(overrides or {}),
            }))
        resp = Response(new_id("resp"), new_id("item"), cfg.output_audio, in_conversation, metadata)
        self.run(resp, cfg, instructions, items=input_items)
        return resp.response_id

    def begin(self, output_audio: bool) -> Response:
        """Open a response record and announce it (the caller produces its output)."""
        resp = Response(new_id("resp"), new_id("item"), output_audio)
        self.open(resp)
        return resp

    def open(self, resp: Response) -> None:
        self._response = resp
        self._idle.clear()
        previous = self.rt.items.last_id() if resp.in_conversation else None
        self.emit_for(resp, ResponseStarted(resp.response_id, resp.item_id, resp.output_audio, resp.in_conversation,
                                            previous, resp.metadata))

    def job(self, resp: Response, cfg: ConversationConfig, instructions: str | None = None,
            items: list[Item] | None = None) -> ReplyJob:
        items = self.rt.items.snapshot() if items is None else items
        return ReplyJob(self, resp, items, list(self.rt.frames), self.system_prompt(instructions), cfg)

    def run(self, resp: Response, cfg: ConversationConfig, instructions: str | None,
            pending: Item | None = None, items: list[Item] | None = None) -> None:
        """Open ``resp`` and generate it from ``items`` (default: the history, plus ``pending``)."""
        self._stop_reading()  # the reply's own prefill reads the words in one pass
        self.open(resp)
        given = items is not None
        items = list(items) if items is not None else self.rt.items.snapshot() + ([pending] if pending else [])
        items = self._fit_context(resp, cfg, instructions, items, from_history=not given)
        if items is not None:
            self.rt.spawn(self._generate(resp, self.job(resp, cfg, instructions, for_model(items))))

    def _fit_context(self, resp: Response, cfg: ConversationConfig, instructions: str | None, items: list[Item],
                     from_history: bool) -> list[Item] | None:
        """The items this reply reads under ``cfg.truncation`` (``truncation.py``): over the limit,
        the oldest leave the history (or only this reply's ``input``); None when the reply cannot
        fit with truncation disabled (it has failed: ``context_length_exceeded``)."""
        fit = self.context.fit(items, self.system_prompt(instructions), cfg)
        if fit.error is not None:
            self.emit_for(resp, ConversationError("context_length_exceeded", fit.error))
            self._finish(resp, "failed", "context_length_exceeded", "")
            return None
        if fit.dropped and from_history:
            for item in fit.dropped:
                self.rt.items.remove(item.item_id)
            self.rt.history_edited()
        return fit.items

    async def _generate(self, resp: Response, job: ReplyJob) -> None:
        status, reason = "completed", None
        ran_tools = False
        stats = self.rt.stats
        try:
            try:
                if job.config.mcp_servers:
                    await self.tools.prepare(resp, job)
                made = await self.rt.backend.generate_reply(job)
            finally:
                if resp.scores_turn and not resp.turn_scored:
                    job.end_of_message(None)  # the turn's wait must not hang on a reply that never scored
            resp.output_tokens, resp.prompt_tokens = made.output_tokens, made.prompt_tokens
            if made.prefill_ms is not None:
                stats.last_prefill_ms = made.prefill_ms
                stats.last_reused_tokens = made.reused_tokens
            if made.stop_reason == "length":
                status, reason = "incomplete", "max_output_tokens"
        except asyncio.CancelledError:
            resp.cancel.set()  # session closing: stop the model threads too
            raise
        except Exception as exc:  # one failed reply must not end the session
            log.exception("response failed")
            resp.cancel.set()
            status, reason = "failed", "server_error"
            self.emit_for(resp, ConversationError("response_failed", f"response failed: {exc}"))
        # Output queued with call_soon_threadsafe by the model threads lands before the final event.
        await asyncio.sleep(0)
        resp.generating = False
        if not resp.cancelled and status == "completed":
            ran_tools = await self.tools.run_calls(resp)
        if resp.cancelled:
            if resp.forward is not None:  # resumed after a false interruption: that response ends now
                self._finish(resp.forward, status, reason, resp.forward.text)
            elif resp.cancel_at is not None and resp.cancel.is_set():
                stats.last_cancel_stop_ms = (time.perf_counter() - resp.cancel_at) * 1000
            return
        self._finish(resp, status, reason, resp.text)
        if ran_tools and resp.in_conversation and self._response is None and not self.rt.closed:
            self.tools.speak_results(resp, job)

    # ------------------------------------------------------------------ finishing

    def _finish(self, resp: Response, status: str, reason: str | None, history_text: str) -> None:
        if resp.held:
            resp.pending_finish = (status, reason, history_text)
            return
        if self._response is resp:
            self._response = None
            self._idle.set()
        self._past_segments[resp.item_id] = resp.segments
        if resp.output_audio and resp.in_conversation:
            self.last_spoken = resp
        while len(self._past_segments) > PAST_REPLIES_KEPT:
            self._past_segments.pop(next(iter(self._past_segments)))
        item_status = "completed" if status == "completed" else "incomplete"
        remember = self.rt.remember
        if history_text.strip() and resp.in_conversation:
            text = history_text.strip()
            remember(Item("assistant", text, item_id=resp.item_id,
                          parts=[Part("audio" if resp.output_audio else "text", text)], status=item_status))
        for call in (c for c in resp.calls if c.complete and resp.in_conversation):
            if call.kind == "function_call":
                remember(Item("assistant", item_id=call.item_id, type="function_call", call_id=call.call_id,
                              name=call.name, arguments=call.arguments, parts=[], status=item_status))
            elif call.kind == "mcp_approval_request":  # the user answers it (mcp_approval_response)
                remember(Item("assistant", item_id=call.item_id, type="mcp_approval_request",
                              server_label=call.server_label, name=call.tool, arguments=call.arguments, parts=[]))
            # an mcp_call joined the history when it ran
        self.emit_for(resp, ResponseDone(resp.response_id, resp.item_id, status, reason, resp.text,
                                         resp.audio_ms, resp.output_tokens, resp.prompt_tokens,
                                         resp.in_conversation, resp.metadata, resp.output_audio,
                                         tuple(resp.calls)))

    def finish(self, resp: Response) -> None:
        """End a response whose output the caller produced (``begin``), unless cancelled."""
        if self._response is resp and not resp.cancelled:
            self._finish(resp, "completed", None, resp.text)

    # ------------------------------------------------------------------ output (from ReplyJob)

    def turn_scored(self, resp: Response, probability: MessageEnd | float | None) -> None:
        """The held reply's prefill scored the words it answers (``ReplyJob.end_of_message``)."""
        self._turn_scored(resp, probability)

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
        self.emit_for(resp, TextDelta(resp.response_id, resp.item_id, delta))

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
            resp.pcm.append(pcm)  # a false interruption replays the rest (``resume``)
        if resp.forward is not None:
            self.emit_audio(resp.forward, resp.forward_segments.get(index, 0), pcm)
            return
        if resp.cancelled:
            return
        resp.audio_samples += n
        seg.emitted_samples += n
        self.emit_for(resp, AudioChunk(resp.response_id, resp.item_id, pcm, OUTPUT_RATE))

    def begin_call(self, resp: Response, name: str) -> None:
        if resp.cancelled:
            return
        call = self.tools.new_call(name)
        resp.calls.append(call)
        self.emit_for(resp, FunctionCallStarted(resp.response_id, call))

    def add_call(self, resp: Response, call: FunctionCall) -> None:
        """A call made whole before the model (one the user approved): its events at once."""
        resp.calls.append(call)
        self.emit_for(resp, FunctionCallStarted(resp.response_id, call))
        self.emit_for(resp, FunctionCallDelta(resp.response_id, call, call.arguments))
        self.emit_for(resp, FunctionCallDone(resp.response_id, call))

    def call_arguments(self, resp: Response, index: int, delta: str) -> None:
        if resp.cancelled or index >= len(resp.calls):
            return
        call = resp.calls[index]
        call = resp.calls[index] = replace(call, arguments=call.arguments + delta)
        self.emit_for(resp, FunctionCallDelta(resp.response_id, call, delta))

    def end_call(self, resp: Response, index: int) -> None:
        if resp.cancelled or index >= len(resp.calls):
            return
        call = resp.calls[index] = replace(resp.calls[index], complete=True)
        self.emit_for(resp, FunctionCallDone(resp.response_id, call))

    # ------------------------------------------------------------------ reading ahead

    def read_ahead(self, words: str) -> None:
        """The user's turn goes on after a pause whose words are ``words``: have the model read
        them now (``backend.read_ahead``), so the reply at the turn's end prefills only the rest.
        Only between replies: a reply being made owns the model state. A newer reading replaces
        one not yet begun."""
        if self._response is not None or self.rt.closed or not words.strip():
            return
        self._stop_reading()
        resp = self._reading = Response(new_id("resp"), new_id("item"), False, held=True)
        items = for_model(self.rt.items.snapshot() + [Item("user", words)])
        self.rt.backend.read_ahead(self.job(resp, self.rt.config, None, items))

    def _stop_reading(self) -> None:
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel.set()

    # ------------------------------------------------------------------ held (speculative) replies

    def drop_held(self) -> None:
        resp = self._response
        if resp is not None and resp.held:
            resp.cancelled = True
            resp.cancel.set()
            self._response = None
            self._idle.set()
            self.rt.stats.speculative_replies_dropped += 1

    def release_held(self, resp: Response) -> None:
        resp.held = False
        self.rt.stats.speculative_replies_used += 1
        for event in resp.held_events:
            if isinstance(event, ResponseStarted):  # opened before the turn's item was committed
                event = replace(event, previous_item_id=self.rt.items.last_id())
            self.rt.emit(event)
        resp.held_events.clear()
        if resp.pending_finish is not None:
            self._finish(resp, *resp.pending_finish)

    # ------------------------------------------------------------------ stopping and cutting

    def cancel(self, reason: str = "client_cancelled", heard_samples: int | None = None,
               shadow: bool = False) -> CancelResult:
        """Stop the active reply now; raises ``NoActiveResponseError`` if there is none. The
        history keeps what was heard: ``heard_samples`` of its audio (a barge-in's estimate),
        else all that was sent. ``shadow``: the reply is held, not stopped, so a false
        interruption can resume it: held at its gate until then."""
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
            heard = heard.strip() + CUT_MARK  # cut here: the next reply reads where (the item stays, as the client saw it)
        self._finish(resp, "cancelled", reason, heard)
        return CancelResult(resp.response_id, resp.item_id, resp.text, resp.audio_ms)

    def truncate(self, item_id: str, audio_end_ms: int) -> str:
        """Cut an assistant item to what was heard (a client's ``truncate``); returns the kept text."""
        item = self.rt.items.get(item_id)
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
        self.rt.playback.stop(item_id, audio_end_ms * OUTPUT_RATE // 1000)
        # What the listener heard, from the one who played it (on a call, the gateway): a cut reply
        # resumes from here, not from the play-head clock's estimate (under load the two differ).
        self._truncated[item_id] = audio_end_ms * OUTPUT_RATE // 1000
        while len(self._truncated) > 8:
            self._truncated.pop(next(iter(self._truncated)))
        kept = heard_text(segments, audio_end_ms * OUTPUT_RATE // 1000, item.text).strip()
        if kept:
            item.set_transcript(kept)
        else:
            self.rt.items.remove(item_id)
        self.rt.history_edited()
        return kept

    def cut_finished(self, item_id: str, heard: int) -> None:
        """Cut a finished assistant item to what was heard (its audio still played: a barge-in)."""
        item = self.rt.items.get(item_id)
        segments = self._past_segments.get(item_id)
        if item is None or segments is None:
            return
        kept = heard_text(segments, heard, item.text).strip()
        if kept != item.text.strip():
            item.set_transcript(f"{kept}{CUT_MARK}")  # stays, as the client saw it; the model reads the cut
            item.status = "incomplete"
        self.rt.history_edited()
        self.rt.emit(ItemTruncated(item_id, heard * 1000 // OUTPUT_RATE))

    def keep_cut(self, cut: Response, heard_samples: int) -> None:
        """A reply cut by a voice that may be no turn: where its listener stopped hearing it
        (``resume`` plays on from there)."""
        cut.cut_samples = heard_samples

    def stop_cut(self, cut: Response) -> None:
        """A cut reply that will not resume: its generator, waiting at the gate, stops."""
        cut.cancel.set()
        cut.gate.set()

    def confirm_cut(self, cut: Response) -> None:
        """The interruption was real: the cut reply stops and keeps nothing it still makes."""
        cut.shadow = False
        self.stop_cut(cut)

    def resume(self, cut: Response) -> None:
        """Play the rest of a reply cut by a false interruption, as a new response: what was
        made and not heard first, then (while it still generates) what it makes from now on."""
        heard = self._truncated.pop(cut.item_id, cut.cut_samples or 0)
        pcm = b"".join(cut.pcm)[heard * 2:]
        rest = words_after(cut.text, len(heard_text(cut.segments, heard, cut.text).split()))
        resp = Response(new_id("resp"), new_id("item"), True)
        self.open(resp)
        self.rt.emit(ResponseResumed(resp.response_id, resp.item_id, cut.item_id, heard * 1000 // OUTPUT_RATE))
        self.add_segment(resp, Segment(rest))
        if rest:
            self.emit_text(resp, rest)  # as made: what the model makes next follows it with its own spacing
        step = OUTPUT_RATE * self.rt.backend.audio_chunk_ms // 1000 * 2
        for off in range(0, len(pcm), step):
            self.emit_audio(resp, 0, pcm[off:off + step])
        log.info("false interruption: resuming %s at %d ms (%d ms left)", cut.item_id, heard * 1000 // OUTPUT_RATE,
                 len(pcm) * 500 // OUTPUT_RATE)
        if cut.generating:
            cut.shadow = False
            cut.forward = resp  # the rest, made from now on, goes to the new response
            cut.gate.set()
        else:
            self._finish(resp, "completed", None, resp.text)


def words_after(text: str, n: int) -> str:
    """``text`` after its first ``n`` words, its spacing kept (a word the model is still making
    stays open, so its next piece joins it as it would have)."""
    if n <= 0:
        return text.lstrip()
    for i, word in enumerate(re.finditer(r"\S+", text)):
        if i == n - 1:
            return text[word.end():].lstrip()
    return ""
