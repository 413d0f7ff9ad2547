"""Worker-pool helpers for the in-process tests: a worker made healthy at once, and a loop that
lets woken tasks run."""

from __future__ import annotations

import asyncio

from gateway.pool.model import Health, Worker
from gateway.pool.worker_pool import WorkerPool


async def settle(n: int = 5) -> None:
    """Let woken tasks run (each hop through the loop is one sleep(0))."""
    for _ in range(n):
        await asyncio.sleep(0)


def healthy(pool: WorkerPool, url: str, **kw) -> Worker:
    """Add a worker and pass as many probes as the pool wants before it is healthy."""
    w = pool.add_worker(url, **kw)
    for _ in range(pool.healthy_after):
        pool.update_health(w.id, True)
    assert w.health == Health.HEALTHY
    return w
