"""SharedPool: the gateway's pool (``SessionQueue``) when several gateways share one queue
through Redis. The in-memory ``WorkerPool`` is the other implementation; neither subclasses the
other, and the FIFO cases in ``tests/e2e/test_queue_cases.py`` hold both to one behaviour.

The queue, the slot leases, the worker registry (capabilities, health, operator states) and
the ETA statistics live in Redis (``redis_queue.py``); this gateway keeps a mirror of the
registry (a ``WorkerRegistry``, like the in-memory pool's own), refreshed every second and at
once when any gateway announces a change, so the pages, ``/health``, metrics and ETAs read it
without a round trip.

Health: one gateway at a time (the *prober*, elected by a Redis key that expires) runs its
probes' state machine and writes each worker's health; every other gateway only mirrors it. A
session that sees a worker fail marks it unhealthy from any gateway, and the prober's next write
takes that failure into its own state machine (``PROBE`` refuses to overwrite it).

Redis away: running sessions go on (their relays do not touch Redis); their releases wait in
``releases`` (``releases.py``) and are given back when Redis returns. New requests get ``ClusterUnavailable``.
If Redis comes back empty, every gateway restores the workers it knows and re-asserts the
leases of its running sessions before any slot is handed out again (``RESTORE``'s hold).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable

from gateway.pool.model import (
    CANCELLED_BY_OPERATOR,
    Health,
    Lease,
    QueueCancelledError,
    QueueStatus,
    Worker,
    eta_s,
    no_capable_worker,
    pool_snapshot,
    queue_full,
    wait_timed_out,
)
from gateway.pool.redis_queue import (
    ClusterUnavailable,
    QueueFull,
    RedisQueue,
    now_ms,
    redacted_url,
    redis_client,
    redis_reachable,
)
from gateway.pool.registry import WorkerRegistry
from gateway.pool.releases import Releases

log = logging.getLogger(__name__)

SYNC_S = 1.0  # mirror refresh, prober renewal, live-session publication
RESTORE_HOLD_MS = 2500  # > 2 sync rounds: every gateway re-asserts its leases within it
QUEUE_VIEW_S = 10.0  # fetch the queue's entries only while someone looked at them lately


class SharedPool:
    """``SessionQueue`` over the shared state in Redis."""

    def __init__(self, redis_url: str, *, prefix: str, lease_ttl_s: float, gateway_id: str,
                 capacity: int, max_wait_s: float, default_session_s: float, healthy_after: int,
                 unhealthy_after: int) -> None:
        self.capacity = capacity
        self.max_wait_s = max_wait_s
        self.registry = WorkerRegistry(healthy_after, unhealthy_after)  # the mirror
        self.avg_session_s = self.default_session_s = float(default_session_s)
        self.eta_session_s: float | None = None
        self.local_sessions: Callable[[], list[dict]] = list  # the app's
        self.end_local: Callable[[str, str], bool] = lambda session, reason: False
        self.worker_headers: dict[str, str] = {}
        self.redis_url = redis_url
        client = redis_client(redis_url)
        self.shared = RedisQueue(client, gateway_id, prefix, lease_ttl_s, capacity)
        self.shared.on_event = self._on_event
        self.gateway_id: str | None = self.shared.gateway_id
        self.prefix = prefix
        self.cluster_error: str | None = "connecting to Redis"
        self.is_prober = False
        self.gateways: list[str] = []
        self._configured: list[tuple[str, int]] = []
        self._seen_failures: dict[str, int] = {}
        self._mine: dict[str, tuple[str, int]] = {}  # running lease ticket -> (worker id, started ms)
        self._acquiring: dict[str, frozenset[str]] = {}  # in acquire (queued, or leased a moment ago)
        self.releases = Releases(self.shared, self.default_session_s, self._set_error)
        self._sync_wake = asyncio.Event()
        self._queue_view: list[dict] = []
        self._queue_len = 0
        self._queue_view_wanted = 0.0
        self.remote_sessions: list[dict] = []
        self._epoch: str | None = None
        self._tasks: list[asyncio.Task] = []
        self._closing = False  # the loops also stop on it: a cancellation inside redis-py can be lost
        self._spawned: set[asyncio.Task] = set()
        self._adopting = 0  # resumes taking over a lease now: its ticket is not "unclaimed" meanwhile
        self.on_adopted: Callable[[str], None] = lambda ticket: None  # another gateway took a lease of ours

    @property
    def healthy_after(self) -> int:
        return self.registry.healthy_after

    # ------------------------------------------------------------------ life cycle

    def configure_workers(self, urls: list[str], slots: int) -> None:
        """Workers from this gateway's config: registered in the shared registry once connected."""
        self._configured = [(url.rstrip("/"), slots) for url in urls]

    async def start(self) -> None:
        self._closing = False
        self._tasks = [asyncio.create_task(self._run(), name="shared-pool"),
                       asyncio.create_task(self.releases.run(), name="shared-pool-releases")]

    async def close(self) -> None:
        """Stop; slots still held or waiting to be given back are returned if Redis listens."""
        self._closing = True
        self.releases.stop()
        self._sync_wake.set()
        tasks, self._tasks = self._tasks + list(self._spawned), []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        with contextlib.suppress(Exception):
            for ticket in self.releases.tickets() + list(self._mine):
                await asyncio.wait_for(self.shared.call("leave", ticket, self.gateway_id), 1.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.shared.redis.hdel(f"{self.prefix}:live", self.gateway_id), 1.0)
        await self.shared.close()
        with contextlib.suppress(Exception):
            await self.shared.redis.aclose()

    async def flush(self) -> None:
        """Wait for this gateway's writes so far (spawned, releases pending) to reach Redis, then
        refresh the mirror."""
        while self._spawned or self.releases:
            await asyncio.gather(*list(self._spawned), return_exceptions=True)
            if self.releases:
                await asyncio.sleep(0.01)
        await self._sync()

    async def _run(self) -> None:
        """Connect (retrying while Redis is away), register the configured workers, then keep
        the mirror fresh."""
        while not self._closing:
            try:
                await self.shared.start()
                for url, slots in self._configured:
                    with contextlib.suppress(ValueError):  # taken: that id serves another url
                        await self._add(url, None, slots)
                break
            except ClusterUnavailable as exc:
                self._set_error(str(exc))
                await self.shared.close()
                await asyncio.sleep(SYNC_S)
        while not self._closing:
            try:
                await self._sync()
                self._set_error(None)
            except ClusterUnavailable as exc:
                self._set_error(str(exc))
            except Exception as exc:
                log.exception("shared pool sync failed")
                self._set_error(f"shared state unreadable: {exc}")
            self._sync_wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sync_wake.wait(), SYNC_S)

    def _set_error(self, error: str | None) -> None:
        if error != self.cluster_error:
            if error:
                log.warning("cluster: %s", error)
            else:
                log.info("cluster: Redis reachable at %s (gateway %s)", self.redis_url, self.gateway_id)
            self.cluster_error = error

    def _spawn(self, coro) -> None:
        """A Redis write from a synchronous caller; failures are logged (the sync repairs)."""
        async def guarded():
            try:
                await coro
            except ClusterUnavailable as exc:
                self._set_error(str(exc))
            except Exception:
                log.exception("cluster write failed")
        task = asyncio.create_task(guarded())
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    # ------------------------------------------------------------------ the mirror

    async def _sync(self) -> None:
        p, r = self.prefix, self.shared.redis
        with redis_reachable():
            self.is_prober = bool(await self.shared.call("prober", self.gateway_id,
                                                         int(self.shared.lease_ttl_s * 1000)))
            for _ in range(2):
                async with r.pipeline(transaction=False) as pipe:
                    pipe.get(f"{p}:epoch")
                    pipe.smembers(f"{p}:workers")
                    pipe.hgetall(f"{p}:stats")
                    pipe.zcard(f"{p}:queue")
                    pipe.hgetall(f"{p}:live")
                    pipe.smembers(f"{p}:gateways")
                    pipe.hset(f"{p}:live", self.gateway_id, json.dumps(self.local_sessions()))
                    pipe.smembers(f"{p}:gw:{self.gateway_id}:leases")
                    epoch, ids, stats, qlen, live, gateways, _, held = await pipe.execute()
                epoch = epoch.decode() if epoch else None
                if epoch is not None and epoch == self._epoch:
                    break
                await self._restore(epoch)  # first contact, or Redis lost its data
            if self._mine:  # a lease reaped meanwhile (Redis back from an outage) is counted again
                await self._assert_leases(with_workers=False)
            for ticket in held if not self._adopting else ():  # one Redis kept that no session here holds goes back
                self._unclaimed(ticket.decode())
            ids = sorted(i.decode() for i in ids)
            async with r.pipeline(transaction=False) as pipe:
                for wid in ids:
                    pipe.hgetall(f"{p}:worker:{wid}")
                    pipe.smembers(f"{p}:wl:{wid}")
                rows = await pipe.execute()
            queue_view = None
            if time.monotonic() - self._queue_view_wanted < QUEUE_VIEW_S:
                queue_view = await self.shared.entries()
        self._queue_len = int(qlen)
        if queue_view is not None:
            self._queue_view = queue_view
        self.gateways = sorted(g.decode() for g in gateways)
        self._mirror_stats({k.decode(): v.decode() for k, v in stats.items()})
        self._mirror_workers(ids, rows)
        self._fail_hopeless()
        self.remote_sessions = [
            {**s, "gateway": g.decode()} for g, blob in live.items() if g.decode() != self.gateway_id
            for s in json.loads(blob)]

    def _mirror_stats(self, stats: dict[str, str]) -> None:
        with contextlib.suppress(ValueError):
            self.avg_session_s = float(stats.get("avg_session_s", self.default_session_s))
        if "eta_session_s" in stats:
            value = stats["eta_session_s"]
            self.eta_session_s = None if value == "none" else float(value)

    def _mirror_workers(self, ids: list[str], rows: list) -> None:
        now_mono, now_wall = time.monotonic(), now_ms()
        registry = self.registry
        for wid in [w for w in registry.ids() if w not in ids]:
            registry.remove(wid)
        for i, wid in enumerate(ids):
            h = {k.decode(): v.decode() for k, v in rows[2 * i].items()}
            if not h.get("url"):
                continue  # removed between the two reads
            worker = registry.find(wid) or Worker(id=wid, url=h["url"])
            registry.put(worker, int(h.get("order") or 0))
            worker.url = h["url"]
            worker.slots = int(h.get("slots") or 1)
            worker.busy = int(h.get("busy") or 0)
            worker.capabilities = frozenset(c for c in h.get("caps", "").split(",") if c)
            worker.failures_total = int(h.get("failures") or 0)
            with contextlib.suppress(ValueError):
                worker.last_probe = json.loads(h["probe"]) if h.get("probe") else worker.last_probe
            leases = {t.decode() for t in rows[2 * i + 1]}
            for t in [t for t in worker.sessions if t not in leases]:
                del worker.sessions[t]
            for t in leases - set(worker.sessions):
                started = self._mine.get(t, (wid, now_wall))[1]
                worker.sessions[t] = now_mono - max(0, now_wall - started) / 1000
            shared = Health(h.get("health", "unknown"))
            if not self.is_prober:
                worker.health, worker.last_error = shared, h.get("error") or None
            elif shared in (Health.DISABLED, Health.DEAD):
                worker.health = shared  # an operator acted on some gateway
            elif worker.health in (Health.DISABLED, Health.DEAD):
                registry.set_disabled(worker, False)  # enabled on some gateway: probes decide again
            seen = self._seen_failures.setdefault(wid, worker.failures_total)
            if self.is_prober and worker.failures_total > seen:
                self._seen_failures[wid] = worker.failures_total
                registry.report_failure(wid, h.get("error") or "a session saw it fail")

    def _fail_hopeless(self) -> None:
        """Waiters here that no worker can ever serve now (removed, dead, capabilities reported)
        leave the queue with NoCapableWorkerError, as in the in-memory pool."""
        for ticket, requirements in list(self._acquiring.items()):
            if not self.registry.can_ever_serve(requirements):
                self.shared.fail(ticket, no_capable_worker(requirements))

    async def _restore(self, epoch: str | None) -> None:
        """Redis is new to us (first contact) or lost its data: put back what this gateway
        knows, under a hold so every gateway's leases are counted before any dispatch."""
        r = self.shared.redis
        if epoch is None:
            await r.set(f"{self.prefix}:epoch", uuid.uuid4().hex, nx=True)
            epoch = (await r.get(f"{self.prefix}:epoch")).decode()
        lost = self._epoch is not None
        restored = await self._assert_leases(with_workers=True, hold_ms=RESTORE_HOLD_MS if lost else 0)
        if lost:
            log.warning("cluster: Redis lost its data; restored %d workers and %d running sessions",
                        len(self.registry.ids()), restored)
            await self.shared.heartbeat()
        self._epoch = epoch

    async def _assert_leases(self, *, with_workers: bool, hold_ms: int = 0) -> int:
        """This gateway's running leases (and, after a loss, its workers) into Redis, where missing."""
        workers = self.registry.workers() if with_workers else []
        args: list = [self.gateway_id, hold_ms, len(workers)]
        for w in workers:
            args += [w.id, w.url, w.slots, ",".join(sorted(w.capabilities)), w.health.value]
        for ticket, (wid, started) in self._mine.items():
            args += [ticket, wid, started]
        return int(await self.shared.call("restore", *args))

    def _on_event(self, kind: str, args: list[str]) -> None:
        if kind == "workers":
            self._sync_wake.set()
        elif kind == "cancel" and args:
            reason = args[1] if len(args) > 1 else CANCELLED_BY_OPERATOR
            self.shared.fail(args[0], QueueCancelledError(reason))
        elif kind == "unclaimed" and args:
            self._unclaimed(args[0])
        elif kind == "adopted" and len(args) == 2 and args[0] == self.gateway_id:
            self._forget(args[1])
            self.on_adopted(args[1])
        elif kind == "end" and args:
            self.end_local(args[0], args[1] if len(args) > 1 else "ended by the operator")

    def _unclaimed(self, ticket: str) -> None:
        """A lease or queue entry of this gateway that no session here holds: give it back."""
        if ticket in self._mine or ticket in self._acquiring or ticket in self.releases.tickets():
            return
        self.releases.put(ticket)

    # ------------------------------------------------------------------ queue

    @property
    def queue_length(self) -> int:
        return self._queue_len

    async def acquire(self, requirements: frozenset[str] = frozenset(), ticket: str | None = None,
                      on_status: Callable[[QueueStatus], None] | None = None,
                      on_assigned: Callable[[Lease], None] | None = None) -> Lease:
        requirements = frozenset(requirements)
        ticket = ticket or uuid.uuid4().hex
        if not self.registry.can_ever_serve(requirements):
            raise no_capable_worker(requirements)
        started = time.monotonic()

        def on_place(place: int, length: int) -> None:
            self._queue_len = length
            if on_status is not None:
                slots = self.registry.capable_slots(requirements)
                on_status(QueueStatus(ticket, place, length, eta_s(place, slots, self.eta_session_s or self.avg_session_s)))

        self._acquiring[ticket] = requirements  # until _mine holds it: a lease for it is never "unclaimed"
        try:
            shared = await asyncio.wait_for(self.shared.acquire(requirements, ticket, on_place), self.max_wait_s)
        except TimeoutError:
            raise wait_timed_out(self.max_wait_s) from None
        except QueueFull as exc:
            raise queue_full(exc.waiting) from None
        except ClusterUnavailable as exc:
            self._set_error(str(exc))
            raise
        finally:
            self._acquiring.pop(ticket, None)
        self._mine[ticket] = (shared.worker_id, now_ms())
        worker = self.registry.find(shared.worker_id)
        if worker is None:  # registered a moment ago on another gateway: mirror it now
            with contextlib.suppress(Exception):
                await self._sync()
            worker = self.registry.find(shared.worker_id)
        if worker is None:
            self._mine.pop(ticket, None)
            self.releases.put(ticket)
            raise ClusterUnavailable(f"worker {shared.worker_id} left the shared registry")
        worker.sessions[ticket] = time.monotonic()
        lease = Lease(worker=worker, ticket=ticket, queued_s=time.monotonic() - started)
        if on_assigned is not None:
            on_assigned(lease)
        return lease

    def release(self, lease: Lease, *, record: bool = True) -> None:
        """Give the slot back; while Redis is away it waits in ``releases`` (nothing leaks)."""
        mine = self._mine.pop(lease.ticket, None)
        if mine is None:
            return  # already released
        lease.worker.sessions.pop(lease.ticket, None)
        self.releases.put(lease.ticket, (now_ms() - mine[1]) / 1000 if record else None)

    def _forget(self, ticket: str) -> None:
        """A lease of ours that another gateway took over: no longer ours to hold or release."""
        mine = self._mine.pop(ticket, None)
        worker = self.registry.find(mine[0]) if mine is not None else None
        if worker is not None:
            worker.sessions.pop(ticket, None)

    # ------------------------------------------------------------------ resumable sessions (issue 72)

    async def share_resumable(self, lease: Lease, digest: str, session_id: str, owner: str | None,
                              grace_s: float) -> None:
        """Any gateway may now bring back this session with its token (``adopt_resumable``); if
        this gateway dies, the reaper holds its slot for the grace period instead of freeing it."""
        await self.shared.call("resumable", lease.ticket, digest, session_id, owner or "", int(grace_s * 1000),
                               self.gateway_id)

    async def adopt_resumable(self, digest: str, owner: str | None) -> tuple[Lease, str] | str | None:
        """The lease and session id of the resumable session with token hash ``digest``, taken
        over from the gateway that had it (dead or not); ``invalid`` or ``expired`` if none."""
        self._adopting += 1
        try:
            answer = await self.shared.call("adopt", digest, owner or "", self.gateway_id)
            if answer[0] != "ok":
                return answer[0]
            session_id, ticket, worker_id, started = answer[1:5]
            self._mine[ticket] = (worker_id, int(started))
        finally:
            self._adopting -= 1
        worker = self.registry.find(worker_id)
        if worker is None:
            with contextlib.suppress(Exception):
                await self._sync()
            worker = self.registry.find(worker_id)
        if worker is None:  # its worker left the registry: nothing to bring back
            self.release(Lease(worker=Worker(id=worker_id, url=""), ticket=ticket, queued_s=0.0), record=False)
            return "expired"
        worker.sessions[ticket] = time.monotonic()
        return Lease(worker=worker, ticket=ticket, queued_s=0.0), session_id

    def cancel(self, ticket: str, reason: str = CANCELLED_BY_OPERATOR) -> bool:
        """A waiter on this gateway leaves the queue with QueueCancelledError (see admin_cancel)."""
        return self.shared.fail(ticket, QueueCancelledError(reason))

    def set_eta_session_s(self, seconds: float | None) -> None:
        """This gateway's setting at start; ``admin_set_eta`` sets it for all of them."""
        self.eta_session_s = seconds

    # ------------------------------------------------------------------ workers and health

    def get_worker(self, worker_id: str) -> Worker | None:
        return self.registry.find(worker_id)

    def workers(self) -> list[Worker]:
        return self.registry.workers()

    def update_health(self, worker_id: str, ok: bool, info: dict | None = None, error: str | None = None,
                      *, failure: bool = True) -> None:
        """Probe results count only on the prober, which writes the outcome for every gateway."""
        if not self.is_prober:
            return
        worker = self.registry.update_health(worker_id, ok, info, error, failure=failure)
        if worker is not None:
            self._spawn(self._push(worker))

    async def _push(self, worker: Worker) -> None:
        health = worker.health if worker.health not in (Health.DISABLED, Health.DEAD) else Health.UNKNOWN
        answer = await self.shared.call(
            "probe", worker.id, health.value, worker.last_error or "", json.dumps(worker.last_probe or {}),
            worker.slots, ",".join(sorted(worker.capabilities)), self._seen_failures.get(worker.id, 0))
        if answer[0] == "failed":  # a session failed on it since: the state machine hears it first
            self._seen_failures[worker.id] = int(answer[1])
            self.registry.report_failure(worker.id, answer[2] or "a session saw it fail")
            await self._push(worker)

    def report_failure(self, worker_id: str, reason: str) -> None:
        self.registry.report_failure(worker_id, reason)
        self._spawn(self.shared.call("failure", worker_id, reason))

    # ------------------------------------------------------------------ operator actions

    async def _add(self, url: str, worker_id: str | None, slots: int) -> Worker:
        answer = await self.shared.call("add", worker_id or "", url.rstrip("/"), slots, "")
        if answer[0] == "taken":
            raise ValueError(f"worker id {worker_id} already registered")
        if answer[0] == "exists" and worker_id is not None:
            raise ValueError(f"worker with url {url.rstrip('/')} already registered (as {answer[1]})")
        await self._sync()
        worker = self.registry.find(answer[1])
        if worker is None:
            raise ClusterUnavailable(f"worker {answer[1]} vanished from the shared registry")
        return worker

    async def admin_add_worker(self, url: str, worker_id: str | None = None, slots: int = 1) -> Worker:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        if any(w.url == url.rstrip("/") for w in self.registry.workers()):
            raise ValueError(f"worker with url {url.rstrip('/')} already registered")
        return await self._add(url, worker_id, slots)

    async def admin_remove_worker(self, worker_id: str) -> None:
        self.registry.get(worker_id)
        await self.shared.call("remove", worker_id)
        await self._sync()

    async def admin_set_disabled(self, worker_id: str, disabled: bool) -> None:
        self.registry.get(worker_id)
        await self.shared.call("operator", worker_id, "disabled" if disabled else "enabled")
        await self._sync()

    async def admin_mark_dead(self, worker_id: str) -> None:
        self.registry.get(worker_id)
        await self.shared.call("operator", worker_id, "dead")
        await self._sync()

    async def admin_cancel(self, ticket: str, reason: str = CANCELLED_BY_OPERATOR) -> bool:
        if self.cancel(ticket, reason):
            return True
        with redis_reachable():
            if await self.shared.redis.zscore(f"{self.prefix}:queue", ticket) is None:
                return False
        await self.shared.publish("cancel", ticket, reason)  # its gateway tells the client why
        await self.shared.call("leave", ticket)
        return True

    async def admin_end_remote(self, session: str, reason: str) -> dict | None:
        """End a session that runs on another gateway; None if no gateway lists it."""
        found = next((s for s in self.remote_sessions if session in (s.get("ticket"), s.get("session_id"))), None)
        if found is not None:
            await self.shared.publish("end", found["ticket"], reason)
        return found

    async def admin_set_eta(self, seconds: float | None) -> None:
        self.eta_session_s = seconds
        with redis_reachable():
            await self.shared.redis.hset(f"{self.prefix}:stats", "eta_session_s",
                                         "none" if seconds is None else str(seconds))

    # ------------------------------------------------------------------ introspection

    def snapshot(self, with_queue: bool = True) -> dict:
        if with_queue:  # the entries are read from Redis while someone looks at them
            self._queue_view_wanted = time.monotonic()
        return pool_snapshot(self.registry.workers(), list(self._queue_view), self._queue_len, self.avg_session_s)

    def cluster_health(self) -> dict:
        return {"redis": redacted_url(self.redis_url), "prefix": self.prefix, "gateway_id": self.gateway_id,
                "ok": self.cluster_error is None, "error": self.cluster_error, "prober": self.is_prober,
                "gateways": self.gateways, "releases_pending": len(self.releases)}

