"""Hearing: the user's audio in, what was said and when the user stopped.

It owns the input (``AudioInput``: resampling, the buffer, the streaming VAD), the id of the
speech being heard, the speculative transcript taken at each pause, ``semantic_vad``'s scoring of
that pause (how long it may last), transcripts of turns (for a text model, or for display) and
glances at a voice over the assistant. What a VAD report means for the floor (a turn, an
interruption, a backchannel) is the turn policy's: it hears that speech began, paused, resumed and
ended (``TurnReports``), with the speech's item id, its clip and the pause's transcript, and keeps
none of this bookkeeping itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np

from core.audio import pcm16_to_float
from core.conversation.audio_input import VAD_RATE, AudioInput
from core.conversation.config import ConversationConfig
from core.conversation.end_of_turn import (MessageEnd, end_of_turn_probability, last_word_confidence,
                                           strip_trailing_punctuation)
from core.conversation.end_of_turn import wait_ms as end_of_turn_wait_ms
from core.conversation.events import ConversationError, InputCommitted, InputTranscript
from core.conversation.items import Item, Part
from core.conversation.overlap import Glance, echoes, only_hums, says_stop, without_hums, words_of
from core.conversation.reply import Response
from core.conversation.runtime import Runtime
from core.conversation.turn_policy import Speculation, TurnReports
from core.errors import InvalidAudioError
from core.ids import new_id

log = logging.getLogger(__name__)

LOOK_BEFORE_MS = 100  # a glance starts this long before the VAD's onset (its onset is late by ~a window)
# Over a loud echo the VAD hears AEC3's output, whose double-talk suppression takes a voice's first
# ~100-150 ms: its onset comes later, and a glance from 100 ms before it reads "Stop." as "Top."
# (dev cut-ins over -6 dB echo, offline: stop words read in 16 of 20 clips from 100 ms, 19 from
# 250 ms; dev backchannels over -10 dB: none read as a stop either way).
LOOK_BEFORE_ECHO_MS = 250
GLANCE_PAD = VAD_RATE // 10  # silence after a glanced voice: Whisper hears a cut-off word better



class Hearing:
    """One conversation's listening; ``reports`` (the conversation's turn policy) hears every report."""

    def __init__(self, rt: Runtime, reports: TurnReports) -> None:
        self.rt = rt
        self._reports = reports
        self.lock = asyncio.Lock()  # one piece of input at a time; held while a turn's end is acted on
        self._input = AudioInput(rt.backend.vad_model, rt.config, rt.played)
        self._speech_item: str | None = None
        self._speculation: Speculation | None = None
        self._completion: tuple[int, concurrent.futures.Future] | None = None  # the pause's meaning reading
        self._generation = 0

    def reconfigure(self, old: ConversationConfig, new: ConversationConfig) -> None:
        """New settings: a new input when its rate or VAD presence changed, else new VAD settings."""
        if old.input_sample_rate != new.input_sample_rate or (old.turn_detection is None) != (
            new.turn_detection is None
        ):
            self._input = AudioInput(self.rt.backend.vad_model, new, self.rt.played)
            self._speech_item = None
            self._forget_speculation()
            return
        if new.turn_detection is not None:
            self._input.configure(new.turn_detection)
        self._input.set_room(new)  # echo cancellation, noise suppression

    # ------------------------------------------------------------------ audio in

    async def append(self, pcm: bytes) -> None:
        """PCM16 mono at ``config.input_sample_rate``: VAD reports go to the policy, in order."""
        samples = pcm16_to_float(pcm, self.rt.config.input_sample_rate)
        arrived = time.monotonic()  # the echo canceller puts the microphone on the play head's clock
        async with self.lock:
            audio16, reports = await self.rt.in_thread(self.rt.backend.io_pool, self._input.process, samples,
                                                       arrived)
            await self._reports.heard(audio16)
            for kind, ms, segment in reports:
                await self._report(kind, ms, segment)
            await self._reports.after_audio()

    async def _report(self, kind: str, ms: int, segment: np.ndarray | None) -> None:
        """One VAD report, told to the policy as what it means for the speech being heard."""
        reports = self._reports
        if kind == "start":
            self._speech_item = new_id("item")
            await reports.speech_began(self._speech_item, ms, self._input.onset_sure, self._input.hears_echo)
        elif kind == "pause":
            if await reports.speech_paused(ms, segment):
                self.speculate(segment)
        elif kind == "resume":
            self._forget_speculation()
            await reports.speech_resumed()
        elif kind == "end":
            item_id, speculation = self._take_speech_item(), self._take_speculation()
            if not await reports.speech_ended(item_id, ms, segment, speculation):
                self._input.clear()  # not a turn: nothing of the voice is kept

    async def take_buffer(self) -> tuple[str, np.ndarray]:
        """The buffered audio as a turn (turn-based mode): its item id and samples at 16 kHz."""
        async with self.lock:
            if self._input.buffer.size < VAD_RATE // 10:
                raise InvalidAudioError(
                    f"input audio buffer holds {self._input.buffer.size * 1000 // VAD_RATE} ms; "
                    "commit needs at least 100 ms",
                    param="audio",
                )
            segment = self._input.take()
        return self._take_speech_item(), segment

    def clear(self) -> None:
        """Drop buffered, uncommitted input audio."""
        self._input.clear()
        self._forget_speculation()

    async def drop_voice(self) -> int | None:
        """The voice being heard was not a turn: the VAD's speech ends here and nothing of it is
        kept; where it ended (stream ms), if it was in speech."""
        async with self.lock:
            report = self._input.end_within(0)
        self._speech_item = None
        self._input.clear()
        self._forget_speculation()
        return report[1] if report is not None else None

    # ------------------------------------------------------------------ where we are

    @property
    def in_speech(self) -> bool:
        vad = self._input.vad
        return vad is not None and vad.in_speech

    def now_ms(self) -> int:
        """The input stream's length so far, in ms."""
        return int(self._input.stream_samples * 1000 / VAD_RATE)

    def audio(self, start_ms: int, end_ms: int) -> np.ndarray:
        """The input between two stream offsets (what the buffer still holds of it)."""
        return self._input.slice(start_ms * VAD_RATE // 1000, end_ms * VAD_RATE // 1000)

    def _take_speech_item(self) -> str:
        """The id of the speech just heard (a new one when none began), ended here."""
        item_id = self._speech_item or new_id("item")
        self._speech_item = None
        return item_id

    # ------------------------------------------------------------------ pauses: speculation

    def speculate(self, segment: np.ndarray) -> None:
        """At a pause inside speech, transcribe what was said so far; if the turn then ends with
        no more speech, that transcript (and the reply already started on it) is used. Under
        ``semantic_vad`` the transcript is also scored to set how long this pause may last."""
        backend = self.rt.backend
        self._generation += 1
        generation = self._generation
        if not backend.capabilities.transcript_first:
            if self.semantic:
                self._on_turn_score(generation, "", None)  # no words yet: the neutral wait
            return
        fut = backend.transcribe_pool.submit(backend.transcribe_turn, segment)
        self._speculation = (generation, fut)
        fut.add_done_callback(lambda f: self.rt.call_soon(self._on_partial_transcript, generation, f))

    @property
    def semantic(self) -> bool:
        td = self.rt.config.turn_detection
        return td is not None and td.type == "semantic_vad"

    def _on_partial_transcript(self, generation: int, fut: concurrent.futures.Future) -> None:
        if fut.cancelled():  # speech resumed before the pause's words were made (forget_speculation)
            return
        backend = self.rt.backend
        if self.semantic and backend.reads_completion and fut.exception() is None and (fut.result() or "").strip():
            # read beside the scoring (the LLM's), on the glance thread: joined in _on_turn_score
            words = strip_trailing_punctuation(fut.result())
            self._completion = (generation, backend.glance_pool.submit(backend.completion_probability, words))
        scored = self._reports.words_at_pause(generation, fut, generation == self._generation)
        if self.semantic and generation == self._generation and not self.rt.closed and not scored:
            self._score_turn(generation, "" if fut.exception() is not None else (fut.result() or ""))

    def _forget_speculation(self) -> None:
        self._generation += 1
        if self._speculation is not None:
            self._speculation[1].cancel()  # still queued: the next pause's ASR must not wait behind it
        self._speculation = None

    def _take_speculation(self) -> Speculation | None:
        """The pause's transcript when the turn ended with no speech after it (else None)."""
        spec, self._speculation = self._speculation, None
        return spec if spec is not None and spec[0] == self._generation else None

    # ------------------------------------------------------------------ pauses: semantic_vad

    def _score_turn(self, generation: int, text: str) -> None:
        """Ask the backend's language model how complete ``text`` is, in a pass of its own (when
        no held reply scores the words in its prefill); the pause's wait follows the answer."""
        if not text.strip():
            self._on_turn_score(generation, text, None)
            return
        t0 = time.perf_counter()
        fut = self.rt.backend.turn_scorer_pool.submit(self.rt.backend.end_of_message_probability, text)

        def done(f: concurrent.futures.Future) -> None:
            self.rt.stats.turn_score_ms = (time.perf_counter() - t0) * 1000
            lm = None
            if f.exception() is not None:
                log.warning("end-of-turn scoring failed: %s", f.exception())
            else:
                lm = f.result()
            self.rt.call_soon(self._on_turn_score, generation, text, lm)

        fut.add_done_callback(done)

    def turn_scored(self, resp: Response, probability: MessageEnd | float | None) -> None:
        """A held reply's prefill scored the words it answers (``ReplyJob.end_of_message``)."""
        if resp.spec is not None:
            self._on_turn_score(resp.spec, resp.spec_text, probability)

    def _on_turn_score(self, generation: int, text: str, lm: MessageEnd | float | None) -> None:
        td = self.rt.config.turn_detection
        if self.rt.closed or generation != self._generation or td is None or td.type != "semantic_vad":
            return
        reading = self._completion if self._completion is not None and self._completion[0] == generation else None
        if reading is not None and not reading[1].done():  # the words' meaning is still being read
            reading[1].add_done_callback(lambda _f: self.rt.call_soon(self._on_turn_score, generation, text, lm))
            return
        meaning = None
        if reading is not None and reading[1].exception() is None:
            meaning = reading[1].result()
        elif reading is not None:
            log.warning("reading the turn's completeness failed: %s", reading[1].exception())
        p = end_of_turn_probability(text, lm, meaning=meaning)
        wait = end_of_turn_wait_ms(p, td.eagerness)
        self.rt.stats.turn_scores += 1
        self.rt.stats.last_turn_score = p
        log.debug("end of turn %r (last word %.2f): lm %s, meaning %s -> p %s, wait %d ms", text,
                  last_word_confidence(text), lm, meaning, p, wait)
        self.rt.spawn(self._end_pause_after(generation, wait))

    async def _end_pause_after(self, generation: int, wait: int) -> None:
        async with self.lock:
            if generation != self._generation or self.rt.closed:
                return
            report = self._input.end_within(wait)
            if report is not None:
                await self._report(*report)

    # ------------------------------------------------------------------ transcripts

    async def transcript(self, segment: np.ndarray, speculation: Speculation | None) -> str:
        """A turn's words: the pause's speculative transcript when it still holds, else a new one."""
        stats, backend = self.rt.stats, self.rt.backend
        if speculation is not None:
            stats.speculative_hits += 1
            return await asyncio.wrap_future(speculation[1])
        stats.speculative_misses += 1
        return await self.rt.in_thread(backend.transcribe_pool, backend.transcribe_turn, segment)

    def transcribes_for_display(self) -> bool:
        return self.rt.config.transcribe_input and self.rt.backend.capabilities.transcribes_input

    def commit_item(self, item_id: str, segment: np.ndarray) -> Item:
        """The turn's user item enters the history at commit (as OpenAI's does); a transcript-first
        backend gets its words when the transcript is made."""
        rt = self.rt
        transcript_first = rt.backend.capabilities.transcript_first
        previous = rt.items.last_id()
        audio = None if transcript_first else segment
        item = rt.remember(Item("user", "", audio=audio, item_id=item_id, parts=[Part("audio", None)]))
        rt.emit(InputCommitted(item_id, int(segment.size * 1000 / VAD_RATE), previous))
        if not transcript_first and self.transcribes_for_display():
            rt.spawn(self._transcribe_when_idle(item))
        return item

    async def _transcribe_when_idle(self, item: Item) -> None:
        """The transcript is for the client's display: it waits until the reply it may have
        triggered is done, so it never delays the answer (both need the one model thread)."""
        await asyncio.sleep(0)
        await self.rt.replies_idle.wait()
        try:
            text = await self.rt.in_thread(self.rt.backend.transcribe_pool, self.rt.backend.transcribe_turn,
                                           item.audio)
        except Exception as exc:  # reported; the session goes on
            log.exception("transcription failed")
            self.rt.emit(ConversationError("transcription_failed", f"transcription failed: {exc}"))
            return
        if text is None:
            return
        item.set_transcript(text.strip())
        self.rt.emit(InputTranscript(item.item_id, item.text, int(item.audio.size * 1000 / VAD_RATE)))

    # ------------------------------------------------------------------ glances (a voice over the reply)

    def _clip_since(self, onset_ms: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The voice from just before its onset to now, with a little silence after it, as the
        glances read it (over an echo: the linear canceller's output, ``room.py``), and over an
        echo also as the VAD heard it (AEC3's output)."""
        pad = np.zeros(GLANCE_PAD, dtype=np.float32)
        echo = self._input.reads_through_echo
        start = (onset_ms - (LOOK_BEFORE_ECHO_MS if echo else LOOK_BEFORE_MS)) * VAD_RATE // 1000
        clip = np.concatenate([self._input.slice(start, self._input.stream_samples, for_words=True), pad])
        if not echo:
            return clip, None
        start = (onset_ms - LOOK_BEFORE_MS) * VAD_RATE // 1000
        return clip, np.concatenate([self._input.slice(start, self._input.stream_samples), pad])

    def glance(self, onset_ms: int, said_within: Callable[[int], str],
               segment: np.ndarray | None = None) -> Awaitable[Glance]:
        """A quick read of the voice from ``onset_ms`` to now (the clip is taken at this call) on
        the glance thread. ``said_within(ms)``: the assistant's words heard in the clip's last
        ``ms`` (their echo is no voice). ``segment``: read this clip instead (a voice the VAD
        ended, whose audio has left the buffer; over an echo AEC3's clip of it is read too)."""
        if segment is None:
            look = self._look(onset_ms, said_within)
        else:
            pad = np.zeros(GLANCE_PAD, dtype=np.float32)
            clip = np.concatenate([segment, pad])
            heard = self._input.heard_as(segment)
            # the assistant's words over the span a glance made now would cover (the segment ended
            # before now: its tail, then the silence that ended the voice)
            span_ms = self.now_ms() - onset_ms + LOOK_BEFORE_MS + GLANCE_PAD * 1000 // VAD_RATE
            look = (clip, said_within(max(span_ms, clip.size * 1000 // VAD_RATE)),
                    None if heard is None else np.concatenate([heard, pad]))
        return self.rt.loop.run_in_executor(self.rt.backend.glance_pool, self._read, *look)

    def _look(self, onset_ms: int, said_within: Callable[[int], str]) -> tuple[np.ndarray, str, np.ndarray | None]:
        """What a glance reads: the clip, the assistant's words heard over it, AEC3's clip (over an echo)."""
        clip, heard = self._clip_since(onset_ms)
        return clip, said_within(clip.size * 1000 // VAD_RATE), heard

    def _read(self, clip: np.ndarray, said: str = "", heard: np.ndarray | None = None) -> Glance:
        """The clip's words and, when the backend reads meaning, how likely they take the floor (a
        stop word, a hum or an echo of ``said`` settles it without asking). Over an echo the clip as
        the VAD heard it (``heard``, AEC3's output) is read too, and a stop word in it counts: while
        the linear canceller learns it leaves enough echo to misread a "Stop." ("Start.").
        Blocking: on the glance thread."""
        backend = self.rt.backend
        words = backend.transcribe_glance(clip)
        if heard is not None and words is not None and not says_stop(words, said):
            other = backend.transcribe_glance(heard)
            if other is not None and says_stop(other, said):
                words = other
        if (words is None or not words_of(words) or says_stop(words, said) or only_hums(words)
                or echoes(words, said)):
            return Glance(words, said=said)
        return Glance(words, backend.interruption_probability(without_hums(words)), said)
