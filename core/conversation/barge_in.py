"""Speech over the assistant's audio, the part of ``Conversation`` that decides whether it stops.

- While the listener hears the assistant (``PlaybackClock``) and the session ignores
  backchannels (our default), a voice is not a barge-in yet: ``speech_started`` waits for the
  overlap judge (``overlap.py``: the voice's length, glances at its first words, the whole clip
  at its first pause). A backchannel or noise is dropped (a ``Backchannel`` event, nothing
  committed, the reply goes on); an interruption is announced with the voice's onset.
- An interruption stops what the listener hears: the reply being made is cancelled, and the
  assistant item is cut to what was heard (the clock's estimate; a client's truncate corrects
  it). The cut item's text ends with "…", so the next reply reads where it was cut.
- A false interruption: when the user's turn then has no words (a cough, a door), the reply
  resumes where it was cut, as a new response playing the rest. Until the turn's words are known
  the cut reply's generator is held (it waits, making nothing, so the user's turn has the CPU),
  and nothing of it is lost.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time

import numpy as np

from core.audio import OUTPUT_RATE
from core.conversation.audio_input import VAD_RATE
from core.conversation.events import Backchannel, ItemTruncated, ResponseResumed, SpeechStarted
from core.conversation.overlap import GLANCE_EVERY_MS, GLANCE_FIRST_MS, Overlap
from core.conversation.reply import Response, Segment, heard_text
from core.ids import new_id

log = logging.getLogger(__name__)

LOOK_BEFORE_MS = 100  # a glance starts this long before the VAD's onset (its onset is late by ~a window)
GLANCE_PAD = VAD_RATE // 10  # silence after a glanced voice: Whisper hears a cut-off word better
CUT_MARK = "…"


class BargeIn:
    """Mixed into ``Conversation`` (uses its clock, config, input, events and responses)."""

    # ------------------------------------------------------------------ speech starts

    def _judges_overlap(self) -> bool:
        td = self.config.turn_detection
        return (td is not None and td.vad_turns and td.interrupt_response and td.ignore_backchannels
                and self.playback.audible)

    async def _speech_began(self, item_id: str, ms: int) -> None:
        """The VAD heard a voice start at ``ms``: judge it first when it is over the assistant."""
        self._overlap = None
        if self._judges_overlap():
            self._overlap = Overlap(item_id, ms, self.playback.item_id, time.monotonic())
            return
        self._emit(SpeechStarted(item_id, ms))
        td = self.config.turn_detection
        if td is not None and td.vad_turns and td.interrupt_response and (self.response_active or self.playback.audible):
            await self._interrupt()

    def _overlap_pending(self) -> Overlap | None:
        ov = self._overlap
        return ov if ov is not None and ov.verdict is None else None

    def _voice_ms(self, ov: Overlap) -> int:
        return int(self._input.stream_samples * 1000 / VAD_RATE) - ov.onset_ms

    def _overlap_clip(self, ov: Overlap) -> np.ndarray:
        start = (ov.onset_ms - LOOK_BEFORE_MS) * VAD_RATE // 1000
        clip = self._input._slice(start, self._input.stream_samples)
        return np.concatenate([clip, np.zeros(GLANCE_PAD, dtype=np.float32)])

    async def _watch_overlap(self) -> None:
        """After each piece of input audio: is the voice over the reply long enough to glance at
        again, or too long for a backchannel?"""
        ov = self._overlap_pending()
        if ov is None:
            return
        voice = self._voice_ms(ov)
        if ov.lasted(voice) is not None:
            await self._decided(ov)
            return
        if ov.looking or ov.blind or voice < ov.next_glance_ms:
            return
        ov.looking = True
        ov.glances = (voice - GLANCE_FIRST_MS) // GLANCE_EVERY_MS + 1  # the next one is due after this voice
        clip = self._overlap_clip(ov)
        fut = self.backend.glance_pool.submit(self.backend.transcribe_glance, clip)
        fut.add_done_callback(lambda f: self.call_soon(self._on_glance, ov, voice, f))

    def _on_glance(self, ov: Overlap, voice: int, fut: concurrent.futures.Future) -> None:
        ov.looking = False
        if self._closed or self._overlap is not ov or ov.verdict is not None:
            return
        words = None if fut.exception() is not None else fut.result()
        if words is None:  # no fast recogniser: the voice's length decides
            ov.blind = True
            return
        if ov.glanced(words, voice) is not None:
            self._spawn(self._decided(ov))

    async def _overlap_paused(self, ov: Overlap, segment: np.ndarray | None) -> None:
        """The voice paused: judge the whole clip now (a backchannel is over; an interruption
        is one as soon as its words say so)."""
        voice = self._voice_ms(ov)
        clip = self._overlap_clip(ov)
        try:
            words = await self._in_thread(self.backend.glance_pool, self.backend.transcribe_glance, clip)
        except Exception:  # judged by its length instead
            log.exception("glance failed")
            words = None
        if self._overlap is not ov or ov.verdict is not None or self._closed:
            return
        if not ov.paused:  # the voice came back while the clip was read: only words can settle it now
            if words is not None and ov.glanced(words, voice) is not None:
                await self._decided(ov)
            return
        if words is None:  # no words to read: shorter than LONGEST_BACKCHANNEL_MS (``lasted``), so a backchannel
            ov.decide("backchannel", voice, "length at a pause")
        else:
            ov.ended(words, voice)
        await self._decided(ov, segment)

    async def _decided(self, ov: Overlap, segment: np.ndarray | None = None) -> None:
        """Act on the verdict: an interruption starts the user's turn; anything else is dropped."""
        if self._overlap is not ov or self._closed:
            return
        log.info("speech over the reply: %s after %s ms of voice (%s)", ov.verdict, ov.decided_after_ms,
                 "; ".join(ov.reasons))
        if ov.verdict == "interruption":
            self._emit(SpeechStarted(ov.speech_item, ov.onset_ms))
            await self._interrupt()
            if segment is not None:
                self._speculate(segment)  # the pause that settled it is the turn's first pause
            return
        async with self._audio_lock:
            report = self._input.end_within(0)  # the voice is over: the VAD's turn ends here
        end_ms = report[1] if report is not None else ov.onset_ms + self._voice_ms(ov)
        self._overlap = None
        self._speech_item = None
        self._input.clear()
        self._forget_speculation()
        self._emit(Backchannel(ov.heard_item, ov.onset_ms, end_ms, ov.words.strip() if ov.verdict == "backchannel" else ""))

    def _overlap_ended(self, ov: Overlap) -> bool:
        """The VAD ended the voice before a verdict (or it was not an interruption): drop it.
        True when the caller must not go on with a turn."""
        if ov.verdict == "interruption":
            self._overlap = None
            return False
        if ov.verdict is None:
            ov.decide("noise", self._voice_ms(ov), "ended before a verdict")
            self._overlap = None
            self._emit(Backchannel(ov.heard_item, ov.onset_ms, ov.onset_ms + self._voice_ms(ov), ""))
        self._input.clear()
        return True

    # ------------------------------------------------------------------ interruptions

    async def _interrupt(self) -> None:
        """Stop what the listener hears: cancel the reply being made and cut the item heard."""
        td = self.config.turn_detection
        clock = self.playback
        heard_item = clock.item_id if clock.audible else None
        heard = clock.heard_samples() if heard_item is not None else None
        resp = self._response
        cut: Response | None = None
        if resp is not None and not resp.held:
            at = heard if heard_item == resp.item_id else None
            await self.cancel_response("turn_detected", heard_samples=at, shadow=True)
            cut = resp
        elif heard_item is not None and heard is not None:
            self._cut_item(heard_item, heard)
            last = self._last_spoken
            cut = last if last is not None and last.item_id == heard_item else None
        if heard_item is not None and heard is not None:
            clock.stop(heard_item, heard)
        self._confirm_cut()  # an earlier cut that was never resumed
        resumable = (td is not None and td.resume_false_interruption and cut is not None and cut.output_audio
                     and cut.in_conversation and self.backend.capabilities.transcript_first)
        if cut is not None and resumable:
            cut.cut_samples = heard if heard is not None and heard_item == cut.item_id else cut.audio_samples
            self._cut = cut
        elif cut is not None:
            cut.cancel.set()
            cut.gate.set()

    def _cut_item(self, item_id: str, heard: int) -> None:
        """Cut a finished assistant item to what was heard (its audio still played)."""
        item = self._items.get(item_id)
        segments = self._past_segments.get(item_id)
        if item is None or segments is None:
            return
        kept = heard_text(segments, heard, item.text).strip()
        if kept != item.text.strip():
            item.set_transcript(f"{kept}{CUT_MARK}")  # stays, as the client saw it; the model reads the cut
            item.status = "incomplete"
        self._on_history_edited()
        self._emit(ItemTruncated(item_id, heard * 1000 // OUTPUT_RATE))

    def _confirm_cut(self) -> None:
        """The interruption was real (words came, or a new reply starts): stop the cut reply."""
        cut, self._cut = self._cut, None
        if cut is not None:
            cut.shadow = False
            cut.cancel.set()
            cut.gate.set()

    def _false_interruption(self) -> bool:
        """The user's turn after an interruption had no words: resume the cut reply."""
        cut, self._cut = self._cut, None
        if cut is None or self._response is not None or self._closed:
            if cut is not None:
                cut.cancel.set()
                cut.gate.set()
            return False
        self._resume(cut)
        return True

    def _resume(self, cut: Response) -> None:
        heard = cut.cut_samples or 0
        pcm = b"".join(cut.pcm)[heard * 2:]
        said = heard_text(cut.segments, heard, cut.text).split()
        rest = " ".join(cut.text.split()[len(said):])
        resp = Response(new_id("resp"), new_id("item"), True)
        self._open(resp)
        self._emit(ResponseResumed(resp.response_id, resp.item_id, cut.item_id, heard * 1000 // OUTPUT_RATE))
        self.add_segment(resp, Segment(rest))
        if rest:
            self.emit_text(resp, rest + " " if cut.generating else rest)  # more words may follow
        step = OUTPUT_RATE * self.backend.audio_chunk_ms // 1000 * 2
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
