"""What both queue implementations share (in memory: ``worker_pool.py``; in Redis:
``shared_pool.py``): the worker record, leases, queue status, the errors a waiter can get and the
arithmetic behind ETAs and snapshots. Plain data and pure functions, no state of their own."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

EMA_ALPHA = 0.2  # weight of one finished session in the learned average behind ETAs
LENGTH_UPDATE_S = 1.0  # how often waiters hear that the queue behind them grew
CANCELLED_BY_OPERATOR = "removed from the queue by the operator"


class Health(str, Enum):
    UNKNOWN = "unknown"  # not yet probed enough (or loading / just re-enabled)
    HEALTHY = "healthy"  # assignable
    UNHEALTHY = "unhealthy"  # failing probes or a session saw it fail
    DEAD = "dead"  # operator: gone for good, probes ignored
    DISABLED = "disabled"  # operator: draining, running sessions finish, no new ones


class QueueFullError(Exception):
    """The queue is at capacity; ``str(e)`` is a reason fit to show a user."""


class QueueTimeoutError(Exception):
    """The request waited longer than ``max_wait_s`` and was removed from the queue."""


class QueueCancelledError(QueueTimeoutError):
    """The operator removed the request from the queue (a kind of "no worker in time")."""


class NoCapableWorkerError(Exception):
    """No registered (non-dead) worker can ever serve the requested capabilities."""


def no_capable_worker(requirements: frozenset[str]) -> NoCapableWorkerError:
    return NoCapableWorkerError(f"no worker offers {', '.join(sorted(requirements)) or 'these capabilities'}")


def queue_full(waiting: int) -> QueueFullError:
    return QueueFullError(f"The queue is full ({waiting} waiting); please try again later.")


def wait_timed_out(max_wait_s: float) -> QueueTimeoutError:
    return QueueTimeoutError(f"No worker became free within {max_wait_s:.0f} s.")


@dataclass(eq=False)
class Worker:
    """One model worker process. ``busy``/``sessions`` are owned by the pool; do not mutate."""

    id: str
    url: str
    slots: int = 1
    busy: int = 0
    capabilities: frozenset[str] = frozenset()
    health: Health = Health.UNKNOWN
    ok_streak: int = 0
    fail_streak: int = 0
    failures_total: int = 0
    last_error: str | None = None
    last_probe: dict | None = None
    added_at: float = field(default_factory=time.time)  # wall clock, for display
    sessions: dict[str, float] = field(default_factory=dict)  # ticket -> start (monotonic)

    @property
    def available(self) -> bool:
        return self.health == Health.HEALTHY and self.busy < self.slots

    def can_serve(self, requirements: frozenset[str]) -> bool:
        return self.capabilities >= requirements


@dataclass(eq=False)
class Lease:
    """A slot on ``worker`` held for ``ticket``; give it back with the pool's ``release``."""

    worker: Worker
    ticket: str
    queued_s: float


@dataclass
class QueueStatus:
    ticket: str
    position: int  # 1-based, over the whole queue
    queue_length: int
    eta_s: float


def eta_s(position: int, capable_slots: int, session_s: float) -> float:
    """``ceil(position / max(1, capable_slots)) * session_s``: a rough, stable number (it
    ignores how long the running sessions have run) is more useful to a waiting user than a
    precise, jumpy one."""
    return math.ceil(position / max(1, capable_slots)) * session_s


def moving_average(average: float, sample: float) -> float:
    return average + EMA_ALPHA * (sample - average)


def worker_view(w: Worker) -> dict:
    """One worker as ``snapshot()`` shows it (``/health``, the admin page)."""
    return {
        "id": w.id,
        "url": w.url,
        "health": w.health.value,
        "available": w.available,
        "slots": w.slots,
        "busy": w.busy,
        "capabilities": sorted(w.capabilities),
        "ok_streak": w.ok_streak,
        "fail_streak": w.fail_streak,
        "failures_total": w.failures_total,
        "last_error": w.last_error,
        "last_probe": w.last_probe,
        "sessions": list(w.sessions),
    }


def pool_snapshot(workers: Iterable[Worker], queue: list[dict], queue_length: int, avg_session_s: float) -> dict:
    """The ``snapshot()`` both pools return: workers, the queue's entries, totals."""
    workers = list(workers)
    return {
        "workers": [worker_view(w) for w in workers],
        "queue": queue,
        "queue_length": queue_length,
        "busy": sum(w.busy for w in workers),
        "slots_total": sum(w.slots for w in workers),
        "healthy": sum(1 for w in workers if w.health == Health.HEALTHY),
        "avg_session_s": round(avg_session_s, 3),
    }
