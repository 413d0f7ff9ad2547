"""``turn_detection.idle_timeout_ms`` (server_vad, as OpenAI's): a user who stays silent after the
assistant spoke is prompted to go on.

The wait starts when the last reply has been heard: its ``response.done`` time or, when its audio
is still playing, the end of that audio (``PlaybackClock.playing_until``; a text reply's done time).
A user turn that got no reply (no words, or ``create_response`` off) starts it again at the end of
the speech. Speech, or another reply starting, stops it. When ``idle_timeout_ms`` passes with no
speech:

1. ``TimeoutTriggered`` (``input_audio_buffer.timeout_triggered``): ``audio_start_ms`` is the input
   stream's offset when the wait began, ``audio_end_ms`` its offset now;
2. the silence is committed as a user audio item (``InputCommitted``, an empty transcript): an omni
   model hears it (the buffer's last second or so: between turns only that much is kept); a text
   model reads a note that the user said nothing;
3. with ``create_response``, a reply: the model prompts the user to continue.

That reply's end starts the wait again, so a user who stays silent is prompted after each reply,
as OpenAI describes it ("applied after the last model response's audio has finished playing").
Nothing is armed before the first reply. Timers are the loop's (``call_later``), not tasks: a
conversation waiting for a silence holds no work that ``wait_idle`` would wait for.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from core.conversation.audio_input import VAD_RATE
from core.conversation.events import InputCommitted, InputTranscript
from core.conversation.hearing import Hearing
from core.conversation.items import Item, Part
from core.conversation.replies import Replies
from core.conversation.runtime import Runtime
from core.conversation.turn_policy import TurnPolicy
from core.ids import new_id


@dataclass(frozen=True, slots=True)
class TimeoutTriggered:
    """No speech for ``idle_timeout_ms`` after the last reply was heard (offsets into the input)."""

    item_id: str  # the user item the silence is committed as
    audio_start_ms: int
    audio_end_ms: int
    type: Literal["timeout_triggered"] = "timeout_triggered"


class IdleTimeout:
    """One per conversation: watches its events (``observe``) and prompts after a silence."""

    def __init__(self, rt: Runtime, hearing: Hearing, replies: Replies, turns: TurnPolicy) -> None:
        self._rt = rt
        self._hearing = hearing
        self._replies = replies
        self._turns = turns
        self._replied = False  # a reply has ended: the wait exists from then on
        self._quiet_since: float | None = None  # when the wait began (monotonic), playback aside
        self._handle: asyncio.TimerHandle | None = None
        self._generation = 0
        self.triggered = 0

    # ------------------------------------------------------------------ what starts and stops it

    def observe(self, event) -> None:
        """Every event the conversation emits, in order."""
        kind = event.type
        if kind in ("speech_started", "response_started"):
            self._quiet_since = None
            self._cancel()
        elif kind == "response_done" or (kind == "speech_stopped" and self._replied):
            self._quiet_since = time.monotonic()
            self._schedule()
        if kind == "response_done":
            self._replied = True

    def configure(self) -> None:
        """The session changed: the wait restarts with the new setting (or stops)."""
        if self._quiet_since is not None:
            self._quiet_since = time.monotonic()
        self._schedule()

    def stop(self) -> None:
        self._quiet_since = None
        self._cancel()

    def _timeout_ms(self) -> int | None:
        td = self._rt.config.turn_detection
        return td.idle_timeout_ms if td is not None and td.type == "server_vad" else None

    def _cancel(self) -> None:
        self._generation += 1
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self) -> None:
        self._cancel()
        if self._quiet_since is None or self._timeout_ms() is None or self._rt.closed:
            return
        self._at_playback_end(self._generation)

    def _at_playback_end(self, generation: int) -> None:
        """Wait until the reply has been heard; the silence counts from there."""
        if generation != self._generation or self._quiet_since is None:
            return
        loop = self._rt.loop
        now = time.monotonic()
        heard_at = max(self._quiet_since, self._rt.playback.playing_until)
        if heard_at > now + 0.001:
            self._handle = loop.call_later(heard_at - now, self._at_playback_end, generation)
            return
        ms = self._timeout_ms()
        if ms is None:
            return
        start_ms = self._offset_ms()
        self._handle = loop.call_later(ms / 1000, self._fire, generation, start_ms)

    def _offset_ms(self) -> int:
        return self._hearing.now_ms()

    # ------------------------------------------------------------------ the prompt

    def _fire(self, generation: int, start_ms: int) -> None:
        self._handle = None
        if generation == self._generation and not self._rt.closed:
            self._rt.spawn(self._trigger(generation, start_ms))

    def _quiet(self) -> bool:
        """No speech, no reply, nothing being judged: the user really is silent."""
        return self._replies.current is None and not self._hearing.in_speech and not self._turns.busy

    async def _trigger(self, generation: int, start_ms: int) -> None:
        rt = self._rt
        async with self._hearing.lock:  # no audio is being processed while the silence is committed
            if generation != self._generation or rt.closed or self._timeout_ms() is None:
                return
            if not self._quiet():
                return
            end_ms = self._offset_ms()
            item = self._silence_item(start_ms, end_ms)
            self._quiet_since = None  # this silence is answered; the reply's end starts the next wait
            self.triggered += 1
            rt.emit(TimeoutTriggered(item.item_id, start_ms, end_ms))
            previous = rt.items.last_id()
            rt.remember(item)
            rt.emit(InputCommitted(item.item_id, end_ms - start_ms, previous))
            if rt.config.transcribe_input:
                rt.emit(InputTranscript(item.item_id, "", end_ms - start_ms))
        td = rt.config.turn_detection
        if td is not None and td.create_response and self._replies.current is None and not rt.closed:
            await self._turns.respond()

    def _silence_item(self, start_ms: int, end_ms: int) -> Item:
        """The silent stretch as a user audio item (transcript ``""``)."""
        if self._rt.backend.capabilities.transcript_first:  # the model reads words: say there were none
            seconds = round((self._timeout_ms() or 0) / 1000)
            note = f"[The user has said nothing for {seconds} seconds.]"
            return Item("user", note, item_id=new_id("item"), parts=[Part("audio", "")])
        audio = self._hearing.audio(start_ms, end_ms)
        if audio.size < VAD_RATE // 10:
            audio = np.zeros(VAD_RATE // 2, dtype=np.float32)  # no input streamed: half a second of silence
        return Item("user", "", audio=audio, item_id=new_id("item"), parts=[Part("audio", "")])
