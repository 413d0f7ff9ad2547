"""The standard turn policy: turns from the VAD, barge-in with an overlap judge, resume.

- A turn ends at the VAD's end of speech (``semantic_vad``: after the wait its score set). A
  transcript-first backend (a text LLM) gets the turn's words first, speculatively at a pause,
  with a reply held until the turn really ends; an audio backend (an omni model) gets the clip.
- While the listener hears the assistant (``PlaybackClock``) and the session ignores
  backchannels (our default), a voice is not a barge-in yet: ``speech_started`` waits for the
  overlap judge (``overlap.py``: the voice's length, glances at its first words, the whole clip
  at its first pause). A backchannel or noise is dropped (a ``Backchannel`` event, nothing
  committed, the reply goes on); an interruption is announced with the voice's onset. Each
  glance is read against the assistant's words heard lately (``echo_words.py``): their echo is
  no voice.
- An interruption stops what the listener hears: the reply being made is cancelled, and the
  assistant item is cut to what was heard (the clock's estimate; a client's truncate corrects
  it). The cut item's text ends with "…", so the next reply reads where it was cut.
- A false interruption: when the user's turn then has no words (a cough, a door), the reply
  resumes where it was cut, as a new response playing the rest (``Replies.resume``). Until the
  turn's words are known the cut reply's generator is held (it makes nothing meanwhile, so the
  user's turn has the CPU), and nothing of it is lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable
from typing import Any

import numpy as np

from core.conversation.audio_input import VAD_RATE
from core.conversation.config import ConversationConfig
from core.conversation.echo_words import EchoWords
from core.conversation.events import Backchannel, ConversationError, InputTranscript, SpeechStarted, SpeechStopped
from core.conversation.hearing import Hearing
from core.conversation.items import Item
from core.conversation.overlap import GLANCE_EVERY_MS, GLANCE_FIRST_MS, SETTLE_MS, Glance, Overlap, says_stop
from core.conversation.replies import Replies
from core.conversation.reply import Response
from core.conversation.runtime import Runtime
from core.conversation.turn_policy import Speculation
from core.ids import new_id

log = logging.getLogger(__name__)

# A voice that starts within this of the end of the user's own turn continues that turn (the
# assistant answered inside a pause): it takes the floor, not judged as a backchannel. The dev
# paused items pause 0.6-1.5 s (``bench/sets/duplex.py``); a listener's backchannel comes while an
# answer has been going on for a while.
CONTINUES_TURN_MS = 2000
# Over a microphone that hears the loudspeaker, the reply's echo outlasts its audio by the echo
# path's delay and the room's tail (up to 600 + 300 ms): a voice while the reply is still being
# made and sounded this recently is judged as one over it, though the listener's queue ran dry.
ECHO_TAIL_MS = 1000


class VadTurns:
    """The floor, as the VAD and the overlap judge see it (a ``TurnPolicy``)."""

    def __init__(self, rt: Runtime, hearing: Hearing, replies: Replies) -> None:
        self.rt = rt
        self.hearing = hearing
        self.replies = replies
        self.echo = EchoWords(rt.playback, replies)  # what the listener heard it say lately
        self._overlap: Overlap | None = None  # speech over the assistant's audio, being judged
        self._paused_clip: np.ndarray | None = None  # the clip at the pending overlap's pause, to speculate on
        self._cut: Response | None = None  # a reply cut by an interruption, until its turn has words
        self._turn_ended_ms: int | None = None  # where the user's last turn ended (the VAD's end)

    # ------------------------------------------------------------------ hooks with nothing to do here

    async def heard(self, audio16: np.ndarray) -> None:
        pass

    def configured(self, old: ConversationConfig | None) -> None:
        pass

    def frame_added(self, frame: Any) -> None:
        pass

    def cancelled(self) -> None:
        pass

    async def close(self) -> None:
        self.confirm_cut()  # a cut reply is stopped, not resumed

    @property
    def busy(self) -> bool:
        return self._overlap is not None or self._cut is not None

    # ------------------------------------------------------------------ what the hearing reports

    async def speech_began(self, item_id: str, ms: int, sure: bool, echoing: bool) -> None:
        """A voice began at ``ms``: judged first when it is over the assistant."""
        self.replies.drop_held()
        self._overlap, self._paused_clip = None, None
        if self._judges_overlap(ms, echoing):
            ov = self._overlap = Overlap(item_id, ms, self.rt.playback.item_id, time.monotonic())
            if not sure:  # maybe the echo's residue: a stop word or its length decides
                ov.unsure = True
                ov.reasons.append("no yield at the onset: the echo canceller is still learning")
            elif self.rt.config.turn_detection.yield_at_onset:  # stop now; a voice that is no turn resumes it
                ov.yielded = True
                self.rt.emit(SpeechStarted(item_id, ms))
                await self._interrupt()
            return
        self.rt.emit(SpeechStarted(item_id, ms))
        td = self.rt.config.turn_detection
        if td is not None and td.vad_turns and td.interrupt_response and (self.replies.active
                                                                          or self.rt.playback.audible):
            await self._interrupt()

    async def speech_paused(self, ms: int, segment: np.ndarray | None) -> bool:
        ov = self._overlap_pending()
        if ov is None:
            return True  # a pause in a turn: its words are read ahead
        ov.paused = True
        ov.pauses += 1
        self._paused_clip = segment
        self.rt.spawn(self._overlap_paused(ov, segment, ms))
        return False

    async def speech_resumed(self) -> None:
        ov = self._overlap_pending()
        if ov is not None:
            ov.paused = False
        self._paused_clip = None
        self.replies.drop_held()

    async def speech_ended(self, item_id: str, ms: int, segment: np.ndarray | None,
                           speculation: Speculation | None) -> bool:
        ov = self._overlap
        if ov is not None and ov.verdict is None:
            await self._read_at_end(ov, ms, segment)
            if self._overlap is not ov:
                return False  # no turn: dropped (or the session closed)
        if ov is not None and self._overlap_ended(ov):
            return False
        self.rt.emit(SpeechStopped(item_id, ms, self.hearing.now_ms()))
        self._turn_ended_ms = ms
        td = self.rt.config.turn_detection
        if td is None or not td.vad_turns:
            return True  # model_duplex: the model hears everything itself; nothing to commit
        item = self._commit(item_id, segment)
        if self.rt.backend.capabilities.transcript_first:
            self.rt.spawn(self._finish_turn(item, segment, td.create_response, speculation))
        elif td.create_response and self.replies.current is None and not self.rt.closed:
            await self.respond()
        return True

    async def committed(self, item_id: str, segment: np.ndarray) -> None:
        item = self._commit(item_id, segment)
        if self.rt.backend.capabilities.transcript_first:
            await self._finish_turn(item, segment, create_response=False)

    async def respond(self) -> None:
        self.reply_requested()
        self.replies.create()

    def reply_requested(self) -> None:
        self.confirm_cut()

    def _commit(self, item_id: str, segment: np.ndarray) -> Item:
        if not self.rt.backend.capabilities.transcript_first:
            self.confirm_cut()  # the model hears the clip itself: no resuming
        return self.hearing.commit_item(item_id, segment)

    # ------------------------------------------------------------------ turns: transcript first

    def words_at_pause(self, generation: int, fut: concurrent.futures.Future, current: bool) -> bool:
        if self._cut is not None and fut.exception() is None and (fut.result() or "").strip():
            self.confirm_cut()  # words after the interruption: it was real
        resp = self._speculate_reply(generation, fut, current)
        return resp is not None and resp.scores_turn

    def _speculate_reply(self, generation: int, fut: concurrent.futures.Future, current: bool) -> Response | None:
        """Start the reply to a speculative transcript while the hangover runs; hold its output."""
        rt = self.rt
        td = rt.config.turn_detection
        if (
            rt.closed
            or td is None
            or not td.create_response
            or not rt.backend.capabilities.speculative_reply
            or self.replies.current is not None
            or fut.exception() is not None
        ):
            return None
        text = fut.result()
        if not text:
            return None
        if not current:  # the voice went on: its words so far can be read now
            self.replies.read_ahead(text)
            return None
        scores_turn = td.type == "semantic_vad" and rt.backend.capabilities.scores_turn_in_reply
        resp = Response(new_id("resp"), new_id("item"), rt.config.output_audio, held=True, spec=generation,
                        spec_text=text, scores_turn=scores_turn)
        self.replies.run(resp, rt.config, None, pending=Item("user", text))
        return resp

    async def _finish_turn(self, item: Item, segment: np.ndarray, create_response: bool,
                           speculation: Speculation | None = None) -> None:
        """Transcript-first turn end: transcribe (or take the speculative transcript), then reply
        (or release the held speculative reply when it answered these very words)."""
        rt, replies = self.rt, self.replies
        try:
            text = await self.hearing.transcript(segment, speculation)
        except Exception as exc:  # reported to the client; the session goes on
            log.exception("transcription failed")
            rt.emit(ConversationError("transcription_failed", f"transcription failed: {exc}"))
            return
        text = (text or "").strip()
        if text:
            self.confirm_cut()
        item.set_transcript(text)
        if rt.config.transcribe_input:
            rt.emit(InputTranscript(item.item_id, text, int(segment.size * 1000 / VAD_RATE)))
        held = replies.held
        if held is not None and (speculation is None or held.spec != speculation[0] or not text):
            replies.drop_held()
            held = None
        if not text:
            self._false_interruption()  # an interruption with no words: the reply goes on
            return
        if held is not None:
            replies.release_held(held)
        elif create_response and replies.current is None and not rt.closed:
            await self.respond()

    # ------------------------------------------------------------------ a voice over the reply

    def _judges_overlap(self, onset_ms: int, echoing: bool) -> bool:
        """A voice over the assistant is judged (backchannel, noise or interruption), unless it
        starts so soon after the user's own turn ended that it is that turn going on: the reply
        came inside the user's pause, and "... Brazil?" must not be taken for a backchannel. Over
        a microphone that hears the loudspeaker it is judged anyway: there a voice at the start of
        an answer is as likely the answer's own echo, and taken as the turn going on unjudged it
        stopped the answer and was answered in turn (issue 70's SDK drive: the answer to "Stop."
        interrupted itself twice, "the story." heard of its own words). There the reply is heard
        until its echo has died away (``ECHO_TAIL_MS``)."""
        td = self.rt.config.turn_detection
        continues = (not echoing and self._turn_ended_ms is not None
                     and onset_ms - self._turn_ended_ms < CONTINUES_TURN_MS)
        playback = self.rt.playback
        heard = playback.audible or (echoing and self.replies.active and playback.sounded_within(ECHO_TAIL_MS / 1000))
        return (td is not None and td.vad_turns and td.interrupt_response and td.ignore_backchannels
                and heard and not continues)

    def _overlap_pending(self) -> Overlap | None:
        ov = self._overlap
        return ov if ov is not None and ov.verdict is None else None

    def _voice_ms(self, ov: Overlap) -> int:
        return self.hearing.now_ms() - ov.onset_ms

    async def after_audio(self) -> None:
        """After each piece of input audio: is the voice over the reply long enough to glance at
        again, or too long for a backchannel?"""
        ov = self._overlap_pending()
        if ov is None or ov.paused:  # the silence after a voice, while it settles, is not more voice
            return
        voice = self._voice_ms(ov)
        if ov.lasted(voice) is not None:
            await self._decided(ov)
            return
        if ov.looking or ov.blind or voice < ov.next_glance_ms:
            return
        ov.looking = True
        ov.glances = (voice - GLANCE_FIRST_MS) // GLANCE_EVERY_MS + 1  # the next one is due after this voice
        self.rt.spawn(self._glanced(ov, voice, self.hearing.glance(ov.onset_ms, self.echo.said_within)))

    @staticmethod
    async def _seen(reading: Awaitable[Glance]) -> Glance:
        """A glance's reading; no words when it failed (the voice's length decides then)."""
        try:
            return await reading
        except Exception:
            log.exception("glance failed")
            return Glance(None)

    async def _glanced(self, ov: Overlap, voice: int, reading: Awaitable[Glance]) -> None:
        seen = await self._seen(reading)
        ov.looking = False
        if self.rt.closed or self._overlap is not ov or ov.verdict is not None:
            return
        if seen.words is None:  # no fast recogniser: the voice's length decides
            ov.blind = True
            return
        if ov.glanced(seen.words, voice, seen.interruption, seen.said) is not None:
            await self._decided(ov)

    async def _overlap_paused(self, ov: Overlap, segment: np.ndarray | None, pause_ms: int) -> None:
        """The voice paused (its last voiced sample at ``pause_ms``): judge the whole clip. An
        interruption is one as soon as its words say so; a backchannel or noise only once the
        silence has lasted ``SETTLE_MS`` (a pause inside one utterance must not split it: if the
        voice comes back, the next pause judges the longer clip). A clip shorter than the first
        glance (``GLANCE_FIRST_MS``) is a fragment ("in" of "Interesting."): its reading settles only a
        stop word at once; anything else it says waits out the settle like a backchannel (on dev,
        69 of 391 backchannel clips with such a pause read as taking the floor from the fragment,
        ``python -m bench.fit.fragments``)."""
        pause = ov.pauses
        voice = self._voice_ms(ov)
        fragment = voice < GLANCE_FIRST_MS
        reading = self.hearing.glance(ov.onset_ms, self.echo.said_within)
        ov.pause_reading = (pause, reading)  # the voice's end, should it come first, takes this reading
        seen = await self._seen(reading)
        words, said = seen.words, seen.said
        if self._overlap is not ov or ov.verdict is not None or self.rt.closed:
            return
        if not ov.paused:  # the voice came back while the clip was read: only words can settle it now
            if (words is not None and (not fragment or says_stop(words, said))
                    and ov.glanced(words, voice, seen.interruption, said) is not None):
                await self._decided(ov)
            return
        if (words is None or (fragment and not says_stop(words, said))
                or ov.reading(words, seen.interruption, said) != "interruption"):
            # SETTLE_MS of silence in the stream, or of wall time for a client that stopped sending
            give_up = time.monotonic() + SETTLE_MS / 1000
            while self.hearing.now_ms() - pause_ms < SETTLE_MS and time.monotonic() < give_up:
                await asyncio.sleep(0.02)
                if self._overlap is not ov or ov.verdict is not None or self.rt.closed or not ov.paused \
                        or ov.pauses != pause:
                    return  # the voice came back (or was judged meanwhile): not over yet
        if words is None:  # no words to read: shorter than LONGEST_BACKCHANNEL_MS (``lasted``), so a backchannel
            ov.decide("backchannel", voice, "length at a pause")
        else:
            ov.ended(words, voice, seen.interruption, said)
        # Read while the voice went on and paused again, this pause's clip holds only the words up
        # to it: the turn's are in the pause the voice is in now ("Cut it out." read "I was...",
        # and semantic_vad waited 4 s on it).
        await self._decided(ov, segment if ov.pauses == pause else None)

    async def _read_at_end(self, ov: Overlap, end_ms: int, segment: np.ndarray | None) -> None:
        """The VAD ended the voice before a verdict (its pause's reading still reading or settling,
        audio sent faster than real time, a loaded machine): the words of its last pause's reading
        (or, where none was made, of the turn's segment) decide now, as at a pause whose silence
        has settled. The input waits for them: this end is the turn's if it is one. A verdict that
        lands meanwhile is acted on here, not by its own task."""
        ov.ending = True
        at_pause = ov.pause_reading
        if at_pause is not None and at_pause[0] == ov.pauses:  # the pause this end closes: its clip, as glanced
            reading = at_pause[1]
        else:  # its pause was never read (audio sent faster than real time): the turn's segment
            reading = self.hearing.glance(ov.onset_ms, self.echo.said_within, segment)
        try:
            seen = await self._seen(reading)
        finally:
            ov.ending = False
        if self._overlap is not ov or self.rt.closed:
            return
        if ov.verdict is None:
            if seen.words is None:  # no fast recogniser: the voice was too short to take the floor
                ov.decide("noise", self._voice_ms(ov), "ended before a verdict")
            else:
                ov.ended(seen.words, self._voice_ms(ov), seen.interruption, seen.said)
        log.info("speech over the reply, judged at its end: %s after %s ms of voice (%s)", ov.verdict,
                 ov.decided_after_ms, "; ".join(ov.reasons))
        if ov.verdict == "interruption":
            if not ov.yielded:
                self.rt.emit(SpeechStarted(ov.speech_item, ov.onset_ms))
                await self._interrupt()
            return
        self._overlap = None
        self._not_a_turn(ov, end_ms, ov.words.strip() if ov.verdict == "backchannel" else "")

    async def _decided(self, ov: Overlap, segment: np.ndarray | None = None) -> None:
        """Act on the verdict: an interruption starts the user's turn; anything else is dropped."""
        if self._overlap is not ov or self.rt.closed or ov.ending:
            return
        log.info("speech over the reply: %s after %s ms of voice (%s)", ov.verdict, ov.decided_after_ms,
                 "; ".join(ov.reasons))
        if ov.verdict == "interruption":
            if not ov.yielded:
                self.rt.emit(SpeechStarted(ov.speech_item, ov.onset_ms))
                await self._interrupt()
            # The pause the voice is in is the turn's first pause, whichever landed first: its
            # judgement, or a glance made before it (whose verdict then finds the pause unread).
            if segment is None and ov.paused:
                segment = self._paused_clip
            self._paused_clip = None
            if segment is not None:
                self.hearing.speculate(segment)
            return
        end_ms = await self.hearing.drop_voice()  # the voice is over: the VAD's turn ends here
        if end_ms is None:
            end_ms = ov.onset_ms + self._voice_ms(ov)
        self._overlap = None
        self._not_a_turn(ov, end_ms, ov.words.strip() if ov.verdict == "backchannel" else "")

    def _overlap_ended(self, ov: Overlap) -> bool:
        """The VAD ended the voice (judged at its end when nothing had settled it): an interruption
        goes on as the turn; anything else is dropped. True when the caller must not go on with a turn."""
        if ov.verdict == "interruption":
            self._overlap = None
            return False
        if ov.verdict is None:
            ov.decide("noise", self._voice_ms(ov), "ended before a verdict")
            self._overlap = None
            self._not_a_turn(ov, ov.onset_ms + self._voice_ms(ov), "")
        return True

    def _not_a_turn(self, ov: Overlap, end_ms: int, words: str) -> None:
        """A backchannel or noise: dropped; a reply it stopped at its onset comes back."""
        if ov.yielded:
            self.rt.emit(SpeechStopped(ov.speech_item, end_ms, self.hearing.now_ms()))
        self.rt.emit(Backchannel(ov.heard_item, ov.onset_ms, end_ms, words))
        if ov.yielded:
            self._false_interruption()

    # ------------------------------------------------------------------ interruptions

    async def _interrupt(self) -> None:
        """Stop what the listener hears: cancel the reply being made and cut the item heard. The
        cut reply can resume when the voice turns out to be no turn: always when it stopped at the
        onset (``yield_at_onset``), else for a transcript-first backend whose turn has no words."""
        td = self.rt.config.turn_detection
        clock = self.rt.playback
        heard_item = clock.item_id if clock.audible else None
        heard = clock.heard_samples() if heard_item is not None else None
        resp = self.replies.current
        cut: Response | None = None
        if resp is not None and not resp.held:
            at = heard if heard_item == resp.item_id else None
            self.replies.cancel("turn_detected", heard_samples=at, shadow=True)
            cut = resp
        elif heard_item is not None and heard is not None:
            self.replies.cut_finished(heard_item, heard)
            last = self.replies.last_spoken
            cut = last if last is not None and last.item_id == heard_item else None
        if heard_item is not None and heard is not None:
            clock.stop(heard_item, heard)
        self.confirm_cut()  # an earlier cut that was never resumed
        yielding = self._overlap is not None and self._overlap.yielded and self._overlap.verdict is None
        resumable = cut is not None and cut.output_audio and cut.in_conversation and (yielding or (
            td is not None and td.resume_false_interruption and self.rt.backend.capabilities.transcript_first))
        if cut is not None and resumable:
            self.replies.keep_cut(cut, heard if heard is not None and heard_item == cut.item_id else cut.audio_samples)
            self._cut = cut
        elif cut is not None:
            self.replies.stop_cut(cut)

    def confirm_cut(self) -> None:
        """The interruption was real (words came, or a new reply starts): stop the cut reply."""
        cut, self._cut = self._cut, None
        if cut is not None:
            self.replies.confirm_cut(cut)

    def _false_interruption(self) -> bool:
        """The voice after an interruption was no turn (no words, or the judge said so): resume
        the cut reply."""
        cut, self._cut = self._cut, None
        if cut is None or self.replies.current is not None or self.rt.closed:
            if cut is not None:
                self.replies.stop_cut(cut)
            return False
        self.replies.resume(cut)
        return True
