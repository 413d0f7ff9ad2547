"""One FIFO queue and one set of slot leases shared by several gateways, kept in Redis.

Every decision that hands out a slot runs inside one Lua script (``_DISPATCH``), so Redis
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
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

_LIB = r"""
local p = KEYS[1]
local function split(s)
  local t = {}
  for x in string.gmatch(s or '', '[^,]+') do t[#t + 1] = x end
  return t
end
local function can_serve(caps, req)
  if req == nil or req == '' then return true end
  local have = {}
  for _, c in ipairs(split(caps)) do have[c] = true end
  for _, r in ipairs(split(req)) do if not have[r] then return false end end
  return true
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function release(ticket)
  local l = redis.call('HMGET', p .. ':lease:' .. ticket, 'worker', 'gateway')
  if not l[1] then return 0 end
  local key = p .. ':worker:' .. l[1]
  if redis.call('EXISTS', key) == 1 and tonumber(redis.call('HGET', key, 'busy') or '0') > 0 then
    redis.call('HINCRBY', key, 'busy', -1)
  end
  redis.call('DEL', p .. ':lease:' .. ticket)
  redis.call('SREM', p .. ':gw:' .. l[2] .. ':leases', ticket)
  redis.call('SREM', p .. ':wl:' .. l[1], ticket)
  return 1
end
local function leave_queue(ticket)
  local g = redis.call('HGET', p .. ':entry:' .. ticket, 'gateway')
  if redis.call('ZREM', p .. ':queue', ticket) == 0 then return 0 end
  redis.call('DEL', p .. ':entry:' .. ticket)
  if g then redis.call('SREM', p .. ':gw:' .. g .. ':queued', ticket) end
  return 1
end
local function dispatch()
  local assigned = {}
  local info, free = {}, 0
  local now = now_ms()
  for _, id in ipairs(redis.call('SMEMBERS', p .. ':workers')) do
    local w = redis.call('HMGET', p .. ':worker:' .. id, 'slots', 'busy', 'caps', 'health', 'order', 'hold_until')
    local slots, busy = tonumber(w[1]) or 0, tonumber(w[2]) or 0
    -- hold_until: just restored after Redis lost its data; every gateway re-asserts its leases first
    if w[4] == 'healthy' and busy < slots and (tonumber(w[6]) or 0) <= now then
      free = free + slots - busy
      info[#info + 1] = {id = id, slots = slots, busy = busy, caps = w[3] or '', ncaps = #split(w[3]),
                         order = tonumber(w[5]) or 0}
    end
  end
  if free == 0 then return assigned end
  -- The queue in chunks of 64: most dispatches need only its head. Assigned entries leave the
  -- ZSET, so the next chunk starts after the entries kept so far.
  local kept, idx = 0, 1
  local queue = redis.call('ZRANGE', p .. ':queue', 0, 63)
  while free > 0 and queue[idx] do
    local t = queue[idx]
    local e = redis.call('HMGET', p .. ':entry:' .. t, 'gateway', 'req', 'at')
    local best = nil
    for _, w in ipairs(info) do
      if w.busy < w.slots and can_serve(w.caps, e[2]) then
        -- least loaded, then least over-qualified (rarer capabilities stay free), then oldest
        local load, bload = w.busy / w.slots, best and best.busy / best.slots
        if best == nil or load < bload or (load == bload and (w.ncaps < best.ncaps or
            (w.ncaps == best.ncaps and w.order < best.order))) then
          best = w
        end
      end
    end
    if best then
      best.busy = best.busy + 1
      free = free - 1
      redis.call('HINCRBY', p .. ':worker:' .. best.id, 'busy', 1)
      leave_queue(t)
      redis.call('HSET', p .. ':lease:' .. t, 'worker', best.id, 'gateway', e[1], 'started', now,
                 'queued_ms', now - (tonumber(e[3]) or now))
      redis.call('SADD', p .. ':gw:' .. e[1] .. ':leases', t)
      redis.call('SADD', p .. ':wl:' .. best.id, t)
      redis.call('PUBLISH', p .. ':events', 'assigned ' .. e[1] .. ' ' .. t .. ' ' .. best.id)
      assigned[#assigned + 1] = t
    else
      kept = kept + 1
    end
    idx = idx + 1
    if idx > #queue and #queue == 64 then
      queue = redis.call('ZRANGE', p .. ':queue', kept, kept + 63)
      idx = 1
    end
  end
  if #assigned > 0 then redis.call('PUBLISH', p .. ':events', 'queue') end
  return assigned
end
"""

# ARGV: ticket, gateway, requirements, capacity. -> {"full"} | {"dup"} | {"lease", worker} | {"queued", place, length}
_ENQUEUE = _LIB + r"""
local ticket, gw, req, capacity = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if redis.call('EXISTS', p .. ':entry:' .. ticket) == 1 or redis.call('EXISTS', p .. ':lease:' .. ticket) == 1 then
  return {'dup'}
end
if redis.call('ZCARD', p .. ':queue') >= capacity then return {'full'} end
local place = redis.call('INCR', p .. ':seq')
redis.call('ZADD', p .. ':queue', place, ticket)
redis.call('HSET', p .. ':entry:' .. ticket, 'gateway', gw, 'req', req, 'at', now_ms())
redis.call('SADD', p .. ':gw:' .. gw .. ':queued', ticket)
dispatch()
local w = redis.call('HGET', p .. ':lease:' .. ticket, 'worker')
if w then return {'lease', w} end
redis.call('PUBLISH', p .. ':events', 'queue')
return {'queued', tostring(redis.call('ZRANK', p .. ':queue', ticket) + 1), tostring(redis.call('ZCARD', p .. ':queue'))}
"""

# ARGV: ticket. Leaves the queue, or gives the lease back. -> 'left' | 'released' | 'none'
_LEAVE = _LIB + r"""
local ticket = ARGV[1]
local what = 'none'
if leave_queue(ticket) == 1 then
  what = 'left'
  redis.call('PUBLISH', p .. ':events', 'queue')
elseif release(ticket) == 1 then
  what = 'released'
end
dispatch()
return what
"""

# ARGV: id, url, slots, caps, health. Adds or updates a worker (keeps its busy count).
_UPSERT_WORKER = _LIB + r"""
local id = ARGV[1]
local key = p .. ':worker:' .. id
if redis.call('SADD', p .. ':workers', id) == 1 then
  redis.call('HSET', key, 'busy', 0, 'order', redis.call('INCR', p .. ':worker_seq'))
end
redis.call('HSET', key, 'url', ARGV[2], 'slots', ARGV[3], 'caps', ARGV[4], 'health', ARGV[5])
dispatch()
return 1
"""

# ARGV: id, url, slots, caps. Registers a worker (health unknown until the prober says).
# -> {'added', id} | {'exists', id} (this url is registered already) | {'taken'} (id has another url)
_ADD_WORKER = _LIB + r"""
local id, url = ARGV[1], ARGV[2]
for _, other in ipairs(redis.call('SMEMBERS', p .. ':workers')) do
  if redis.call('HGET', p .. ':worker:' .. other, 'url') == url then return {'exists', other} end
end
if id == '' then
  repeat id = 'w' .. (redis.call('INCR', p .. ':worker_ids') - 1) until redis.call('SISMEMBER', p .. ':workers', id) == 0
elseif redis.call('SISMEMBER', p .. ':workers', id) == 1 then
  return {'taken'}
end
redis.call('SADD', p .. ':workers', id)
redis.call('HSET', p .. ':worker:' .. id, 'url', url, 'slots', ARGV[3], 'caps', ARGV[4], 'health', 'unknown',
           'busy', 0, 'failures', 0, 'order', redis.call('INCR', p .. ':worker_seq'))
redis.call('PUBLISH', p .. ':events', 'workers')
return {'added', id}
"""

# ARGV: id. Removes a worker; its leases stay until released (they free nothing then).
_REMOVE_WORKER = _LIB + r"""
redis.call('SREM', p .. ':workers', ARGV[1])
redis.call('DEL', p .. ':worker:' .. ARGV[1], p .. ':wl:' .. ARGV[1])
redis.call('PUBLISH', p .. ':events', 'workers')
return 1
"""

# The prober's view of one worker. ARGV: id, health, error, probe json, slots, caps, failures seen.
# A failure reported since (by any gateway) wins: -> {'failed', failures, error}; else {'ok'} | {'gone'}.
# Operator states (disabled, dead) are never overwritten here.
_PROBE = _LIB + r"""
local key = p .. ':worker:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return {'gone'} end
local w = redis.call('HMGET', key, 'failures', 'error', 'health', 'slots', 'caps')
if (tonumber(w[1]) or 0) > tonumber(ARGV[7]) then return {'failed', w[1], w[2] or ''} end
local changed = w[4] ~= ARGV[5] or w[5] ~= ARGV[6]
redis.call('HSET', key, 'error', ARGV[3], 'probe', ARGV[4], 'slots', ARGV[5], 'caps', ARGV[6])
if w[3] ~= 'disabled' and w[3] ~= 'dead' and w[3] ~= ARGV[2] then
  redis.call('HSET', key, 'health', ARGV[2])
  changed = true
end
if changed then redis.call('PUBLISH', p .. ':events', 'workers') end
dispatch()  -- also ends a restore's hold, and is the safety net for any event missed
return {'ok'}
"""

# A session saw the worker fail (any gateway). ARGV: id, reason.
_FAILURE = r"""
local key = KEYS[1] .. ':worker:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HINCRBY', key, 'failures', 1)
redis.call('HSET', key, 'error', ARGV[2])
local h = redis.call('HGET', key, 'health')
if h ~= 'disabled' and h ~= 'dead' then redis.call('HSET', key, 'health', 'unhealthy') end
redis.call('PUBLISH', KEYS[1] .. ':events', 'workers')
return 1
"""

# Operator state. ARGV: id, 'disabled' | 'dead' | 'enabled' (back to 'unknown' until the prober says).
_OPERATOR = _LIB + r"""
local key = p .. ':worker:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local h = redis.call('HGET', key, 'health')
if ARGV[2] == 'enabled' then
  if h == 'disabled' or h == 'dead' then redis.call('HSET', key, 'health', 'unknown') end
else
  redis.call('HSET', key, 'health', ARGV[2])
end
redis.call('PUBLISH', p .. ':events', 'workers')
dispatch()
return 1
"""

# After Redis lost its data: this gateway's workers and running leases come back. ARGV: gateway,
# hold_ms, nworkers, then id url slots caps health per worker, then ticket worker started per lease.
# Restored workers take no new session for hold_ms, so every gateway can re-assert its leases first.
_RESTORE = _LIB + r"""
local gw, hold, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local i = 4
for _ = 1, n do
  local id = ARGV[i]
  if redis.call('SADD', p .. ':workers', id) == 1 then
    redis.call('HSET', p .. ':worker:' .. id, 'url', ARGV[i + 1], 'slots', ARGV[i + 2], 'caps', ARGV[i + 3],
               'health', ARGV[i + 4], 'busy', 0, 'failures', 0, 'hold_until', now + hold,
               'order', redis.call('INCR', p .. ':worker_seq'))
  end
  i = i + 5
end
local restored = 0
while i <= #ARGV do
  local t, id = ARGV[i], ARGV[i + 1]
  if redis.call('EXISTS', p .. ':lease:' .. t) == 0 then
    redis.call('HSET', p .. ':lease:' .. t, 'worker', id, 'gateway', gw, 'started', ARGV[i + 2], 'queued_ms', 0)
    redis.call('SADD', p .. ':gw:' .. gw .. ':leases', t)
    redis.call('SADD', p .. ':wl:' .. id, t)
    if redis.call('EXISTS', p .. ':worker:' .. id) == 1 then redis.call('HINCRBY', p .. ':worker:' .. id, 'busy', 1) end
    restored = restored + 1
  end
  i = i + 3
end
redis.call('PUBLISH', p .. ':events', 'workers')
return restored
"""

# One finished session into the shared average behind ETAs. ARGV: seconds, alpha, default.
_RECORD = r"""
local key = KEYS[1] .. ':stats'
local avg = tonumber(redis.call('HGET', key, 'avg_session_s') or ARGV[3])
avg = avg + tonumber(ARGV[2]) * (tonumber(ARGV[1]) - avg)
redis.call('HSET', key, 'avg_session_s', tostring(avg))
return tostring(avg)
"""

# One gateway at a time probes the workers. ARGV: gateway, ttl_ms. -> 1 if it is that gateway.
_PROBER = r"""
local key = KEYS[1] .. ':prober'
if redis.call('SET', key, ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then return 1 end
if redis.call('GET', key) == ARGV[1] then
  redis.call('PEXPIRE', key, tonumber(ARGV[2]))
  return 1
end
return 0
"""

# ARGV: gateway, ttl_ms. The gateway is alive for ttl_ms more.
_HEARTBEAT = r"""
local p = KEYS[1]
redis.call('SADD', p .. ':gateways', ARGV[1])
redis.call('SET', p .. ':gw:' .. ARGV[1] .. ':alive', '1', 'PX', tonumber(ARGV[2]))
return 1
"""

# Gateways whose heartbeat expired lose their leases and their queue entries. -> reaped ids
_REAP = _LIB + r"""
local reaped = {}
for _, g in ipairs(redis.call('SMEMBERS', p .. ':gateways')) do
  if redis.call('EXISTS', p .. ':gw:' .. g .. ':alive') == 0 then
    for _, t in ipairs(redis.call('SMEMBERS', p .. ':gw:' .. g .. ':leases')) do release(t) end
    for _, t in ipairs(redis.call('SMEMBERS', p .. ':gw:' .. g .. ':queued')) do leave_queue(t) end
    redis.call('DEL', p .. ':gw:' .. g .. ':leases', p .. ':gw:' .. g .. ':queued')
    redis.call('HDEL', p .. ':live', g)
    redis.call('SREM', p .. ':gateways', g)
    reaped[#reaped + 1] = g
  end
end
if #reaped > 0 then
  redis.call('PUBLISH', p .. ':events', 'queue')
  dispatch()
end
return reaped
"""


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


class QueueFull(Exception):
    """The shared queue holds ``capacity`` entries."""


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
        self._scripts = {name: client.register_script(src) for name, src in (
            ("enqueue", _ENQUEUE), ("leave", _LEAVE), ("upsert", _UPSERT_WORKER), ("remove", _REMOVE_WORKER),
            ("heartbeat", _HEARTBEAT), ("reap", _REAP), ("add", _ADD_WORKER), ("probe", _PROBE),
            ("failure", _FAILURE), ("operator", _OPERATOR), ("restore", _RESTORE), ("record", _RECORD),
            ("prober", _PROBER))}
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
                raise QueueFull(f"the queue is full ({self.capacity} waiting)")
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
