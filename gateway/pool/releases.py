"""Releases: the slots this gateway gives back to the shared queue, in order, waiting while
Redis is away so that nothing leaks (``shared_pool.py``)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from gateway.pool.model import EMA_ALPHA
from gateway.pool.redis_queue import ClusterUnavailable, RedisQueue

RETRY_S = 1.0


class Releases:
    def __init__(self, shared: RedisQueue, default_session_s: float,
                 on_error: Callable[[str], None]) -> None:
        self.shared = shared
        self.default_session_s = default_session_s
        self.on_error = on_error
        self._pending: collections.deque[tuple[str, float | None]] = collections.deque()
        self._wake = asyncio.Event()
        self._closing = False

    def put(self, ticket: str, duration_s: float | None = None) -> None:
        """Give ``ticket``'s slot (or queue entry) back; ``duration_s`` joins the ETA average."""
        self._pending.append((ticket, duration_s))
        self._wake.set()

    def tickets(self) -> list[str]:
        return [t for t, _ in self._pending]

    def __len__(self) -> int:
        return len(self._pending)

    def stop(self) -> None:
        """The loop ends at its next turn (a cancellation inside a redis-py command can be lost)."""
        self._closing = True
        self._wake.set()

    async def run(self) -> None:
        self._closing = False
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            while self._pending and not self._closing:
                ticket, duration = self._pending[0]
                try:
                    await self.shared.call("leave", ticket, self.shared.gateway_id)
                    if duration is not None:
                        await self.shared.call("record", duration, EMA_ALPHA, self.default_session_s)
                except ClusterUnavailable as exc:
                    self.on_error(str(exc))
                    await asyncio.sleep(RETRY_S)
                    continue
                self._pending.popleft()
