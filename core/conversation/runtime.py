"""What every part of one conversation shares: its loop and tasks, the ordered event stream, the
item history, the settings and the backend.

The parts (``hearing``, ``vad_turns``, ``replies``, ``tools``) each own their own state and talk
to each other through public methods; this is the one object they all hold, so none needs the
others' privates to emit an event, start a task or add an item.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from core.conversation.config import ConversationConfig
from core.conversation.events import AudioChunk, ConversationEvent
from core.conversation.items import Item, ItemHistory
from core.conversation.model import ConversationModel
from core.conversation.playback import PlaybackClock
from core.conversation.played_audio import PlayedAudio


@dataclass(slots=True)
class ConversationStats:
    """Figures the benchmarks read; cheap to keep."""

    last_cancel_stop_ms: float | None = None
    last_prefill_ms: float | None = None
    last_reused_tokens: int = 0
    speculative_hits: int = 0
    speculative_misses: int = 0
    speculative_replies_used: int = 0
    speculative_replies_dropped: int = 0
    turn_scores: int = 0  # semantic_vad: pauses scored
    last_turn_score: float | None = None
    turn_score_ms: float | None = None  # the last score's time on the model thread, queue included


class Runtime:
    """One conversation's shared plumbing. Not thread-safe: call from its event loop
    (``call_soon`` is the one door for other threads)."""

    def __init__(self, backend: ConversationModel, config: ConversationConfig) -> None:
        self.backend = backend
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.items = ItemHistory()
        self.frames: deque[Any] = deque(maxlen=backend.capabilities.max_frames)  # latest camera frames
        self.stats = ConversationStats()
        self.played = PlayedAudio()  # the assistant's audio where the listener played it (the echo's reference)
        self.playback = PlaybackClock(played=self.played)  # what the listener has heard of the assistant's audio
        self.model_state = backend.new_model_state()
        self.observers: list[Callable[[ConversationEvent], None]] = []  # see every event as it is emitted
        self.history_listeners: list[Callable[[], None]] = []  # told when the history is edited in place
        self.closed = False
        self.replies_idle = asyncio.Event()  # no reply running (``Replies`` keeps it): display transcripts wait
        self.replies_idle.set()
        self._queue: asyncio.Queue[ConversationEvent | None] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        # The session's context (its log ids): a callback from a model thread runs in it, not in
        # the thread's empty one, so what it logs and spawns names the session.
        self._context = contextvars.copy_context()

    # ------------------------------------------------------------------ events

    def emit(self, event: ConversationEvent) -> None:
        if self.closed:
            return
        if isinstance(event, AudioChunk):
            self.playback.sent(event.item_id, len(event.pcm) // 2, event.pcm)
        self._queue.put_nowait(event)
        for observe in self.observers:
            observe(event)

    async def events(self) -> AsyncIterator[ConversationEvent]:
        """Every event, in order, until ``close``."""
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    # ------------------------------------------------------------------ work

    def spawn(self, coro) -> asyncio.Task:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def call_soon(self, fn: Callable, *args) -> None:
        """Run ``fn`` on the conversation's loop; safe from any thread."""
        try:
            self.loop.call_soon_threadsafe(fn, *args, context=self._context.copy())
        except RuntimeError:  # loop closed: the session is gone
            pass

    async def in_thread(self, pool, fn, *args):
        return await self.loop.run_in_executor(pool, fn, *args)

    async def wait_idle(self) -> None:
        """Wait for background work (transcripts, replies) to finish."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ history

    def remember(self, item: Item) -> Item:
        return self.items.append(item, self.config.max_history_messages)

    def history_edited(self) -> None:
        """An item changed or left from inside the history: a cached prompt no longer matches."""
        for listener in self.history_listeners:
            listener()

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """No more events; background work is cancelled."""
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        self._queue.put_nowait(None)
