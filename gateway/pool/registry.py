"""WorkerRegistry: the workers a pool knows, their health state machine and the choice of a
worker for a request. The in-memory pool owns one; the shared pool keeps one as its mirror of
the registry in Redis (and, on the gateway that probes, runs its health state machine).

Health (seeds/002): ``ok`` probes count toward ``healthy_after``, failed probes toward
``unhealthy_after``; operator states ``DISABLED`` (drain) and ``DEAD`` are never overridden by
probes. It never dispatches: the pool that owns it does, after each change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gateway.pool.model import Health, Worker

log = logging.getLogger(__name__)


class WorkerRegistry:
    def __init__(self, healthy_after: int = 2, unhealthy_after: int = 3) -> None:
        self.healthy_after = healthy_after
        self.unhealthy_after = unhealthy_after
        self._workers: dict[str, Worker] = {}
        self._order: dict[str, int] = {}  # worker id -> insertion order, for stable tie-breaks
        self._added = 0
        self._next_id = 0

    # ------------------------------------------------------------------ membership

    def add(self, url: str, worker_id: str | None = None, slots: int = 1,
            capabilities: frozenset[str] | None = None) -> Worker:
        """Register a worker in UNKNOWN state. Duplicate url or id, or slots < 1 -> ValueError."""
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
        self.put(worker, self._added)
        log.info("worker %s added at %s", worker_id, url)
        return worker

    def put(self, worker: Worker, order: int) -> None:
        """Insert or replace ``worker`` with its place in tie-breaks (the mirror copies Redis's)."""
        self._workers[worker.id] = worker
        self._order[worker.id] = order
        self._added = max(self._added, order + 1)

    def remove(self, worker_id: str) -> Worker:
        worker = self.get(worker_id)
        del self._workers[worker_id]
        self._order.pop(worker_id, None)
        return worker

    def get(self, worker_id: str) -> Worker:
        try:
            return self._workers[worker_id]
        except KeyError:
            raise KeyError(f"unknown worker {worker_id}") from None

    def find(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)

    def holds(self, worker: Worker) -> bool:
        """Whether ``worker`` (this very record) is still registered."""
        return self._workers.get(worker.id) is worker

    def workers(self) -> list[Worker]:
        return list(self._workers.values())

    def ids(self) -> list[str]:
        return list(self._workers)

    # ------------------------------------------------------------------ health

    def set_health(self, worker: Worker, health: Health, why: str) -> None:
        if worker.health != health:
            level = logging.INFO if health in (Health.HEALTHY, Health.DISABLED) else logging.WARNING
            log.log(level, "worker %s: %s -> %s (%s)", worker.id, worker.health.value, health.value, why)
            worker.health = health

    def set_disabled(self, worker: Worker, disabled: bool) -> None:
        """Drain, or give back to the probes: HEALTHY at once if its ok streak meets
        ``healthy_after`` (probes run while disabled), UNHEALTHY if its fail streak meets
        ``unhealthy_after``, otherwise UNKNOWN until probes decide."""
        if disabled:
            if worker.health != Health.DISABLED:
                self.set_health(worker, Health.DISABLED, "disabled by operator")
        elif worker.health in (Health.DISABLED, Health.DEAD):
            if worker.ok_streak >= self.healthy_after:
                new = Health.HEALTHY
            elif worker.fail_streak >= self.unhealthy_after:
                new = Health.UNHEALTHY
            else:
                new = Health.UNKNOWN
            self.set_health(worker, new, "enabled by operator")

    def report_failure(self, worker_id: str, reason: str) -> Worker | None:
        """A session saw the worker fail: not assignable until probes bring it back."""
        worker = self._workers.get(worker_id)
        if worker is None:
            return None
        worker.ok_streak = 0
        worker.fail_streak += 1
        worker.failures_total += 1
        worker.last_error = reason
        if worker.health not in (Health.DEAD, Health.DISABLED, Health.UNHEALTHY):
            self.set_health(worker, Health.UNHEALTHY, reason)
        return worker

    def update_health(self, worker_id: str, ok: bool, info: dict | None = None, error: str | None = None,
                      *, failure: bool = True) -> Worker | None:
        """One probe result (see the pools' ``update_health``); None for an unknown id."""
        worker = self._workers.get(worker_id)
        if worker is None:
            return None
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
                self.set_health(worker, Health.HEALTHY, "probes ok")
        elif failure:
            worker.ok_streak = 0
            worker.fail_streak += 1
            worker.failures_total += 1
            worker.last_error = error
            if not operator and worker.health != Health.UNHEALTHY and worker.fail_streak >= self.unhealthy_after:
                self.set_health(worker, Health.UNHEALTHY, error or "probes failing")
        else:
            worker.ok_streak = 0
            worker.last_error = error
            if not operator and worker.health != Health.UNKNOWN:
                self.set_health(worker, Health.UNKNOWN, error or "not ready")
        return worker

    # ------------------------------------------------------------------ choosing

    def can_ever_serve(self, requirements: frozenset[str]) -> bool:
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

    def free_for(self, requirements: frozenset[str]) -> list[Worker]:
        """Available (healthy, a slot free) workers that meet ``requirements``."""
        return [w for w in self._workers.values() if w.available and w.can_serve(requirements)]

    def free_slots(self) -> int:
        return sum(w.slots - w.busy for w in self._workers.values() if w.available)

    def capable_slots(self, requirements: frozenset[str]) -> int:
        """Slots of HEALTHY workers that meet ``requirements`` (what an ETA divides by)."""
        return sum(
            w.slots for w in self._workers.values() if w.health == Health.HEALTHY and w.can_serve(requirements)
        )

    def pick(self, candidates: Iterable[Worker], requirements: frozenset[str]) -> Worker:
        """Least loaded first; then the least over-qualified, keeping rarer capabilities free;
        then the oldest. ``_LIB``'s ``dispatch`` in ``redis_scripts.py`` picks the same way."""
        return min(
            candidates,
            key=lambda w: (w.busy / w.slots, len(w.capabilities - requirements), self._order.get(w.id, 0)),
        )
