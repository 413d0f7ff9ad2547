"""WorkerPool: a FIFO queue of sessions in front of exclusive (or few-slot) model workers.

Design (DESIGN.md "WorkerPool", seeds/004):

- Waiting requests live in an ``OrderedDict[ticket, _Entry]``; each entry holds an
  ``asyncio.Future`` that the waiting handler awaits.
- ``_dispatch_next()`` is the only place that hands a queued entry a worker. It runs after
  every event that can free capacity or change the queue (release, cancel/timeout, a worker
  turning healthy, add/enable, capability or slot updates). It marks the slot busy *before*
  resolving the future, so a slot can never be handed out twice. It never awaits.
- FIFO holds among requests that the same workers can serve: dispatch walks the queue in order
  and gives each entry the best free capable worker. An entry is only skipped when no free
  worker can serve it, so whatever a later entry gets could not have served the earlier one.
- Everything runs on one event loop, so there are no locks.

Health is driven from outside: ``HealthChecker`` (gateway/pool/health_checker.py) calls ``update_health``;
relay code calls ``report_failure`` when a session sees a worker fail. Operator states
``DISABLED`` (drain) and ``DEAD`` are never overridden by probes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger(__name__)

EMA_ALPHA = 0.2


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
    """A slot on ``worker`` held for ``ticket``; give it back with ``WorkerPool.release``."""

    worker: Worker
    ticket: str
    queued_s: float


LENGTH_UPDATE_S = 1.0  # how often waiters hear that the queue behind them grew


@dataclass
class QueueStatus:
    ticket: str
    position: int  # 1-based, over the whole queue
    queue_length: int
    eta_s: float


@dataclass(eq=False)
class _Entry:
    ticket: str
    requirements: frozenset[str]
    future: asyncio.Future
    on_status: Callable[[QueueStatus], None] | None
    enqueued_at: float  # monotonic
    on_assigned: Callable[[Lease], None] | None = None
    last_sent: tuple[int, int] | None = None  # (position, queue_length) last pushed


class WorkerPool:
    """Assigns sessions to workers, queueing them FIFO when every capable slot is busy.

    ETA: ``eta_s = ceil(position / max(1, capable_slots)) * avg_session_s`` where
    ``capable_slots`` is the slot count of HEALTHY workers that meet the entry's requirements
    and ``avg_session_s`` is an exponential moving average (alpha 0.2) of observed session
    lengths (lease start to release), starting at ``default_session_s``. It ignores how long the
    running sessions have already run: a rough, stable number is more useful to a waiting user
    than a precise, jumpy one.
    """

    def __init__(
        self,
        capacity: int = 100,
        max_wait_s: float = 600.0,
        default_session_s: float = 120.0,
        healthy_after: int = 2,
        unhealthy_after: int = 3,
    ) -> None:
        self.capacity = capacity
        self.max_wait_s = max_wait_s
        self.healthy_after = healthy_after
        self.unhealthy_after = unhealthy_after
        self.avg_session_s = float(default_session_s)
        self.eta_session_s: float | None = None  # operator's fixed session length for ETAs (admin)
        self._workers: dict[str, Worker] = {}
        self._queue: OrderedDict[str, _Entry] = OrderedDict()
        self._next_id = 0
        self._order: dict[str, int] = {}  # worker id -> insertion order, for stable tie-breaks
        self._added = 0
        self.length_update_s = LENGTH_UPDATE_S
        self._length_flush: asyncio.TimerHandle | None = None
        self._status_scheduled = False
        self.gateway_id: str | None = None  # set where several gateways share the pool
        self.remote_sessions: list[dict] = []  # other gateways' live sessions (shared pool only)
        self.local_sessions: Callable[[], list[dict]] = list  # the app's, for the shared pool
        self.end_local: Callable[[str, str], bool] = lambda session, reason: False
        # What every call to a worker carries (the deployment's worker secret; set by the app).
        self.worker_headers: dict[str, str] = {}

    # ------------------------------------------------------------------ workers

    def add_worker(
        self,
        url: str,
        worker_id: str | None = None,
        slots: int = 1,
        capabilities: frozenset[str] | None = None,
    ) -> Worker:
        """Register a worker in UNKNOWN state; probes admit it. Duplicate url or id -> ValueError."""
        url = url.rstrip("/")
        if any(w.url == url for w in self._workers.values()):
            raise ValueError(f"worker with url {url} already registered")
        if slots < 1:
            raise ValueError("slots must be >= 1")
        if worker_id is None:
            while f"w{self._next_id}" in self._workers:
                self._next_id += 1
            worker_id = f"w{self._next_id}"
            self._next_id += 1
        elif worker_id in self._workers:
            raise ValueError(f"worker id {worker_id} already registered")
        worker = Worker(id=worker_id, url=url, slots=slots, capabilities=frozenset(capabilities or ()))
        self._workers[worker_id] = worker
        self._order[worker_id] = self._added
        self._added += 1
        log.info("worker %s added at %s", worker_id, url)
        self._dispatch_next()
        return worker

    def remove_worker(self, worker_id: str) -> None:
        """Forget a worker. Leases already out stay valid; releasing them frees nothing here."""
        worker = self._get(worker_id)
        del self._workers[worker_id]
        self._order.pop(worker_id, None)
        log.info("worker %s removed (%d sessions still running)", worker_id, worker.busy)
        # Queued entries that only this worker could serve must now fail, not wait forever.
        self._dispatch_next()

    def set_disabled(self, worker_id: str, disabled: bool) -> None:
        """Drain (disabled=True) or re-enable a worker.

        Enabling (also from DEAD) returns the worker to probe control: it becomes HEALTHY at
        once if its probe streak already meets ``healthy_after`` (probes keep running while
        disabled, so a drained-and-re-enabled worker has no gap), UNHEALTHY if its fail streak
        meets ``unhealthy_after``, otherwise UNKNOWN until probes decide.
        """
        worker = self._get(worker_id)
        if disabled:
            if worker.health != Health.DISABLED:
                self._set_health(worker, Health.DISABLED, "disabled by operator")
        elif worker.health in (Health.DISABLED, Health.DEAD):
            if worker.ok_streak >= self.healthy_after:
                new = Health.HEALTHY
            elif worker.fail_streak >= self.unhealthy_after:
                new = Health.UNHEALTHY
            else:
                new = Health.UNKNOWN
            self._set_health(worker, new, "enabled by operator")
        self._dispatch_next()

    def mark_dead(self, worker_id: str) -> None:
        """Operator state: never assigned again; probes never override (``set_disabled(id, False)`` revives)."""
        worker = self._get(worker_id)
        self._set_health(worker, Health.DEAD, "marked dead by operator")
        self._dispatch_next()

    def get_worker(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)

    def workers(self) -> list[Worker]:
        return list(self._workers.values())

    # ------------------------------------------------------------------ health

    def report_failure(self, worker_id: str, reason: str) -> None:
        """A session saw the worker fail: stop assigning to it now; only probes bring it back."""
        worker = self._workers.get(worker_id)
        if worker is None:
            return
        worker.ok_streak = 0
        worker.fail_streak += 1
        worker.failures_total += 1
        worker.last_error = reason
        if worker.health not in (Health.DEAD, Health.DISABLED, Health.UNHEALTHY):
            self._set_health(worker, Health.UNHEALTHY, reason)

    def update_health(
        self,
        worker_id: str,
        ok: bool,
        info: dict | None = None,
        error: str | None = None,
        *,
        failure: bool = True,
    ) -> None:
        """Record one probe result (called by the health checker).

        ``ok`` probes count toward ``healthy_after``; failed probes (``failure=True``) count
        toward ``unhealthy_after`` and ``failures_total``. ``ok=False, failure=False`` means
        "reachable but not ready" (model loading, non-retryable 4xx): the worker is not
        assignable, so HEALTHY/UNHEALTHY drop to UNKNOWN, but nothing counts as a failure.
        ``info`` (the /health JSON) is kept as ``last_probe``; its ``capabilities`` (list) and
        ``slots`` (int) replace the registered ones. Unknown worker ids are ignored (a probe can
        finish after its worker was removed).
        """
        worker = self._workers.get(worker_id)
        if worker is None:
            return
        if info is not None:
            worker.last_probe = info
            caps = info.get("capabilities")
            if isinstance(caps, list) and all(isinstance(c, str) for c in caps):
                worker.capabilities = frozenset(caps)
            slots = info.get("slots")
            if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
                worker.slots = slots
        operator = worker.health in (Health.DEAD, Health.DISABLED)
        if ok:
            worker.ok_streak += 1
            worker.fail_streak = 0
            worker.last_error = None
            if not operator and worker.health != Health.HEALTHY and worker.ok_streak >= self.healthy_after:
                self._set_health(worker, Health.HEALTHY, "probes ok")
        elif failure:
            worker.ok_streak = 0
            worker.fail_streak += 1
            worker.failures_total += 1
            worker.last_error = error
            if (
                not operator
                and worker.health != Health.UNHEALTHY
                and worker.fail_streak >= self.unhealthy_after
            ):
                self._set_health(worker, Health.UNHEALTHY, error or "probes failing")
        else:
            worker.ok_streak = 0
            worker.last_error = error
            if not operator and worker.health != Health.UNKNOWN:
                self._set_health(worker, Health.UNKNOWN, error or "not ready")
        # Capabilities/slots may have changed and the worker may have turned healthy.
        self._dispatch_next()

    # ------------------------------------------------------------------ queue

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    async def acquire(
        self,
        requirements: frozenset[str] = frozenset(),
        ticket: str | None = None,
        on_status: Callable[[QueueStatus], None] | None = None,
        on_assigned: Callable[[Lease], None] | None = None,
    ) -> Lease:
        """Get a worker slot, waiting in the FIFO queue if none is free.

        Raises NoCapableWorkerError, QueueFullError or QueueTimeoutError. If the caller is
        cancelled while queued the entry leaves the queue at once; if a lease was handed out in
        that same instant it is released here, so a slot never leaks.
        """
        requirements = frozenset(requirements)
        ticket = ticket or uuid.uuid4().hex
        if ticket in self._queue or any(ticket in w.sessions for w in self._workers.values()):
            raise ValueError(f"ticket {ticket} already in use")
        if not self._can_ever_serve(requirements):
            raise NoCapableWorkerError(
                f"no worker offers {', '.join(sorted(requirements)) or 'these capabilities'}"
            )

        # Immediate assignment, unless an earlier waiter could use the same worker.
        free = [
            w
            for w in self._workers.values()
            if w.available
            and w.can_serve(requirements)
            and not any(w.can_serve(e.requirements) for e in self._queue.values())
        ]
        if free:
            return self._assign(self._pick(free, requirements), ticket, 0.0)

        if len(self._queue) >= self.capacity:
            raise QueueFullError(
                f"The queue is full ({len(self._queue)} waiting); please try again later."
            )

        loop = asyncio.get_running_loop()
        entry = _Entry(ticket, requirements, loop.create_future(), on_status, time.monotonic(), on_assigned)
        self._queue[ticket] = entry
        self._dispatch_next()  # pushes first status (and other waiters' new queue length)

        # Await the future itself: the waiter resumes on the very next loop pass after dispatch,
        # ahead of the position updates (asyncio.wait or shield would add hops behind them). If
        # the waiter is cancelled in the instant a lease lands, _abandon gives the lease back.
        timer = loop.call_later(self.max_wait_s, self._expire, entry)
        try:
            return await entry.future  # a Lease, or an error set by dispatch
        except asyncio.CancelledError:
            self._abandon(entry)  # leaves the queue; a lease granted meanwhile goes back
            raise
        finally:
            timer.cancel()

    def _expire(self, entry: _Entry) -> None:
        """The entry waited ``max_wait_s``: it leaves the queue with QueueTimeoutError."""
        if entry.future.done():
            return
        self._queue.pop(entry.ticket, None)
        entry.future.set_exception(QueueTimeoutError(f"No worker became free within {self.max_wait_s:.0f} s."))
        self._dispatch_next()

    def cancel(self, ticket: str, reason: str = "removed from the queue by the operator") -> bool:
        """Take a waiting request out of the queue; its ``acquire`` raises QueueCancelledError."""
        entry = self._queue.pop(ticket, None)
        if entry is None:
            return False
        if not entry.future.done():
            entry.future.set_exception(QueueCancelledError(reason))
        log.info("queue entry %s cancelled: %s", ticket, reason)
        self._dispatch_next()
        return True

    def set_eta_session_s(self, seconds: float | None) -> None:
        """Fix the session length behind ETAs (None = the learned average); waiters hear it now."""
        self.eta_session_s = seconds
        for entry in self._queue.values():
            entry.last_sent = None
        self._push_status()

    def release(self, lease: Lease, *, record: bool = True) -> None:
        """Give a slot back. Idempotent; releasing a removed worker's lease frees nothing.

        ``record=False`` keeps the lease out of the session-length average behind the ETA
        (one-shot REST requests last a second and would make realtime ETAs far too short)."""
        self._release(lease, record=record)

    # ------------------------------------------------------------------ operator actions
    # What the admin API awaits. Here they act at once; the shared pool (gateway/pool/shared_pool.py) acts in
    # Redis, so an action on any gateway reaches all of them.

    async def start(self) -> None:
        """Nothing to connect to in-process (the shared pool connects to Redis here)."""

    async def close(self) -> None:
        pass

    def cluster_health(self) -> dict | None:
        """The shared state's reachability (shared pool only)."""
        return None

    async def admin_add_worker(self, url: str, worker_id: str | None = None, slots: int = 1) -> Worker:
        return self.add_worker(url, worker_id=worker_id, slots=slots)

    async def admin_remove_worker(self, worker_id: str) -> None:
        self.remove_worker(worker_id)

    async def admin_set_disabled(self, worker_id: str, disabled: bool) -> None:
        self.set_disabled(worker_id, disabled)

    async def admin_mark_dead(self, worker_id: str) -> None:
        self.mark_dead(worker_id)

    async def admin_cancel(self, ticket: str, reason: str = "removed from the queue by the operator") -> bool:
        return self.cancel(ticket, reason)

    async def admin_end_remote(self, session: str, reason: str) -> dict | None:
        """End a session running on another gateway (none here); its info, or None."""
        return None

    async def admin_set_eta(self, seconds: float | None) -> None:
        self.set_eta_session_s(seconds)

    # ------------------------------------------------------------------ introspection

    def snapshot(self, with_queue: bool = True) -> dict:
        """Workers and queue for /health and the admin page (``with_queue=False``: the shared
        pool need not fetch every entry for a health check)."""
        now = time.monotonic()
        workers = list(self._workers.values())
        return {
            "workers": [
                {
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
                for w in workers
            ],
            "queue": [
                {
                    "ticket": e.ticket,
                    "position": i,
                    "requirements": sorted(e.requirements),
                    "waited_s": round(now - e.enqueued_at, 3),
                }
                for i, e in enumerate(self._queue.values(), start=1)
            ],
            "queue_length": len(self._queue),
            "busy": sum(w.busy for w in workers),
            "slots_total": sum(w.slots for w in workers),
            "healthy": sum(1 for w in workers if w.health == Health.HEALTHY),
            "avg_session_s": round(self.avg_session_s, 3),
        }

    # ------------------------------------------------------------------ internals

    def _get(self, worker_id: str) -> Worker:
        try:
            return self._workers[worker_id]
        except KeyError:
            raise KeyError(f"unknown worker {worker_id}") from None

    def _set_health(self, worker: Worker, health: Health, why: str) -> None:
        if worker.health != health:
            level = logging.INFO if health in (Health.HEALTHY, Health.DISABLED) else logging.WARNING
            log.log(level, "worker %s: %s -> %s (%s)", worker.id, worker.health.value, health.value, why)
            worker.health = health

    def _can_ever_serve(self, requirements: frozenset[str]) -> bool:
        """False only once capabilities are known and no non-dead worker can meet them.

        A worker that has not reported capabilities yet (still loading) might, so it counts as
        capable; with no reports at all we simply queue.
        """
        if not any(w.capabilities for w in self._workers.values()):
            return True
        return any(
            w.health != Health.DEAD and (not w.capabilities or w.can_serve(requirements))
            for w in self._workers.values()
        )

    def _pick(self, candidates: Iterable[Worker], requirements: frozenset[str]) -> Worker:
        """Least loaded first; then the least over-qualified, keeping rarer capabilities free."""
        return min(
            candidates,
            key=lambda w: (w.busy / w.slots, len(w.capabilities - requirements), self._order.get(w.id, 0)),
        )

    def _assign(self, worker: Worker, ticket: str, queued_s: float) -> Lease:
        worker.busy += 1
        worker.sessions[ticket] = time.monotonic()
        return Lease(worker=worker, ticket=ticket, queued_s=queued_s)

    def _release(self, lease: Lease, record: bool) -> None:
        worker = lease.worker
        started = worker.sessions.pop(lease.ticket, None)
        if started is None:
            return  # already released
        if self._workers.get(worker.id) is worker:
            worker.busy = max(0, worker.busy - 1)
        if record:
            duration = time.monotonic() - started
            self.avg_session_s += EMA_ALPHA * (duration - self.avg_session_s)
        self._dispatch_next()

    def _abandon(self, entry: _Entry) -> None:
        """The waiter gave up (cancelled or timed out): leave the queue, return any lease."""
        fut = entry.future
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            # Assigned in the same instant the waiter went away: give the slot back.
            self._release(fut.result(), record=False)
            return
        fut.cancel()  # no-op when the cancelled task already cancelled it
        if self._queue.pop(entry.ticket, None) is not None:
            self._dispatch_next()

    def _dispatch_next(self) -> None:
        """Hand free slots to queued entries in FIFO order, then push status changes.

        The only place queued entries are assigned. Synchronous on purpose: nothing can
        interleave between choosing a worker and marking it busy.
        """
        now = time.monotonic()
        # Fast path: with every slot busy (the usual state while people queue) there is
        # nothing to assign, and scanning a thousand waiters on every join would cost O(n^2).
        free_slots = sum(w.slots - w.busy for w in self._workers.values() if w.available)
        for entry in list(self._queue.values()) if free_slots > 0 else ():
            if free_slots <= 0:
                break  # every free slot is taken: the rest keep their places
            if entry.future.done():  # cancelled waiter not yet cleaned up
                self._queue.pop(entry.ticket, None)
                continue
            if not self._can_ever_serve(entry.requirements):
                self._queue.pop(entry.ticket)
                entry.future.set_exception(
                    NoCapableWorkerError(
                        f"no worker offers {', '.join(sorted(entry.requirements)) or 'these capabilities'}"
                    )
                )
                continue
            free = [w for w in self._workers.values() if w.available and w.can_serve(entry.requirements)]
            if not free:
                continue
            self._queue.pop(entry.ticket)
            lease = self._assign(self._pick(free, entry.requirements), entry.ticket, now - entry.enqueued_at)
            free_slots -= 1
            entry.future.set_result(lease)
            if entry.on_assigned is not None:
                # Before anyone's position update: the head's "assigned" is the urgent message.
                try:
                    entry.on_assigned(lease)
                except Exception:
                    log.exception("assignment callback for %s failed", entry.ticket)
        self._schedule_status()

    def _schedule_status(self) -> None:
        """Push positions on the next loop pass: whoever was just assigned runs first, and a
        burst of changes costs one pass over the queue."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._push_status()
            return
        if not self._status_scheduled:
            self._status_scheduled = True
            loop.call_soon(self._scheduled_status)

    def _scheduled_status(self) -> None:
        self._status_scheduled = False
        self._push_status()

    def _push_status(self, lengths_too: bool = False) -> None:
        """Tell each waiter its new position at once; a queue length that merely grew behind it
        is coalesced into one update per ``length_update_s`` (else 1,000 people joining one by
        one would cost half a million messages)."""
        length = len(self._queue)
        stale_lengths = False
        slots: dict[frozenset[str], int] = {}  # capable healthy slots per requirement set, for ETAs
        for position, entry in enumerate(list(self._queue.values()), start=1):
            last = entry.last_sent
            if entry.on_status is None or last == (position, length):
                continue
            if last is not None and last[0] == position and not lengths_too:
                stale_lengths = True
                continue
            entry.last_sent = (position, length)
            if entry.requirements not in slots:
                slots[entry.requirements] = self._capable_slots(entry.requirements)
            status = QueueStatus(entry.ticket, position, length, self._eta(position, slots[entry.requirements]))
            try:
                entry.on_status(status)
            except Exception:
                log.exception("queue status callback for %s failed", entry.ticket)
        if stale_lengths and self._length_flush is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._length_flush = loop.call_later(self.length_update_s, self._flush_lengths)

    def _flush_lengths(self) -> None:
        self._length_flush = None
        self._push_status(lengths_too=True)

    def _capable_slots(self, requirements: frozenset[str]) -> int:
        return sum(
            w.slots for w in self._workers.values() if w.health == Health.HEALTHY and w.can_serve(requirements)
        )

    def _eta(self, position: int, capable_slots: int) -> float:
        return math.ceil(position / max(1, capable_slots)) * (self.eta_session_s or self.avg_session_s)
