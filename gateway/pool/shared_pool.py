"""SharedPool: the gateway's WorkerPool when several gateways share one queue through Redis.

The queue, the slot leases, the worker registry (capabilities, health, operator states) and
the ETA statistics live in Redis (``redis_queue.py``); this gateway keeps a mirror of the
registry, refreshed every second and at once when any gateway announces a change, so the pages,
``/health``, metrics and ETAs read it without a round trip. The rest of the gateway sees the
same interface as the in-process ``WorkerPool``.

Health: one gateway at a time (the *prober*, elected by a Redis key that expires) runs its
probes' state machine and writes each worker's health; every other gateway only mirrors it. A
session that sees a worker fail marks it unhealthy from any gateway, and the prober's next write
takes that failure into its own state machine (``_PROBE`` refuses to overwrite it).

Redis away: running sessions go on (their relays do not touch Redis); their releases wait in
``_pending`` and are given back when Redis returns. New requests get ``ClusterUnavailable``.
If Redis comes back empty, every gateway restores the workers it knows and re-asserts the
leases of its running sessions before any slot is handed out again (``_RESTORE``'s hold).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable

from gateway.pool.redis_queue import ClusterUnavailable, QueueFull, RedisQueue, redis_client, redis_reachable
from gateway.pool.worker_pool import (
    EMA_ALPHA,
    Health,
    Lease,
    NoCapableWorkerError,
    QueueCancelledError,
    QueueFullError,
    QueueStatus,
    QueueTimeoutError,
    Worker,
    WorkerPool,
)

log = logging.getLogger(__name__)

SYNC_S = 1.0  # mirror refresh, prober renewal, live-session publication
RESTORE_HOLD_MS = 2500  # > 2 sync rounds: every gateway re-asserts its leases within it
QUEUE_VIEW_S = 10.0  # fetch the queue's entries only while someone looked at them lately


def _ms() -> int:
    return int(time.time() * 1000)


class SharedPool(WorkerPool):
    """The in-process pool's interface over the shared state in Redis."""

    def __init__(self, redis_url: str, *, prefix: str, lease_ttl_s: float, gateway_id: str,
                 capacity: int, max_wait_s: float, default_session_s: float, healthy_after: int,
                 unhealthy_after: int) -> None:
        super().__init__(capacity, max_wait_s, default_session_s, healthy_after, unhealthy_after)
        self.redis_url = redis_url
        self.default_session_s = float(default_session_s)
        client = redis_client(redis_url)
        self.shared = RedisQueue(client, gateway_id, prefix, lease_ttl_s, capacity)
        self.shared.on_event = self._on_event
        self.gateway_id = self.shared.gateway_id
        self.prefix = prefix
        self.cluster_error: str | None = "connecting to Redis"
        self.is_prober = False
        self.gateways: list[str] = []
        self._configured: list[tuple[str, int]] = []
        self._seen_failures: dict[str, int] = {}
        self._mine: dict[str, tuple[str, int]] = {}  # running lease ticket -> (worker id, started ms)
        self._acquiring: set[str] = set()  # tickets in acquire (queued, or leased a moment ago)
        self._pending: collections.deque[tuple[str, float | None]] = collections.deque()
        self._pending_wake = asyncio.Event()
        self._sync_wake = asyncio.Event()
        self._queue_view: list[dict] = []
        self._queue_len = 0
        self._queue_view_wanted = 0.0
        self.remote_sessions: list[dict] = []
        self._epoch: str | None = None
        self._tasks: list[asyncio.Task] = []
        self._spawned: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ life cycle

    def configure_workers(self, urls: list[str], slots: int) -> None:
        """Workers from this gateway's config: registered in the shared registry once connected."""
        self._configured = [(url.rstrip("/"), slots) for url in urls]

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name="shared-pool"),
                       asyncio.create_task(self._give_back(), name="shared-pool-releases")]

    async def close(self) -> None:
        """Stop; slots still held or waiting to be given back are returned if Redis listens."""
        tasks, self._tasks = self._tasks + list(self._spawned), []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            for ticket in [t for t, _ in self._pending] + list(self._mine):
                await asyncio.wait_for(self.shared.call("leave", ticket), 1.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.shared.redis.hdel(f"{self.prefix}:live", self.gateway_id), 1.0)
        await self.shared.close()
        with contextlib.suppress(Exception):
            await self.shared.redis.aclose()

    async def _run(self) -> None:
        """Connect (retrying while Redis is away), register the configured workers, then keep
        the mirror fresh."""
        while True:
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
        while True:
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
            for ticket in held:  # and one Redis kept that no session here holds goes back
                self._unclaimed(ticket.decode())
            ids = sorted(i.decode() for i in ids)
            async with r.pipeline(transaction=False) as pipe:
                for wid in ids:
                    pipe.hgetall(f"{p}:worker:{wid}")
                    pipe.smembers(f"{p}:wl:{wid}")
                rows = await pipe.execute()
            queue_view = None
            if time.monotonic() - self._queue_view_wanted < QUEUE_VIEW_S:
                queue_view = await self._read_queue()
        self._queue_len = int(qlen)
        if queue_view is not None:
            self._queue_view = queue_view
        self.gateways = sorted(g.decode() for g in gateways)
        self._mirror_stats({k.decode(): v.decode() for k, v in stats.items()})
        self._mirror_workers(ids, rows)
        self.remote_sessions = [
            {**s, "gateway": g.decode()} for g, blob in live.items() if g.decode() != self.gateway_id
            for s in json.loads(blob)]

    async def _read_queue(self) -> list[dict]:
        p, r = self.prefix, self.shared.redis
        tickets = [t.decode() for t in await r.zrange(f"{p}:queue", 0, -1)]
        async with r.pipeline(transaction=False) as pipe:
            for t in tickets:
                pipe.hmget(f"{p}:entry:{t}", "gateway", "req", "at")
            entries = await pipe.execute()
        now = _ms()
        return [{"ticket": t, "position": i, "gateway": (g or b"").decode(),
                 "requirements": sorted(x for x in (req or b"").decode().split(",") if x),
                 "waited_s": round((now - int(at or now)) / 1000, 3)}
                for i, (t, (g, req, at)) in enumerate(zip(tickets, entries, strict=True), start=1)]

    def _mirror_stats(self, stats: dict[str, str]) -> None:
        with contextlib.suppress(ValueError):
            self.avg_session_s = float(stats.get("avg_session_s", self.default_session_s))
        if "eta_session_s" in stats:
            value = stats["eta_session_s"]
            self.eta_session_s = None if value == "none" else float(value)

    def _mirror_workers(self, ids: list[str], rows: list) -> None:
        now_mono, now_ms = time.monotonic(), _ms()
        for wid in [w for w in self._workers if w not in ids]:
            del self._workers[wid]
            self._order.pop(wid, None)
        for i, wid in enumerate(ids):
            h = {k.decode(): v.decode() for k, v in rows[2 * i].items()}
            if not h.get("url"):
                continue  # removed between the two reads
            worker = self._workers.get(wid)
            if worker is None:
                worker = Worker(id=wid, url=h["url"])
                self._workers[wid] = worker
            self._order[wid] = int(h.get("order") or 0)
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
                started = self._mine.get(t, (wid, now_ms))[1]
                worker.sessions[t] = now_mono - max(0, now_ms - started) / 1000
            shared = Health(h.get("health", "unknown"))
            if not self.is_prober:
                worker.health, worker.last_error = shared, h.get("error") or None
            elif shared in (Health.DISABLED, Health.DEAD):
                worker.health = shared  # an operator acted on some gateway
            elif worker.health in (Health.DISABLED, Health.DEAD):
                super().set_disabled(wid, False)  # enabled on some gateway: probes decide again
            seen = self._seen_failures.setdefault(wid, worker.failures_total)
            if self.is_prober and worker.failures_total > seen:
                self._seen_failures[wid] = worker.failures_total
                super().report_failure(wid, h.get("error") or "a session saw it fail")

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
                        len(self._workers), restored)
            await self.shared.heartbeat()
        self._epoch = epoch

    async def _assert_leases(self, *, with_workers: bool, hold_ms: int = 0) -> int:
        """This gateway's running leases (and, after a loss, its workers) into Redis, where missing."""
        workers = list(self._workers.values()) if with_workers else []
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
            reason = args[1] if len(args) > 1 else "removed from the queue by the operator"
            self.shared.fail(args[0], QueueCancelledError(reason))
        elif kind == "unclaimed" and args:
            self._unclaimed(args[0])
        elif kind == "end" and args:
            self.end_local(args[0], args[1] if len(args) > 1 else "ended by the operator")

    def _unclaimed(self, ticket: str) -> None:
        """A lease or queue entry of this gateway that no session here holds: give it back."""
        if ticket in self._mine or ticket in self._acquiring or any(t == ticket for t, _ in self._pending):
            return
        self._pending.append((ticket, None))
        self._pending_wake.set()

    # ------------------------------------------------------------------ queue

    @property
    def queue_length(self) -> int:
        return self._queue_len

    async def acquire(self, requirements: frozenset[str] = frozenset(), ticket: str | None = None,
                      on_status: Callable[[QueueStatus], None] | None = None,
                      on_assigned: Callable[[Lease], None] | None = None) -> Lease:
        requirements = frozenset(requirements)
        ticket = ticket or uuid.uuid4().hex
        if not self._can_ever_serve(requirements):
            raise NoCapableWorkerError(
                f"no worker offers {', '.join(sorted(requirements)) or 'these capabilities'}")
        started = time.monotonic()

        def on_place(place: int, length: int) -> None:
            self._queue_len = length
            if on_status is not None:
                on_status(QueueStatus(ticket, place, length, self._eta(place, self._capable_slots(requirements))))

        self._acquiring.add(ticket)  # until _mine holds it: a lease for it is never "unclaimed"
        try:
            shared = await asyncio.wait_for(self.shared.acquire(requirements, ticket, on_place), self.max_wait_s)
        except TimeoutError:
            raise QueueTimeoutError(f"No worker became free within {self.max_wait_s:.0f} s.") from None
        except QueueFull as exc:
            raise QueueFullError(f"The queue is full ({exc}); please try again later.") from None
        except ClusterUnavailable as exc:
            self._set_error(str(exc))
            raise
        finally:
            self._acquiring.discard(ticket)
        self._mine[ticket] = (shared.worker_id, _ms())
        worker = self._workers.get(shared.worker_id)
        if worker is None:  # registered a moment ago on another gateway: mirror it now
            with contextlib.suppress(Exception):
                await self._sync()
            worker = self._workers.get(shared.worker_id)
        if worker is None:
            self._mine.pop(ticket, None)
            self._pending.append((ticket, None))
            self._pending_wake.set()
            raise ClusterUnavailable(f"worker {shared.worker_id} left the shared registry")
        worker.sessions[ticket] = time.monotonic()
        lease = Lease(worker=worker, ticket=ticket, queued_s=time.monotonic() - started)
        if on_assigned is not None:
            on_assigned(lease)
        return lease

    def release(self, lease: Lease, *, record: bool = True) -> None:
        """Give the slot back; while Redis is away it waits in ``_pending`` (nothing leaks)."""
        mine = self._mine.pop(lease.ticket, None)
        if mine is None:
            return  # already released
        lease.worker.sessions.pop(lease.ticket, None)
        self._pending.append((lease.ticket, (_ms() - mine[1]) / 1000 if record else None))
        self._pending_wake.set()

    async def _give_back(self) -> None:
        while True:
            await self._pending_wake.wait()
            self._pending_wake.clear()
            while self._pending:
                ticket, duration = self._pending[0]
                try:
                    await self.shared.call("leave", ticket)
                    if duration is not None:
                        await self.shared.call("record", duration, EMA_ALPHA, self.default_session_s)
                except ClusterUnavailable as exc:
                    self._set_error(str(exc))
                    await asyncio.sleep(SYNC_S)
                    continue
                self._pending.popleft()

    def cancel(self, ticket: str, reason: str = "removed from the queue by the operator") -> bool:
        """A waiter on this gateway leaves the queue with QueueCancelledError (see admin_cancel)."""
        return self.shared.fail(ticket, QueueCancelledError(reason))

    def _dispatch_next(self) -> None:
        """Dispatch happens in Redis (``_LIB``'s ``dispatch``), never here."""

    # ------------------------------------------------------------------ health

    def update_health(self, worker_id: str, ok: bool, info: dict | None = None, error: str | None = None,
                      *, failure: bool = True) -> None:
        """Probe results count only on the prober, which writes the outcome for every gateway."""
        worker = self._workers.get(worker_id)
        if worker is None or not self.is_prober:
            return
        super().update_health(worker_id, ok, info, error, failure=failure)
        self._spawn(self._push(worker))

    async def _push(self, worker: Worker) -> None:
        health = worker.health if worker.health not in (Health.DISABLED, Health.DEAD) else Health.UNKNOWN
        answer = await self.shared.call(
            "probe", worker.id, health.value, worker.last_error or "", json.dumps(worker.last_probe or {}),
            worker.slots, ",".join(sorted(worker.capabilities)), self._seen_failures.get(worker.id, 0))
        if answer[0] == "failed":  # a session failed on it since: the state machine hears it first
            self._seen_failures[worker.id] = int(answer[1])
            super().report_failure(worker.id, answer[2] or "a session saw it fail")
            await self._push(worker)

    def report_failure(self, worker_id: str, reason: str) -> None:
        super().report_failure(worker_id, reason)
        self._spawn(self.shared.call("failure", worker_id, reason))

    # ------------------------------------------------------------------ operator actions

    async def _add(self, url: str, worker_id: str | None, slots: int) -> Worker:
        answer = await self.shared.call("add", worker_id or "", url.rstrip("/"), slots, "")
        if answer[0] == "taken":
            raise ValueError(f"worker id {worker_id} already registered")
        if answer[0] == "exists" and worker_id is not None:
            raise ValueError(f"worker with url {url.rstrip('/')} already registered (as {answer[1]})")
        await self._sync()
        worker = self._workers.get(answer[1])
        if worker is None:
            raise ClusterUnavailable(f"worker {answer[1]} vanished from the shared registry")
        return worker

    async def admin_add_worker(self, url: str, worker_id: str | None = None, slots: int = 1) -> Worker:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        if any(w.url == url.rstrip("/") for w in self._workers.values()):
            raise ValueError(f"worker with url {url.rstrip('/')} already registered")
        return await self._add(url, worker_id, slots)

    async def admin_remove_worker(self, worker_id: str) -> None:
        self._get(worker_id)
        await self.shared.call("remove", worker_id)
        await self._sync()

    async def admin_set_disabled(self, worker_id: str, disabled: bool) -> None:
        self._get(worker_id)
        await self.shared.call("operator", worker_id, "disabled" if disabled else "enabled")
        await self._sync()

    async def admin_mark_dead(self, worker_id: str) -> None:
        self._get(worker_id)
        await self.shared.call("operator", worker_id, "dead")
        await self._sync()

    async def admin_cancel(self, ticket: str, reason: str = "removed from the queue by the operator") -> bool:
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
        WorkerPool.set_eta_session_s(self, seconds)
        with redis_reachable():
            await self.shared.redis.hset(f"{self.prefix}:stats", "eta_session_s",
                                         "none" if seconds is None else str(seconds))

    # ------------------------------------------------------------------ introspection

    def snapshot(self, with_queue: bool = True) -> dict:
        if with_queue:  # the entries are read from Redis while someone looks at them
            self._queue_view_wanted = time.monotonic()
        snap = super().snapshot()
        snap["queue"] = list(self._queue_view)
        snap["queue_length"] = self._queue_len
        return snap

    def cluster_health(self) -> dict:
        return {"redis": _redacted(self.redis_url), "prefix": self.prefix, "gateway_id": self.gateway_id,
                "ok": self.cluster_error is None, "error": self.cluster_error, "prober": self.is_prober,
                "gateways": self.gateways, "releases_pending": len(self._pending)}


def _redacted(url: str) -> str:
    """The URL without a password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url

