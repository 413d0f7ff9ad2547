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

The workers, their health state machine and the choice of a worker are ``WorkerRegistry``'s
(``registry.py``); this pool owns one and dispatches after each change. It implements
``SessionQueue`` (``interface.py``), as the Redis-backed ``SharedPool`` does.

Health is driven from outside: ``HealthChecker`` (gateway/pool/health_checker.py) calls ``update_health``;
relay code calls ``report_failure`` when a session sees a worker fail. Operator states
``DISABLED`` (drain) and ``DEAD`` are never overridden by probes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.pool.model import (
    CANCELLED_BY_OPERATOR,
    LENGTH_UPDATE_S,
    Health,
    Lease,
    QueueCancelledError,
    QueueStatus,
    Worker,
    eta_s,
    moving_average,
    no_capable_worker,
    pool_snapshot,
    queue_full,
    wait_timed_out,
)
from gateway.pool.registry import WorkerRegistry

log = logging.getLogger(__name__)


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
        self.registry = WorkerRegistry(healthy_after, unhealthy_after)
        self.avg_session_s = float(default_session_s)
        self.eta_session_s: float | None = None  # operator's fixed session length for ETAs (admin)
        self._queue: OrderedDict[str, _Entry] = OrderedDict()
        self.length_update_s = LENGTH_UPDATE_S
        self._length_flush: asyncio.TimerHandle | None = None
        self._status_scheduled = False
        self.gateway_id: str | None = None  # set where several gateways share the pool
        self.remote_sessions: list[dict] = []  # other gateways' live sessions (shared pool only)
        self.local_sessions: Callable[[], list[dict]] = list  # the app's, for the shared pool
        self.on_adopted: Callable[[str], None] = lambda ticket: None  # never called: no other gateway
        self.end_local: Callable[[str, str], bool] = lambda session, reason: False
        # What every call to a worker carries (the deployment's worker secret; set by the app).
        self.worker_headers: dict[str, str] = {}

    @property
    def healthy_after(self) -> int:
        return self.registry.healthy_after

    @property
    def unhealthy_after(self) -> int:
        return self.registry.unhealthy_after

    # ------------------------------------------------------------------ workers

    def add_worker(
        self,
        url: str,
        worker_id: str | None = None,
        slots: int = 1,
        capabilities: frozenset[str] | None = None,
    ) -> Worker:
        """Register a worker in UNKNOWN state; probes admit it. Duplicate url or id -> ValueError."""
        worker = self.registry.add(url, worker_id, slots, capabilities)
        self._workers_changed()
        return worker

    def remove_worker(self, worker_id: str) -> None:
        """Forget a worker. Leases already out stay valid; releasing them frees nothing here."""
        worker = self.registry.remove(worker_id)
        log.info("worker %s removed (%d sessions still running)", worker_id, worker.busy)
        # Queued entries that only this worker could serve must now fail, not wait forever.
        self._workers_changed()

    def set_disabled(self, worker_id: str, disabled: bool) -> None:
        """Drain (disabled=True) or re-enable a worker (``WorkerRegistry.set_disabled``)."""
        self.registry.set_disabled(self.registry.get(worker_id), disabled)
        self._workers_changed()

    def mark_dead(self, worker_id: str) -> None:
        """Operator state: never assigned again; probes never override (``set_disabled(id, False)`` revives)."""
        self.registry.set_health(self.registry.get(worker_id), Health.DEAD, "marked dead by operator")
        self._workers_changed()

    def get_worker(self, worker_id: str) -> Worker | None:
        return self.registry.find(worker_id)

    def workers(self) -> list[Worker]:
        return self.registry.workers()

    # ------------------------------------------------------------------ health

    def report_failure(self, worker_id: str, reason: str) -> None:
        """A session saw the worker fail: stop assigning to it now; only probes bring it back."""
        self.registry.report_failure(worker_id, reason)

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
        if self.registry.update_health(worker_id, ok, info, error, failure=failure) is not None:
            # Capabilities/slots may have changed and the worker may have turned healthy.
            self._workers_changed()

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
        if ticket in self._queue or any(ticket in w.sessions for w in self.registry.workers()):
            raise ValueError(f"ticket {ticket} already in use")
        if not self.registry.can_ever_serve(requirements):
            raise no_capable_worker(requirements)

        # Immediate assignment, unless an earlier waiter could use the same worker.
        free = [
            w
            for w in self.registry.free_for(requirements)
            if not any(w.can_serve(e.requirements) for e in self._queue.values())
        ]
        if free:
            return self._assign(self.registry.pick(free, requirements), ticket, 0.0)

        if len(self._queue) >= self.capacity:
            raise queue_full(len(self._queue))

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
        entry.future.set_exception(wait_timed_out(self.max_wait_s))
        self._dispatch_next()

    def cancel(self, ticket: str, reason: str = CANCELLED_BY_OPERATOR) -> bool:
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

    async def share_resumable(self, lease: Lease, digest: str, session_id: str, owner: str | None,
                              grace_s: float) -> None:
        """One gateway: its own ``ResumableSessions`` is where a session is brought back."""

    async def adopt_resumable(self, digest: str, owner: str | None) -> tuple[Lease, str] | str | None:
        """None: no other gateway to take a session over from."""
        return None

    # ------------------------------------------------------------------ operator actions
    # What the admin API awaits. Here they act at once; the shared pool (gateway/pool/shared_pool.py) acts in
    # Redis, so an action on any gateway reaches all of them.

    async def start(self) -> None:
        """Nothing to connect to in-process (the shared pool connects to Redis here)."""

    async def close(self) -> None:
        pass

    async def flush(self) -> None:
        """Nothing is written elsewhere; woken waiters get a few loop passes to run."""
        for _ in range(5):
            await asyncio.sleep(0)

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

    async def admin_cancel(self, ticket: str, reason: str = CANCELLED_BY_OPERATOR) -> bool:
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
        queue = [
            {"ticket": e.ticket, "position": i, "requirements": sorted(e.requirements),
             "waited_s": round(now - e.enqueued_at, 3)}
            for i, e in enumerate(self._queue.values(), start=1)
        ]
        return pool_snapshot(self.registry.workers(), queue, len(self._queue), self.avg_session_s)

    # ------------------------------------------------------------------ internals

    def _assign(self, worker: Worker, ticket: str, queued_s: float) -> Lease:
        worker.busy += 1
        worker.sessions[ticket] = time.monotonic()
        return Lease(worker=worker, ticket=ticket, queued_s=queued_s)

    def _release(self, lease: Lease, record: bool) -> None:
        worker = lease.worker
        started = worker.sessions.pop(lease.ticket, None)
        if started is None:
            return  # already released
        if self.registry.holds(worker):
            worker.busy = max(0, worker.busy - 1)
        if record:
            self.avg_session_s = moving_average(self.avg_session_s, time.monotonic() - started)
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

    def _workers_changed(self) -> None:
        """After any change to the registry: waiters no worker can ever serve now fail (a worker
        removed or dead, capabilities reported), then free slots are handed out."""
        hopeless: dict[frozenset[str], bool] = {}
        for entry in list(self._queue.values()):
            if entry.requirements not in hopeless:
                hopeless[entry.requirements] = not self.registry.can_ever_serve(entry.requirements)
            if hopeless[entry.requirements] and not entry.future.done():
                self._queue.pop(entry.ticket)
                entry.future.set_exception(no_capable_worker(entry.requirements))
        self._dispatch_next()

    def _dispatch_next(self) -> None:
        """Hand free slots to queued entries in FIFO order, then push status changes.

        The only place queued entries are assigned. Synchronous on purpose: nothing can
        interleave between choosing a worker and marking it busy.
        """
        now = time.monotonic()
        # Fast path: with every slot busy (the usual state while people queue) there is
        # nothing to assign, and scanning a thousand waiters on every join would cost O(n^2).
        free_slots = self.registry.free_slots()
        for entry in list(self._queue.values()) if free_slots > 0 else ():
            if free_slots <= 0:
                break  # every free slot is taken: the rest keep their places
            if entry.future.done():  # cancelled waiter not yet cleaned up
                self._queue.pop(entry.ticket, None)
                continue
            free = self.registry.free_for(entry.requirements)
            if not free:
                continue
            self._queue.pop(entry.ticket)
            lease = self._assign(self.registry.pick(free, entry.requirements), entry.ticket, now - entry.enqueued_at)
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
                slots[entry.requirements] = self.registry.capable_slots(entry.requirements)
            eta = eta_s(position, slots[entry.requirements], self.eta_session_s or self.avg_session_s)
            status = QueueStatus(entry.ticket, position, length, eta)
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
