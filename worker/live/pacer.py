"""The reply's audio at real-time pace, as Live streams it.

A Live client never clears its player: the model stops by not sending. So the worker's audio goes
out no more than ``LEAD_MS`` ahead of real time, and when the user's voice takes the floor the
audio not yet sent is dropped (``flush``): the listener hears the reply stop within that lead.
The worker's play-head clock assumes a client that plays what it is sent from its first delta at
real time, which is what this pace is. Events tied to the reply (its transcript, a delegation)
keep their place in the same queue, so a transcript delta goes out with its audio; its
``start_ms`` is where that audio sits on the session's timeline. The reply's text comes ahead of
its audio, a phrase at a time, so a delta queued behind a long run of audio would wait it out;
instead it goes out at most ``TRANSCRIPT_GAP_MS`` after the last one (still stamped where it sits):
Live's transcript fragments come every ~200 ms while the model speaks, and a client reads a
longer silence in them as the end of the turn (Pipecat after 0.8 s).

A whole reply may wait here (it is made faster than it is played), but a client that stops
reading holds every reply after it: past ``MAX_QUEUED_MS`` of audio or ``MAX_QUEUED`` events the
pacer calls ``on_overflow`` (the channel then closes the session, 1008) and takes no more.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from core.play_head import PlayHead

LEAD_MS = 200  # audio sent ahead of real time: a jitter buffer's worth, and the most heard after a yield
TRANSCRIPT_GAP_MS = 400  # the longest a queued transcript delta waits after the last one went out
# Audio waiting to go out: ten minutes is longer than any reply is ahead of its playback (one is
# made a few times faster than real time); more means the client stopped reading.
MAX_QUEUED_MS = 10 * 60 * 1000
MAX_QUEUED = MAX_QUEUED_MS // 20 * 2  # events: ten minutes of the shortest pieces (20 ms), each with a transcript delta
# Items remembered per reply (audio and text sent, transcripts made, speech times): a cut reply and
# its resumption are among the last few, so older ones are forgotten and a long session stays flat.
MAX_REMEMBERED = 64

V = TypeVar("V")


def remember(memory: dict[str, V], key: str, value: V) -> V:
    """``memory[key] = value`` as the newest entry, the oldest forgotten past ``MAX_REMEMBERED``."""
    memory.pop(key, None)
    memory[key] = value
    while len(memory) > MAX_REMEMBERED:
        del memory[next(iter(memory))]
    return value


class Pacer:
    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]], origin: float,
                 lead_ms: int = LEAD_MS, on_overflow: Callable[[], None] = lambda: None) -> None:
        self._send = send
        self._on_overflow = on_overflow
        self._origin = origin  # monotonic time of the session timeline's zero
        self.lead_ms = lead_ms
        self._queue: collections.deque[tuple[str, Any, float]] = collections.deque()
        self.queued_ms = 0.0  # the audio in the queue
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.head = PlayHead(self.now_ms)  # where the audio sent so far ends on the session timeline
        self.sent_ms: dict[str, float] = {}  # item id -> its audio sent (the client plays all of it)
        self.last_item = ""  # the item of the audio sent last
        self.sent_text: dict[str, str] = {}  # item id -> its transcript sent
        self._text_at = float("-inf")  # when the last transcript delta went out (now_ms)
        self._task: asyncio.Task | None = None

    def now_ms(self) -> float:
        return (time.monotonic() - self._origin) * 1000

    def audio(self, event: dict[str, Any], duration_ms: float, item_id: str = "") -> None:
        self._put("audio", (event, item_id), duration_ms)

    def timed(self, event: dict[str, Any], item_id: str = "") -> None:
        """A transcript delta of ``item_id``'s: stamped (``start_ms``/``end_ms``) where the audio
        before it ends; its text counts as sent (``sent_text``) once it is."""
        self._put("timed", (event, item_id), 0.0)

    def event(self, event: dict[str, Any]) -> None:
        """An event sent in its place in the queue, unchanged."""
        self._put("event", event, 0.0)

    def _put(self, kind: str, event: dict[str, Any], duration_ms: float) -> None:
        if len(self._queue) >= MAX_QUEUED or self.queued_ms + duration_ms > MAX_QUEUED_MS:
            self._on_overflow()
            return
        self._queue.append((kind, event, duration_ms))
        self.queued_ms += duration_ms
        self._idle.clear()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    @property
    def position_ms(self) -> float:
        """Where the audio sent so far ends on the session timeline."""
        return self.head.ends_at

    def still_playing(self) -> str | None:
        """The item whose audio the client is still playing (sent, not yet played out), if any."""
        return self.last_item or None if self.position_ms > self.now_ms() else None

    def flush(self) -> int:
        """Drop the audio (and its transcript) not yet sent; returns the ms dropped."""
        dropped = sum(d for k, _, d in self._queue if k == "audio")
        self._queue = collections.deque(q for q in self._queue if q[0] == "event")
        self.queued_ms = 0.0
        if not self._queue:
            self._idle.set()
        return round(dropped)

    async def idle(self) -> None:
        await self._idle.wait()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            kind, event, duration = self._queue[0]
            if kind == "audio":
                ahead = self.head.ahead() - self.lead_ms  # after a silence the audio starts now
                if ahead > 0:
                    text = self._text_behind_audio()
                    wait = min(ahead, self._text_at + TRANSCRIPT_GAP_MS - self.now_ms()) if text else ahead
                    if wait > 0:
                        await asyncio.sleep(wait / 1000)
                        continue  # a flush may have dropped it meanwhile
                    index, at = text  # the transcript keeps flowing while the audio before it plays
                    event = self._queue[index][1]
                    del self._queue[index]
                    await self._send(self._stamp(event, at))
                    continue
                event, item = event
                self.head.lay(duration)
                remember(self.sent_ms, item, self.sent_ms.get(item, 0.0) + duration)
                self.last_item = item
            elif kind == "timed":
                event = self._stamp(event, max(self.position_ms, self.now_ms()))
            self._queue.popleft()
            self.queued_ms -= duration
            await self._send(event)

    def _text_behind_audio(self) -> tuple[int, float] | None:
        """The first transcript delta with only audio before it: its index, and where that audio ends."""
        at = self.position_ms
        for index, (kind, _, duration) in enumerate(self._queue):
            if kind == "timed":
                return index, at
            if kind != "audio":
                return None
            at += duration
        return None

    def _stamp(self, timed: tuple[dict[str, Any], str], at: float) -> dict[str, Any]:
        """A transcript delta as it goes out: stamped ``at``, its text counted as sent."""
        event, item = timed
        event["start_ms"] = event["end_ms"] = round(at)
        remember(self.sent_text, item, self.sent_text.get(item, "") + event["delta"])
        self._text_at = self.now_ms()
        return event
