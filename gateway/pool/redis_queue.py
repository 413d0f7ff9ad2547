"""One FIFO queue and one set of slot leases shared by several gateways, kept in Redis.

Every decision that hands out a slot runs inside one Lua script (``redis_scripts.py``), so Redis
executes it atomically: a slot is never given twice, and the head of the queue is served first
whichever gateway it waits on. Enqueue, release, leave, worker changes and the reaping of dead
gateways all end by dispatching, so there is one dispatch point per event, wherever it happens.

Keys (under ``prefix``):

* ``seq``: a counter giving each entry its place; ``queue``: ZSET ticket -> place;
  ``entry:<ticket>``: HASH gateway, req (sorted comma list), at (ms);
* ``workers``: SET of ids; ``worker:<id>``: HASH url, slots, busy, caps, health, order;
* ``lease:<ticket>``: HASH worker, gateway, started, queued_ms;
* ``gateways``: SET of ids; ``gw:<id>:alive`` (expires unless the gateway renews it);
  ``gw:<id>:leases`` and ``gw:<id>:queued``: SETs of tickets;
* channel ``events``: ``assigned <gateway> <ticket> <worker>`` per assignment, ``queue`` when
  places moved.

The gateway uses it through ``gateway/pool/shared_pool.py`` when ``cluster.redis_url`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gateway.pool.redis_scripts import SCRIPTS

log = logging.getLogger(__name__)


def _decoded(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


@contextlib.contextmanager
def redis_reachable() -> Iterator[None]:
    """Redis connection failures, as the one error callers handle."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise ClusterUnavailable(f"the shared queue's Redis is unreachable ({exc})") from None


REDIS_CONNECTIONS = 32  # per gateway; each call holds one for well under a millisecond


def redis_client(url: str):
    """An asyncio Redis client whose pool makes callers wait for a connection: a thousand
    clients joining at once queue for Redis instead of failing with "Too many connections".

    A command that meets a connection error is sent once more on a fresh connection: after a
    Redis restart the pool still holds sockets to the old process, and the first command on
    each failed with "Connection closed by server" (a 503 for that user) although Redis was
    back. Timeouts are not retried: the command may have run."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import ConstantBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    return aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
        url, max_connections=REDIS_CONNECTIONS, timeout=10, socket_timeout=2.0, socket_connect_timeout=2.0,
        retry=Retry(ConstantBackoff(0.05), 1), retry_on_error=[RedisConnectionError]))


def now_ms() -> int:
    return int(time.time() * 1000)


def redacted_url(url: str) -> str:
    """The URL without a password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


class QueueFull(Exception):
    """The shared queue holds ``capacity`` entries (``waiting``) and no free worker serves this one."""

    def __init__(self, waiting: int) -> None:
        super().__init__(f"the queue is full ({waiting} waiting)")
        self.waiting = waiting


class ClusterUnavailable(Exception):
    """Redis cannot be reached: no new session can be queued or assigned until it is back."""


@dataclass(frozen=True)
class SharedLease:
    ticket: str
    worker_id: str


class RedisQueue:
    """One gateway's view of the shared queue. ``start()`` before use, ``close()`` after.

    The gateway renews its heartbeat every ``lease_ttl_s / 3``; if it stops (killed), any
    gateway's reaper frees its slots and drops its queue entries within ``lease_ttl_s``.
    """

    def __init__(self, client, gateway_id: str | None = None, prefix: str = "omniduplex",
                 lease_ttl_s: float = 10.0, capacity: int = 1000) -> None:
        self.redis = client
        self.gateway_id = gateway_id or uuid.uuid4().hex[:12]
        self.prefix = prefix
        self.lease_ttl_s = lease_ttl_s
        self.capacity = capacity
        self._scripts = {name: client.register_script(src) for name, src in SCRIPTS.items()}
        # Events other than assignments and queue moves (workers, cancel, end) go to this hook, and
        # "unclaimed <ticket>": a slot given to a ticket of ours that nobody here waits for.
        self.on_event: Callable[[str, list[str]], None] | None = None
        self._waiters: dict[str, tuple[asyncio.Future, Callable[[int, int], None] | None]] = {}
        self._places: dict[str, tuple[int, int]] = {}
        self._tasks: list[asyncio.Task] = []
        # Set by close(): the background loops also stop on it, because a cancellation that lands
        # inside a redis-py command does not always come out as CancelledError (1 close in ~15
        # hung in the tests: the heartbeat loop, marked cancelling, asleep for its next beat).
        self._closing = False
        self._places_stale = asyncio.Event()  # a queue move to tell this gateway's waiters
        self._queued: set[str] = set()  # waiters whose entry is in Redis (enqueue answered)
        self._pubsub = None

    async def _run(self, name: str, *args) -> object:
        with redis_reachable():
            return await self._scripts[name](keys=[self.prefix], args=list(args))

    async def call(self, name: str, *args) -> object:
        """Run one of the scripts above by name (``add``, ``probe``, ...), answers decoded."""
        return _decoded(await self._run(name, *args))

    async def publish(self, *words: str) -> None:
        with redis_reachable():
            await self.redis.publish(f"{self.prefix}:events", " ".join(words))

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        self._closing = False
        await self.heartbeat()
        self._pubsub = self.redis.pubsub()
        await self._pubsub.subscribe(f"{self.prefix}:events")
        self._tasks = [asyncio.create_task(self._listen(), name="redis-queue-events"),
                       asyncio.create_task(self._tell_places(), name="redis-queue-places"),
                       asyncio.create_task(self._check_waiters(), name="redis-queue-check"),
                       asyncio.create_task(self._keep_alive(), name="redis-queue-heartbeat")]

    async def close(self) -> None:
        """Stop beating and listening (idempotent). Leases are not given back: a gateway that
        closes with sessions running leaves them to the reaper, as a killed one would."""
        self._closing = True
        self._places_stale.set()  # wakes the places loop to see it
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        # A loop whose cancellation was lost ends at its next turn (its sleep: at most 1 s); the
        # listener's at the latest when its subscription closes below.
        pending = (await asyncio.wait(tasks, timeout=2.0))[1] if tasks else set()
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), 2.0)
        if pending and (await asyncio.wait(pending, timeout=2.0))[1]:
            log.warning("redis queue: background tasks still running after close: %s",
                        [t.get_name() for t in pending if not t.done()])

    async def heartbeat(self) -> None:
        await self._run("heartbeat", self.gateway_id, int(self.lease_ttl_s * 1000))

    async def reap(self) -> list[str]:
        return [g.decode() if isinstance(g, bytes) else g for g in await self._run("reap")]

    async def _keep_alive(self) -> None:
        """Beat every ttl/3 and reap gateways that stopped. After an outage, reaping waits one
        lease time: every gateway's beat lapsed meanwhile, and the live ones beat again first."""
        quiet_until = 0.0
        loop = asyncio.get_running_loop()
        while not self._closing:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                await self.heartbeat()
                if loop.time() >= quiet_until:
                    await self.reap()
            except Exception as exc:  # Redis away: the next beat tries again
                log.warning("redis heartbeat failed: %s", exc)
                quiet_until = loop.time() + self.lease_ttl_s + self.lease_ttl_s / 3

    # ------------------------------------------------------------------ workers

    async def upsert_worker(self, worker_id: str, url: str, slots: int, capabilities: frozenset[str],
                            health: str) -> None:
        await self._run("upsert", worker_id, url, slots, ",".join(sorted(capabilities)), health)

    async def remove_worker(self, worker_id: str) -> None:
        await self._run("remove", worker_id)

    async def busy(self, worker_id: str) -> int:
        return int(await self.redis.hget(f"{self.prefix}:worker:{worker_id}", "busy") or 0)

    # ------------------------------------------------------------------ queue

    async def acquire(self, requirements: frozenset[str] = frozenset(), ticket: str | None = None,
                      on_place: Callable[[int, int], None] | None = None) -> SharedLease:
        """A slot for ``ticket``, waiting in the shared FIFO if none is free; ``on_place(place,
        queue_length)`` hears each move. Cancelling the caller leaves the queue (or gives back a
        lease granted in that instant). An entry that vanished (Redis lost its data, or this
        gateway was taken for dead) raises ClusterUnavailable."""
        ticket = ticket or uuid.uuid4().hex
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[ticket] = (future, on_place)
        enqueued = False
        try:
            kind, *rest = [x.decode() if isinstance(x, bytes) else x for x in await self._run(
                "enqueue", ticket, self.gateway_id, ",".join(sorted(requirements)), self.capacity)]
            if kind == "full":
                raise QueueFull(int(rest[0]))
            if kind == "dup":
                raise ValueError(f"ticket {ticket} already in use")
            enqueued = True
            if kind == "lease":
                return SharedLease(ticket, rest[0])
            self._place(ticket, int(rest[0]), int(rest[1]))
            self._queued.add(ticket)  # in Redis now: from here on _check_waiters may look for it
            # The event is the fast path; _check_waiters covers a message lost on the way.
            return await future
        except BaseException:
            if enqueued:  # leave the queue, or give back a lease granted in this same instant
                try:
                    await asyncio.shield(self._run("leave", ticket))
                except Exception:  # Redis away: the owner retries, or the entry is reaped with us
                    if self.on_event is not None:
                        self.on_event("unclaimed", [ticket])
            raise
        finally:
            self._queued.discard(ticket)
            self._waiters.pop(ticket, None)
            self._places.pop(ticket, None)

    async def _check_waiters(self) -> None:
        """Once a second, every waiter here at once (one round trip, not one per waiter): a
        lease whose event was lost is taken; an entry that vanished (Redis lost its data, or
        this gateway was taken for dead) and Redis out of reach end the wait with
        ClusterUnavailable."""
        while not self._closing:
            await asyncio.sleep(1.0)
            tickets = [t for t in self._queued if not self._waiters[t][0].done()]
            if not tickets:
                continue
            try:
                with redis_reachable():
                    async with self.redis.pipeline(transaction=True) as pipe:
                        pipe.zmscore(f"{self.prefix}:queue", tickets)
                        for t in tickets:
                            pipe.hget(f"{self.prefix}:lease:{t}", "worker")
                        scores, *workers = await pipe.execute()
            except ClusterUnavailable as exc:
                failed = exc
                for t in tickets:
                    self.fail(t, ClusterUnavailable(str(failed)))
                continue
            for t, score, worker in zip(tickets, scores, workers, strict=True):
                waiter = self._waiters.get(t)
                if waiter is None or waiter[0].done():
                    continue
                if worker is not None:
                    waiter[0].set_result(SharedLease(t, worker.decode() if isinstance(worker, bytes) else worker))
                elif score is None:
                    waiter[0].set_exception(ClusterUnavailable(
                        "the shared queue lost this request (its Redis restarted empty, or this gateway "
                        "missed its heartbeats); please reconnect"))

    def fail(self, ticket: str, exc: BaseException) -> bool:
        """End a waiter here with ``exc`` (its acquire leaves the queue); False if none waits."""
        waiter = self._waiters.get(ticket)
        if waiter is None or waiter[0].done():
            return False
        waiter[0].set_exception(exc)
        return True

    async def entries(self) -> list[dict]:
        """The queue's entries in order, as ``snapshot()`` shows them."""
        p, r = self.prefix, self.redis
        tickets = [t.decode() for t in await r.zrange(f"{p}:queue", 0, -1)]
        async with r.pipeline(transaction=False) as pipe:
            for t in tickets:
                pipe.hmget(f"{p}:entry:{t}", "gateway", "req", "at")
            entries = await pipe.execute()
        now = now_ms()
        return [{"ticket": t, "position": i, "gateway": (g or b"").decode(),
                 "requirements": sorted(x for x in (req or b"").decode().split(",") if x),
                 "waited_s": round((now - int(at or now)) / 1000, 3)}
                for i, (t, (g, req, at)) in enumerate(zip(tickets, entries, strict=True), start=1)]

    async def release(self, lease: SharedLease) -> None:
        await self._run("leave", lease.ticket)

    async def queue_length(self) -> int:
        return int(await self.redis.zcard(f"{self.prefix}:queue"))

    def _place(self, ticket: str, place: int, length: int) -> None:
        waiter = self._waiters.get(ticket)
        if waiter is None or self._places.get(ticket) == (place, length):
            return
        self._places[ticket] = (place, length)
        if waiter[1] is not None:
            waiter[1](place, length)

    async def _listen(self) -> None:
        """Assignments and queue moves from every gateway; resubscribes after Redis comes back
        (a message missed meanwhile is caught by the waiters' own check)."""
        channel = f"{self.prefix}:events"
        while not self._closing:
            try:
                if not self._pubsub.subscribed:
                    await self._pubsub.subscribe(channel)
                async for message in self._pubsub.listen():
                    if message.get("type") == "message":
                        data = message["data"]
                        self._on_event(data.decode() if isinstance(data, bytes) else data)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("redis events: %s; resubscribing", exc)
                with contextlib.suppress(Exception):
                    await self._pubsub.aclose()
                self._pubsub = self.redis.pubsub()
            await asyncio.sleep(0.5)  # listen() ends at once when not subscribed: never spin

    async def _tell_places(self) -> None:
        """Each waiter's place after queue moves: one read of all of them per burst of moves
        (a thousand joins cost a few reads, not a thousand), run apart from the listener."""
        while not self._closing:
            await self._places_stale.wait()
            self._places_stale.clear()
            if not any(cb is not None and not f.done() for f, cb in self._waiters.values()):
                continue
            try:  # one read of the whole queue is far cheaper for Redis than a rank per waiter
                queue = await self.redis.zrange(f"{self.prefix}:queue", 0, -1)
            except Exception as exc:  # Redis away: the waiters' own checks report it
                log.warning("redis queue places: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for place, raw in enumerate(queue, start=1):
                ticket = raw.decode() if isinstance(raw, bytes) else raw
                if ticket in self._waiters:
                    self._place(ticket, place, len(queue))

    def _on_event(self, data: str) -> None:
        parts = data.split()
        if not parts:
            return
        if parts[0] == "assigned" and len(parts) == 4:
            if parts[1] == self.gateway_id:
                waiter = self._waiters.get(parts[2])
                if waiter is not None and not waiter[0].done():
                    waiter[0].set_result(SharedLease(parts[2], parts[3]))
                elif waiter is None and self.on_event is not None:
                    self.on_event("unclaimed", [parts[2]])  # nobody waits for it: the owner decides
        elif parts[0] == "queue":
            self._places_stale.set()  # told by _tell_places, so assignments never wait behind it
        elif self.on_event is not None:
            try:
                self.on_event(parts[0], data.split(maxsplit=2)[1:])
            except Exception:
                log.exception("redis event %r", data[:200])
