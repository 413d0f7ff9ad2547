"""The assistant's audio as the listener's loudspeaker played it, on the monotonic clock.

The echo canceller (``room.py``) subtracts from the microphone what the loudspeaker played a
moment before; this is that reference. Each piece of reply audio is placed where the play-head
clock (``playback.py``) says it plays: right after the audio queued before it, or when it lands
if the queue ran dry. A client's truncate silences what was still queued: the listener never
heard it, so it cannot come back as echo. Written on the conversation's loop, read from the
input thread: a lock guards the ring.

The pieces fall into runs: a piece laid after the listener's queue ran dry begins a new one.
Within a run the client plays each piece right after the last, so the echo path's delay holds; a
new run starts when its piece reached the client, which the network and the client's loop delay
by a different few tens of ms each time: the delay moves, and the canceller must find it again.
"""

from __future__ import annotations

import bisect
import threading

import numpy as np

from core.audio import OUTPUT_RATE

KEEP_S = 2.0  # kept after it played: longer than any echo path the canceller follows (~1 s)


class PlayedAudio:
    """The pieces of reply audio (PCM16, 24 kHz), each where it plays; a reply sent faster than
    real time is held until it has played, and ``KEEP_S`` after."""

    rate = OUTPUT_RATE

    def __init__(self, keep_s: float = KEEP_S) -> None:
        self._keep = int(keep_s * self.rate)
        self._starts: list[int] = []  # absolute sample index (time * rate) of each piece's first sample
        self._pieces: list[np.ndarray] = []
        self._runs: list[int] = []  # the start of the run each piece belongs to
        self._lock = threading.Lock()

    def _index(self, t: float) -> int:
        return int(round(t * self.rate))

    def add(self, pcm: bytes, starts_at: float, now: float | None = None) -> None:
        """``pcm`` (PCM16 at 24 kHz) plays from monotonic time ``starts_at``; what ended ``KEEP_S``
        before ``now`` is let go (a session whose canceller is off never reads it)."""
        samples = np.frombuffer(pcm, "<i2")
        if samples.size == 0:
            return
        start = self._index(starts_at)
        with self._lock:
            if now is not None:
                self._forget_before(self._index(now) - self._keep)
            end = self._starts[-1] + self._pieces[-1].size if self._starts else None
            if end is not None and start < end:
                start = end  # rounding: never overlap the last
            dry = end is None or start > end + self.rate // 1000  # the queue ran dry: the client plays it when it comes
            self._runs.append(start if dry else self._runs[-1])
            self._starts.append(start)
            self._pieces.append(samples)

    def stop(self, at: float) -> None:
        """Nothing plays after ``at``: what was queued was dropped by the client."""
        cut = self._index(at)
        with self._lock:
            while self._starts and self._starts[-1] >= cut:
                self._starts.pop()
                self._pieces.pop()
                self._runs.pop()
            if self._starts and self._starts[-1] + self._pieces[-1].size > cut:
                self._pieces[-1] = self._pieces[-1][:cut - self._starts[-1]]

    def read(self, t: float, count: int) -> np.ndarray:
        """``count`` samples played from time ``t`` on (zeros where nothing played)."""
        start = self._index(t)
        end = start + count
        out = np.zeros(count, np.int16)
        with self._lock:
            self._forget_before(start - self._keep)  # of no more use: reads move forward
            i = max(0, bisect.bisect_right(self._starts, start) - 1)
            while i < len(self._starts) and self._starts[i] < end:
                s0, piece = self._starts[i], self._pieces[i]
                lo, hi = max(start, s0), min(end, s0 + piece.size)
                if hi > lo:
                    out[lo - start:hi - start] = piece[lo - s0:hi - s0]
                i += 1
        return out

    def run_at(self, t: float) -> int | None:
        """Which run plays at ``t`` (an id: its first sample's index); None while nothing does."""
        at = self._index(t)
        with self._lock:
            i = bisect.bisect_right(self._starts, at) - 1
            if i < 0 or at >= self._starts[i] + self._pieces[i].size:
                return None
            return self._runs[i]

    def _forget_before(self, index: int) -> None:
        """Drop the pieces that ended before ``index``; under the lock."""
        drop = 0
        while drop < len(self._starts) and self._starts[drop] + self._pieces[drop].size < index:
            drop += 1
        if drop:
            del self._starts[:drop], self._pieces[:drop], self._runs[:drop]

    @property
    def held_samples(self) -> int:
        with self._lock:
            return sum(p.size for p in self._pieces)
