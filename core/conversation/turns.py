"""User speech and turn-taking, the part of ``Conversation`` that listens (see conversation.py).

Input audio goes through ``AudioInput`` (resampling, buffer, VAD) in a thread; VAD reports
become turns. Transcript-first backends (a text LLM) get each turn transcribed before the reply,
speculatively at a pause, with a reply held until the turn really ends; audio backends (an omni
model) get the clip itself and a transcript for display when no reply runs. Barge-in cancels
the reply that is playing when speech starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from dataclasses import replace

import numpy as np

from core.audio import pcm16_to_float
from core.conversation.audio_input import VAD_RATE
from core.conversation.end_of_turn import MessageEnd, end_of_turn_probability, last_word_confidence
from core.conversation.end_of_turn import wait_ms as end_of_turn_wait_ms
from core.conversation.events import (
    ConversationError,
    InputCommitted,
    InputTranscript,
    ResponseStarted,
    SpeechStopped,
)
from core.conversation.items import Item, Part
from core.conversation.reply import Response
from core.errors import InvalidAudioError
from core.ids import new_id

log = logging.getLogger(__name__)


class TurnTaking:
    """Mixed into ``Conversation``: it uses the conversation's state (``_input``, ``_response``,
    ``_speculation``, the event queue) and its response methods."""

    # ------------------------------------------------------------------ audio input

    async def append_audio(self, pcm: bytes) -> None:
        """Feed PCM16 mono at ``config.input_sample_rate``; drives VAD when enabled."""
        samples = pcm16_to_float(pcm, self.config.input_sample_rate)
        async with self._audio_lock:
            audio16, reports = await self._in_thread(self.backend.io_pool, self._input.process, samples)
            await self._on_audio(audio16)
            for kind, ms, segment in reports:
                await self._on_vad(kind, ms, segment)
            await self._watch_overlap()

    async def _on_audio(self, audio16: np.ndarray) -> None:
        """Hook: every input sample at 16 kHz (MiniCPM-o's duplex mode feeds the model here)."""

    async def _on_vad(self, kind: str, ms: int, segment: np.ndarray | None) -> None:
        td = self.config.turn_detection
        if kind == "start":
            self._drop_held()
            self._speech_item = new_id("item")
            await self._speech_began(self._speech_item, ms)
        elif kind == "pause":
            ov = self._overlap_pending()
            if ov is not None:
                ov.paused = True
                self._spawn(self._overlap_paused(ov, segment))
                return
            self._speculate(segment)
        elif kind == "resume":
            ov = self._overlap_pending()
            if ov is not None:
                ov.paused = False
            self._forget_speculation()
            self._drop_held()
        elif kind == "end":
            ov = self._overlap
            if ov is not None and self._overlap_ended(ov):
                self._speech_item = None
                return
            item_id = self._speech_item or new_id("item")
            self._speech_item = None
            self._emit(SpeechStopped(item_id, ms, self._input.stream_samples * 1000 // VAD_RATE))
            if td is None or not td.vad_turns:
                return  # model_duplex: the model hears everything itself; nothing to commit
            spec, self._speculation = self._speculation, None
            valid = spec is not None and spec[0] == self._spec_generation
            item = self._commit_audio_item(item_id, segment)
            if self.backend.capabilities.transcript_first:
                self._spawn(self._finish_turn(item, segment, td.create_response, spec if valid else None))
                return
            if td.create_response and self._response is None and not self._closed:
                await self.create_response()

    async def commit_audio(self) -> str | None:
        """Turn buffered audio into a user item (turn-based mode); returns its item id."""
        async with self._audio_lock:
            if self._input.buffer.size < VAD_RATE // 10:
                raise InvalidAudioError(
                    f"input audio buffer holds {self._input.buffer.size * 1000 // VAD_RATE} ms; "
                    "commit needs at least 100 ms",
                    param="audio",
                )
            segment = self._input.take()
        item_id = self._speech_item or new_id("item")
        self._speech_item = None
        item = self._commit_audio_item(item_id, segment)
        if self.backend.capabilities.transcript_first:
            await self._finish_turn(item, segment, create_response=False)
        return item_id

    def clear_audio(self) -> None:
        """Drop buffered, uncommitted input audio."""
        self._input.clear()
        self._forget_speculation()

    # ------------------------------------------------------------------ turns: transcript first

    def _speculate(self, segment: np.ndarray) -> None:
        """At a pause inside speech, transcribe what was said so far; if the turn then ends with
        no more speech, that transcript (and the reply already started on it) is used. Under
        ``semantic_vad`` the transcript is also scored to set how long this pause may last."""
        self._spec_generation += 1
        generation = self._spec_generation
        if not self.backend.capabilities.transcript_first:
            if self._semantic():
                self._on_turn_score(generation, "", None)  # no words yet: the neutral wait
            return
        fut = self.backend.transcribe_pool.submit(self.backend.transcribe_turn, segment)
        self._speculation = (generation, fut)
        fut.add_done_callback(lambda f: self.call_soon(self._on_partial_transcript, generation, f))

    def _semantic(self) -> bool:
        td = self.config.turn_detection
        return td is not None and td.type == "semantic_vad"

    def _on_partial_transcript(self, generation: int, fut: concurrent.futures.Future) -> None:
        if self._cut is not None and fut.exception() is None and (fut.result() or "").strip():
            self._confirm_cut()  # words after the interruption: it was real
        resp = self._speculate_reply(generation, fut)
        if self._semantic() and generation == self._spec_generation and not self._closed:
            if resp is None or not resp.scores_turn:
                self._score_turn(generation, "" if fut.exception() is not None else (fut.result() or ""))

    # ------------------------------------------------------------------ semantic_vad

    def _score_turn(self, generation: int, text: str) -> None:
        """Ask the backend's language model how complete ``text`` is, in a pass of its own (when
        no held reply scores the words in its prefill); the pause's wait follows the answer."""
        if not text.strip():
            self._on_turn_score(generation, text, None)
            return
        t0 = time.perf_counter()
        fut = self.backend.turn_scorer_pool.submit(self.backend.end_of_message_probability, text)

        def done(f: concurrent.futures.Future) -> None:
            self.stats.turn_score_ms = (time.perf_counter() - t0) * 1000
            lm = None
            if f.exception() is not None:
                log.warning("end-of-turn scoring failed: %s", f.exception())
            else:
                lm = f.result()
            self.call_soon(self._on_turn_score, generation, text, lm)

        fut.add_done_callback(done)

    def turn_scored(self, resp: Response, probability: MessageEnd | float | None) -> None:
        """The held reply's prefill scored the words it answers (``ReplyJob.end_of_message``)."""
        if resp.spec is not None:
            self._on_turn_score(resp.spec, resp.spec_text, probability)

    def _on_turn_score(self, generation: int, text: str, lm: MessageEnd | float | None) -> None:
        td = self.config.turn_detection
        if self._closed or generation != self._spec_generation or td is None or td.type != "semantic_vad":
            return
        p = end_of_turn_probability(text, lm)
        wait = end_of_turn_wait_ms(p, td.eagerness)
        self.stats.turn_scores += 1
        self.stats.last_turn_score = p
        log.debug("end of turn %r (last word %.2f): lm %s -> p %s, wait %d ms", text, last_word_confidence(text), lm,
                  p, wait)
        self._spawn(self._end_pause_after(generation, wait))

    async def _end_pause_after(self, generation: int, wait: int) -> None:
        async with self._audio_lock:
            if generation != self._spec_generation or self._closed:
                return
            report = self._input.end_within(wait)
            if report is not None:
                await self._on_vad(*report)

    def _forget_speculation(self) -> None:
        self._spec_generation += 1
        if self._speculation is not None:
            self._speculation[1].cancel()  # still queued: the next pause's ASR must not wait behind it
        self._speculation = None

    def _speculate_reply(self, generation: int, fut: concurrent.futures.Future) -> Response | None:
        """Start the reply to a speculative transcript while the hangover runs; hold its output."""
        td = self.config.turn_detection
        if (
            self._closed
            or generation != self._spec_generation
            or td is None
            or not td.create_response
            or not self.backend.capabilities.speculative_reply
            or self._response is not None
            or fut.exception() is not None
        ):
            return None
        text = fut.result()
        if not text:
            return None
        scores_turn = td.type == "semantic_vad" and self.backend.capabilities.scores_turn_in_reply
        resp = Response(new_id("resp"), new_id("item"), self.config.output_audio, held=True, spec=generation,
                        spec_text=text, scores_turn=scores_turn)
        self._run(resp, self.config, None, pending=Item("user", text))
        return resp

    def _drop_held(self) -> None:
        resp = self._response
        if resp is not None and resp.held:
            resp.cancelled = True
            resp.cancel.set()
            self._response = None
            self._idle.set()
            self.stats.speculative_replies_dropped += 1

    def _release_held(self, resp: Response) -> None:
        resp.held = False
        self.stats.speculative_replies_used += 1
        for event in resp.held_events:
            if isinstance(event, ResponseStarted):  # opened before the turn's item was committed
                event = replace(event, previous_item_id=self._items.last_id())
            self._emit(event)
        resp.held_events.clear()
        if resp.pending_finish is not None:
            self._finish(resp, *resp.pending_finish)

    async def _finish_turn(
        self,
        item: Item,
        segment: np.ndarray,
        create_response: bool,
        speculation: tuple[int, concurrent.futures.Future] | None = None,
    ) -> None:
        """Transcript-first turn end: transcribe (or take the speculative transcript), then reply
        (or release the held speculative reply when it answered these very words)."""
        try:
            if speculation is not None:
                self.stats.speculative_hits += 1
                text = await asyncio.wrap_future(speculation[1])
            else:
                self.stats.speculative_misses += 1
                text = await self._in_thread(self.backend.transcribe_pool, self.backend.transcribe_turn, segment)
        except Exception as exc:  # reported to the client; the session goes on
            log.exception("transcription failed")
            self._emit(ConversationError("transcription_failed", f"transcription failed: {exc}"))
            return
        text = (text or "").strip()
        if text:
            self._confirm_cut()
        item.set_transcript(text)
        if self.config.transcribe_input:
            self._emit(InputTranscript(item.item_id, text, int(segment.size * 1000 / VAD_RATE)))
        held = self._response if self._response is not None and self._response.held else None
        if held is not None and (speculation is None or held.spec != speculation[0] or not text):
            self._drop_held()
            held = None
        if not text:
            self._false_interruption()  # an interruption with no words: the reply goes on
            return
        if held is not None:
            self._release_held(held)
        elif create_response and self._response is None and not self._closed:
            await self.create_response()

    # ------------------------------------------------------------------ turns: audio items

    def _transcribes_for_display(self) -> bool:
        return self.config.transcribe_input and self.backend.capabilities.transcribes_input

    def _commit_audio_item(self, item_id: str, segment: np.ndarray) -> Item:
        """The turn's user item enters the history at commit (as OpenAI's does); a transcript-first
        backend gets its words when the transcript is made."""
        previous = self._items.last_id()
        if not self.backend.capabilities.transcript_first:
            self._confirm_cut()  # the model hears the clip itself: no resuming
        audio = None if self.backend.capabilities.transcript_first else segment
        item = self._remember(Item("user", "", audio=audio, item_id=item_id, parts=[Part("audio", None)]))
        self._emit(InputCommitted(item_id, int(segment.size * 1000 / VAD_RATE), previous))
        if not self.backend.capabilities.transcript_first and self._transcribes_for_display():
            self._spawn(self._transcribe_when_idle(item))
        return item

    async def _transcribe_when_idle(self, item: Item) -> None:
        """The transcript is for the client's display: it waits until the reply it may have
        triggered is done, so it never delays the answer (both need the one model thread)."""
        await asyncio.sleep(0)
        await self._idle.wait()
        try:
            text = await self._in_thread(self.backend.transcribe_pool, self.backend.transcribe_turn, item.audio)
        except Exception as exc:  # reported; the session goes on
            log.exception("transcription failed")
            self._emit(ConversationError("transcription_failed", f"transcription failed: {exc}"))
            return
        if text is None:
            return
        item.set_transcript(text.strip())
        self._emit(InputTranscript(item.item_id, item.text, int(item.audio.size * 1000 / VAD_RATE)))
