"""What the listener has heard of the assistant's audio, from when each piece was sent.

The server sends a reply's audio faster than real time; the client queues it and plays it in
real time from the first piece. So the listener's play head is a clock (``core/play_head.py``,
which the Live pacer keeps too): every piece sent at ``now`` ends ``max(end, now) + its length``.
What was heard by ``now`` is what was sent minus what is still queued. A client's ``conversation.item.truncate`` says where it stopped
(the truth beats the estimate); so does a barge-in the server decides.

On WebRTC the gateway paces the track the same way, so the same clock holds there. With a
``PlayedAudio``, the audio itself is laid on this clock: the echo canceller's reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from core.audio import OUTPUT_RATE
from core.conversation.played_audio import PlayedAudio
from core.play_head import PlayHead


class PlaybackClock:
    """The listener's play head over the latest assistant item that had audio."""

    def __init__(self, now: Callable[[], float] = time.monotonic, played: PlayedAudio | None = None) -> None:
        self._now = now
        self.played = played  # the audio, where it plays (the echo's reference)
        self.item_id: str | None = None
        self.sent_samples = 0  # of the current item
        self.head = PlayHead(now)  # where the audio sent so far will have finished playing
        self.stopped_at: int | None = None  # samples heard when the client stopped (truncate)

    def sent(self, item_id: str, samples: int, pcm: bytes | None = None) -> None:
        """``samples`` (24 kHz) of ``item_id`` went to the client just now (``pcm``: the audio)."""
        now = self._now()
        if item_id != self.item_id:
            self.item_id, self.sent_samples, self.stopped_at = item_id, 0, None
        if self.stopped_at is not None:
            return  # the client stopped this item; what still comes is dropped there
        starts = self.head.lay(samples / OUTPUT_RATE)
        self.sent_samples += samples
        if self.played is not None and pcm:
            self.played.add(pcm, starts, now)

    def queued_samples(self) -> int:
        """Sent but not yet played."""
        if self.stopped_at is not None:
            return 0
        return min(self.sent_samples, int(self.head.ahead() * OUTPUT_RATE))

    def heard_samples(self, item_id: str | None = None) -> int | None:
        """Samples of ``item_id`` (default: the current item) heard by now; None for another item."""
        if self.item_id is None or (item_id is not None and item_id != self.item_id):
            return None
        if self.stopped_at is not None:
            return self.stopped_at
        return self.sent_samples - self.queued_samples()

    def heard_ms(self, item_id: str | None = None) -> int | None:
        heard = self.heard_samples(item_id)
        return None if heard is None else heard * 1000 // OUTPUT_RATE

    @property
    def audible(self) -> bool:
        """The listener is hearing the assistant right now."""
        return self.item_id is not None and self.stopped_at is None and self.head.ends_at > self._now()

    @property
    def playing_until(self) -> float:
        """When (monotonic) what was sent will have finished playing; in the past when silent."""
        return self.head.ends_at if self.stopped_at is None else min(self.head.ends_at, self._now())

    def sounded_within(self, seconds: float) -> bool:
        """The listener heard the assistant at some moment of the last ``seconds`` (or does now)."""
        return self.item_id is not None and self.playing_until > self._now() - seconds

    def stop(self, item_id: str, heard_samples: int) -> None:
        """The listener stopped ``item_id`` after ``heard_samples`` (a truncate, a barge-in)."""
        if item_id != self.item_id:
            return
        self.stopped_at = max(0, min(heard_samples, self.sent_samples))
        self.head.stop()
        if self.played is not None:
            self.played.stop(self._now())
