"""The turn policy: who holds the floor. The interface the conversation and its hearing talk to.

The standard policy (``vad_turns.VadTurns``) takes turns from the VAD: a turn ends at the VAD's
end of speech (or ``semantic_vad``'s wait), a voice over the assistant is judged (backchannel,
noise or interruption) before the reply stops, and a reply cut by a false interruption resumes.
A backend that decides turns itself (MiniCPM-o's ``model_duplex``) supplies its own policy
(``ConversationModel.turn_policy``), usually wrapping the standard one for what it leaves alone.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Protocol

import numpy as np

from core.conversation.config import ConversationConfig

Speculation = tuple[int, concurrent.futures.Future]  # (pause generation, its transcript)


class TurnReports(Protocol):
    """What ``Hearing`` reports, in order: all it knows of the turn policy."""

    async def heard(self, audio16: np.ndarray) -> None:
        """Every input sample at 16 kHz, before the VAD's reports on it."""

    async def speech_began(self, item_id: str, ms: int, sure: bool, echoing: bool) -> None:
        """A voice began at stream ``ms``; its turn would be ``item_id``. ``sure``: not what a
        still-learning echo canceller left of the assistant's echo. ``echoing``: the microphone
        is known to hear the assistant's reply (what the canceller leaves of it can read as a voice)."""

    async def speech_paused(self, ms: int, segment: np.ndarray | None) -> bool:
        """The voice paused (its last voiced sample at ``ms``; ``segment``: the speech so far).
        True: the hearing reads its words now (a speculative transcript, ``words_at_pause``)."""

    async def speech_resumed(self) -> None:
        """The voice came back after a pause (the pause's transcript is forgotten)."""

    async def speech_ended(self, item_id: str, ms: int, segment: np.ndarray | None,
                           speculation: Speculation | None) -> bool:
        """The VAD ended the voice at ``ms``: ``segment`` is its clip, ``speculation`` the last
        pause's transcript when no speech came after it. False: it was no turn, and the hearing
        drops what it buffered of it."""

    async def after_audio(self) -> None:
        """After each piece of input (a voice over the reply may need another look)."""

    def words_at_pause(self, generation: int, transcript: concurrent.futures.Future, current: bool) -> bool:
        """The speculative transcript of a pause is ready (``current``: no speech since); True
        when a reply started on it scores the turn itself (``semantic_vad`` then asks no
        separate score)."""


class PassesReportsOn:
    """``TurnReports`` passed on, each to ``report_to`` (a policy that wraps another, or the
    conversation, which chose the policy after making the hearing that reports to it)."""

    @property
    def report_to(self) -> TurnReports:
        raise NotImplementedError

    async def heard(self, audio16: np.ndarray) -> None:
        await self.report_to.heard(audio16)

    async def speech_began(self, item_id: str, ms: int, sure: bool, echoing: bool) -> None:
        await self.report_to.speech_began(item_id, ms, sure, echoing)

    async def speech_paused(self, ms: int, segment: np.ndarray | None) -> bool:
        return await self.report_to.speech_paused(ms, segment)

    async def speech_resumed(self) -> None:
        await self.report_to.speech_resumed()

    async def speech_ended(self, item_id: str, ms: int, segment: np.ndarray | None,
                           speculation: Speculation | None) -> bool:
        return await self.report_to.speech_ended(item_id, ms, segment, speculation)

    async def after_audio(self) -> None:
        await self.report_to.after_audio()

    def words_at_pause(self, generation: int, transcript: concurrent.futures.Future, current: bool) -> bool:
        return self.report_to.words_at_pause(generation, transcript, current)


class TurnPolicy(TurnReports, Protocol):

    async def committed(self, item_id: str, segment: np.ndarray) -> None:
        """The client committed the input buffer as a turn (turn-based mode)."""

    async def respond(self) -> None:
        """A turn (or a silence, ``idle_timeout_ms``) wants a reply, when none is running."""

    def reply_requested(self) -> None:
        """A client asks for a reply (``response.create``): raise where this policy does not allow
        it; otherwise settle what a new reply ends (a cut reply is not resumed)."""

    def cancelled(self) -> None:
        """A client cancelled the active reply."""

    def configured(self, old: ConversationConfig | None) -> None:
        """The session's settings changed (``old`` None: the conversation just opened)."""

    def frame_added(self, frame: Any) -> None:
        """A camera frame arrived (prepared by the backend)."""

    @property
    def busy(self) -> bool:
        """Something is being decided (a voice being judged, a cut reply not yet settled)."""

    async def close(self) -> None:
        """The conversation is closing."""
