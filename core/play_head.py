"""The listener's play head: where audio sent to a client that plays it in real time ends.

A client queues what it is sent and plays it from the first piece at real time; a piece that
arrives after the queue ran dry starts when it lands (the gap is silence, not audio heard). So
every piece sent at ``now`` ends at ``max(end, now) + its length``. The worker's estimate of what
the listener heard (``core/conversation/playback.py``) and the Live pacer, which sends the reply at
that pace (``worker/live/pacer.py``), keep this one clock; a WebRTC call's gateway plays the
audio itself and counts what its track took instead (``gateway/realtime/webrtc/playback.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class PlayHead:
    """Times and lengths in ``now``'s units (the monotonic clock's seconds by default; the Live
    pacer's session timeline counts milliseconds)."""

    __slots__ = ("_now", "ends_at")

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self.ends_at = 0.0  # when the audio laid so far will have finished playing

    def lay(self, length: float) -> float:
        """``length`` of audio sent now: when it starts playing."""
        starts = max(self.ends_at, self._now())
        self.ends_at = starts + length
        return starts

    def ahead(self) -> float:
        """What was laid and is not yet played (0 when the listener hears nothing of it now)."""
        return max(0.0, self.ends_at - self._now())

    def stop(self) -> None:
        """The listener stopped: nothing laid so far plays after now."""
        self.ends_at = min(self.ends_at, self._now())
