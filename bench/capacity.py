"""Gateway capacity: 1,000 queued WebSocket clients, and dispatch latency.

    python -m bench capacity [--clients 1000] [--hold 10] [--gateways 1] [--json]

Real gateway and worker processes. One client holds the only worker; N more connect at once
and queue. Reported: time until every client has its first ``queue.position``; the gateway's
RSS and CPU (share of one core) while it holds them; the delay from the holder leaving to every
waiter hearing its new position (measured at the clients, so it includes the client process's
own event loop draining 1,000 sockets). Dispatch: the WorkerPool in-process, from ``release``
to the head waiter running with its lease (p50/p99 over 1,000 releases), which is the gateway's
share of "slot release -> queue.assigned"; plus the same through the real gateway, measured at
the clients from the holder's close to the head's ``queue.assigned`` (adds the close handshakes
with client and worker).

``--gateways 2`` (or more): several gateway processes sharing one queue through a private
``redis-server`` (``cluster.redis_url``; Debian's package), one worker. In the same run, first the
one-gateway figures above (the reference), then the same with the clients alternating across
the gateways (the holder on the first, so every hand-over crosses gateways), each gateway's RSS
and CPU, and dispatch at the queue level across gateways: two ``RedisQueue`` views on the
redis-server, from ``release`` on one to the head waiter on the other resuming with its lease
(p50/p99 over 1,000 hand-overs, 1,000 queued), beside the in-process pool's figure. Goals:
<= 5 ms p99 dispatch, position changes heard within 100 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import websockets

from bench.launch import Launched, raise_fd_limit
from launcher.redis_server import redis_server
from bench.stats import goal_mark, summary


class Waiter:
    """One queued client: connects, records each event with its arrival time."""

    def __init__(self, url: str, assigned: asyncio.Queue | None = None) -> None:
        self.url = url
        self.assigned = assigned  # hears this waiter when its queue.assigned arrives
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.ws = None
        self.first_position = asyncio.Event()
        self.changed = asyncio.Event()
        self.reader: asyncio.Task | None = None

    async def connect(self) -> None:
        self.ws = await websockets.connect(self.url, ping_interval=None, max_size=None, open_timeout=60)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                ev = json.loads(raw)
                self.events.append((time.monotonic(), ev))
                if ev["type"] == "queue.position":
                    self.first_position.set()
                elif ev["type"] == "queue.assigned" and self.assigned is not None:
                    self.assigned.put_nowait(self)
                self.changed.set()
        except websockets.ConnectionClosed:
            pass

    def last_position(self) -> int | None:
        for _, ev in reversed(self.events):
            if ev["type"] == "queue.position":
                return ev["position"]
        return None

    def assigned_at(self) -> float | None:
        return next((t for t, ev in self.events if ev["type"] == "queue.assigned"), None)


async def hold_queue(launched: Launched, n: int, hold_s: float, gateways: list[str] | None = None,
                     extensions: str = "all", e2e_reps: int = 20, refill: bool = False) -> dict[str, Any]:
    """The holder on the first of ``gateways`` (default: the one gateway), waiter ``i`` on
    gateway ``(i + 1) % len(gateways)``: with two, every hand-over crosses gateways."""
    names = gateways or ["gateway"]
    procs = [psutil.Process(launched.pid(name)) for name in names]
    urls = [launched.gateway_ws(name) + f"?model=omniduplex-cascade&record=false&extensions={extensions}"
            for name in names]
    rss_idle = [p.memory_info().rss for p in procs]
    holder = Waiter(urls[0])
    await holder.connect()
    while not any(ev["type"] == "session.created" for _, ev in holder.events):
        await asyncio.sleep(0.01)

    assigned: asyncio.Queue[Waiter] = asyncio.Queue()
    waiters = [Waiter(urls[(i + 1) % len(urls)], assigned) for i in range(n)]
    t0 = time.monotonic()
    await asyncio.gather(*(w.connect() for w in waiters))
    await asyncio.wait([asyncio.ensure_future(w.first_position.wait()) for w in waiters], timeout=60)
    placed = [w for w in waiters if w.first_position.is_set()]
    if len(placed) < n:  # a finding, not a crash: say how many were told their place, and go on
        print(f"capacity: only {len(placed)} of {n} clients heard their first queue.position within 60 s",
              file=sys.stderr)
    queued_s = max(w.events[0][0] for w in placed) - t0 if placed else float("nan")

    await asyncio.sleep(1.5)  # let the coalesced queue-length updates settle
    c0, w0 = [p.cpu_times() for p in procs], time.monotonic()
    await asyncio.sleep(hold_s)
    c1, w1 = [p.cpu_times() for p in procs], time.monotonic()
    cpu_pct = [((b.user - a.user) + (b.system - a.system)) / (w1 - w0) * 100 for a, b in zip(c0, c1, strict=True)]
    rss_hold = [p.memory_info().rss for p in procs]

    # The holder leaves: the head is assigned, everyone else moves up one place.
    before = {id(w): w.last_position() for w in waiters}
    for w in waiters:
        w.changed.clear()
    t_leave = time.monotonic()
    await holder.ws.close()

    def heard(w: Waiter) -> float | None:
        for t, ev in w.events:
            if t < t_leave:
                continue
            if ev["type"] == "queue.assigned" or (ev["type"] == "queue.position" and ev["position"] != before[id(w)]):
                return t
        return None

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(heard(w) is None for w in waiters):
        await asyncio.sleep(0.01)
    delays = [(heard(w) - t_leave) * 1000 for w in waiters if heard(w) is not None]
    untold = [(i, w) for i, w in enumerate(waiters) if heard(w) is None]
    untold_info = {"count": len(untold),
                   "per_gateway": {names[g]: sum(1 for i, _ in untold if (i + 1) % len(names) == g)
                                   for g in range(len(names))},
                   "sample": [{"gateway": names[(i + 1) % len(names)], "position_before": before[id(w)],
                               "last_events": [(round((t - t_leave) * 1000, 1), ev["type"], ev.get("position") or ev.get("error"))
                                               for t, ev in w.events[-3:]]} for i, w in untold[:5]]}

    # Through the gateway(s): each head leaves as soon as it is live; the next is assigned. The
    # queue's order is the order the connects landed in, so "the next" is whoever is told next.
    gateway_of = {id(w): (i + 1) % len(urls) for i, w in enumerate(waiters)}
    e2e, cross, same, missed, dropped, out_of_order = [], [], [], 0, 0, 0
    active = next((w for w in waiters if w.assigned_at() is not None), None)
    # The queue's order after the holder left: each waiter's place (told at once when it moves up).
    order = sorted((w for w in waiters if w.assigned_at() is None and w.last_position() is not None),
                   key=lambda w: w.last_position())
    refill_failed = 0
    if refill and active is not None:
        # Concurrent connects land in bursts per gateway; for hand-overs that alternate gateways
        # the queue is refilled one client at a time, alternating, each placed before the next.
        await asyncio.gather(*(w.ws.close() for w in waiters if w is not active), return_exceptions=True)
        refilled = []
        for i in range(n):
            w = Waiter(urls[(i + 1) % len(urls)], assigned)
            await w.connect()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(w.first_position.wait(), 10)
            if w.first_position.is_set():
                refilled.append(w)
            else:  # not queued (an error event): counted, left out of the hand-overs
                refill_failed += 1
                await w.ws.close()
        gateway_of |= {id(w): urls.index(w.url) for w in refilled}
        waiters = [active, *refilled]
        order = list(refilled)
    for _ in range(min(e2e_reps, n - 1)):
        if active is None or not order:
            break
        while not any(ev["type"] == "session.created" for _, ev in active.events) and not active.reader.done():
            await asyncio.sleep(0.005)
        if len(urls) > 1:  # several gateways: the next head waits on another gateway than the holder
            skip = next((k for k, w in enumerate(order) if gateway_of[id(w)] != gateway_of[id(active)]), None)
            if skip is None:
                break
            for w in order[:skip]:  # same gateway as the holder: they leave the queue first
                await w.ws.close()
            dropped += skip
            order = order[skip:]
            if skip:  # the new head has heard it is first: the leaves are done in Redis
                deadline = time.monotonic() + 10
                while order[0].last_position() != 1 and time.monotonic() < deadline:
                    await asyncio.sleep(0.002)
        while not assigned.empty():
            assigned.get_nowait()
        t = time.monotonic()
        await active.ws.close()
        try:
            nxt = await asyncio.wait_for(assigned.get(), 30)
        except TimeoutError:
            missed += 1
            break
        ms = (nxt.assigned_at() - t) * 1000
        e2e.append(ms)
        (same if gateway_of[id(nxt)] == gateway_of[id(active)] else cross).append(ms)
        if nxt is not order[0]:
            out_of_order += 1
        order = [w for w in order if w is not nxt]
        active = nxt

    await asyncio.gather(*(w.ws.close() for w in waiters), return_exceptions=True)
    out = {
        "clients": n,
        "placed_within_60s": len(placed),
        "all_queued_s": round(queued_s, 3),
        "gateway_rss_idle_mb": round(max(rss_idle) / 2**20, 1),
        "gateway_rss_holding_mb": round(max(rss_hold) / 2**20, 1),
        "gateway_cpu_holding_pct_of_core": round(max(cpu_pct), 2),
        "position_change_heard_ms": summary(delays) | {"p99": pct(delays, 99),
                                                       "max": round(max(delays), 3) if delays else None},
        "told": len(delays),
        "not_told": untold_info,
        "release_to_assigned_through_gateway_ms": summary(e2e) | {"p99": pct(e2e, 99)},
    }
    if len(names) > 1:  # the scalar figures above are the worst gateway's; each one here
        out["gateways"] = {name: {"clients": sum(1 for i in range(n) if (i + 1) % len(names) == g),
                                  "rss_idle_mb": round(rss_idle[g] / 2**20, 1),
                                  "rss_holding_mb": round(rss_hold[g] / 2**20, 1),
                                  "cpu_holding_pct_of_core": round(cpu_pct[g], 2)}
                           for g, name in enumerate(names)}
        out["release_to_assigned_cross_gateway_ms"] = summary(cross) | {"p99": pct(cross, 99)}
        out["release_to_assigned_same_gateway_ms"] = summary(same) | {"p99": pct(same, 99)}
        out["e2e_not_assigned"] = missed
        out["e2e_dropped_to_cross"] = dropped
        out["e2e_out_of_order"] = out_of_order
        out["refill_not_queued"] = refill_failed
    elif missed:
        out["e2e_not_assigned"] = missed
    return out


def pct(values: list[float], q: float) -> float | None:
    """The q-th percentile as the sample at that rank (no interpolation), like the pool figure."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, min(len(ordered) - 1, int(len(ordered) * q / 100) - 1))], 4)


async def dispatch_in_process(iterations: int = 1000) -> dict[str, Any]:
    """Release -> the head waiter resumes with its lease, inside one WorkerPool."""
    from gateway.pool.worker_pool import WorkerPool

    pool = WorkerPool(capacity=iterations + 10)
    w = pool.add_worker("http://bench")
    for _ in range(pool.healthy_after):
        pool.update_health(w.id, True)
    lease = await pool.acquire()
    got: list[float] = []

    async def wait(i: int):
        lease = await pool.acquire(ticket=f"t{i}", on_status=lambda s: None)
        got.append(time.perf_counter())
        return lease

    tasks = [asyncio.create_task(wait(i)) for i in range(iterations)]
    await asyncio.sleep(0.05)
    samples = []
    for i in range(iterations):
        t = time.perf_counter()
        pool.release(lease)
        lease = await tasks[i]
        samples.append((got[-1] - t) * 1000)
    pool.release(lease)
    return summary(samples) | {"p99": round(sorted(samples)[int(len(samples) * 0.99) - 1], 4)}


async def dispatch_shared(redis_url: str, iterations: int = 1000, hear_places: bool = True) -> dict[str, Any]:
    """Release on one gateway -> the head waiter on the other resumes with its SharedLease: two
    ``RedisQueue`` views (gateways ``a`` and ``b``, each with its own Redis connection) on one
    redis-server, one healthy worker with one slot. ``iterations`` waiters queue first, alternately
    on b and a (each hearing its place, as a gateway's waiters do), so every hand-over crosses
    gateways and the holding side alternates. The clock starts just before ``release``."""
    import uuid

    import redis.asyncio as aioredis

    from gateway.pool.redis_queue import RedisQueue

    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    clients = [aioredis.from_url(redis_url), aioredis.from_url(redis_url)]
    queues = [RedisQueue(c, gateway_id=g, prefix=prefix, lease_ttl_s=60, capacity=iterations + 10)
              for c, g in zip(clients, "ab", strict=True)]
    try:
        for q in queues:
            await q.start()
        await queues[0].upsert_worker("w0", "http://bench", 1, frozenset(), "healthy")
        lease = await queues[0].acquire()
        got: dict[int, float] = {}

        async def wait(i: int, placed: asyncio.Event):
            def on_place(place: int, length: int) -> None:
                placed.set()

            lease = await queues[(i + 1) % 2].acquire(ticket=f"t{i}", on_place=on_place if hear_places else None)
            got[i] = time.perf_counter()
            return lease

        tasks = []
        for i in range(iterations):  # one at a time, so the FIFO order is the index order
            placed = asyncio.Event()
            tasks.append(asyncio.create_task(wait(i, placed)))
            if hear_places:
                await asyncio.wait_for(placed.wait(), 10)
            else:
                while await queues[0].queue_length() < i + 1:
                    await asyncio.sleep(0.001)
        await asyncio.sleep(0.2)
        samples, calls, crossed = [], [], 0
        for i in range(iterations):
            holder = queues[i % 2]
            t = time.perf_counter()
            await holder.release(lease)
            calls.append((time.perf_counter() - t) * 1000)
            new = await asyncio.wait_for(tasks[i], 10)
            samples.append((got[i] - t) * 1000)
            crossed += queues[(i + 1) % 2] is not holder
            lease = new
        await queues[iterations % 2].release(lease)
        leaked = await queues[0].busy("w0")
        left = await queues[0].queue_length()
    finally:
        for q in queues:
            await asyncio.wait_for(q.close(), 5)
        for c in clients:
            await asyncio.wait_for(c.aclose(), 5)
    return summary(samples) | {"p99": pct(samples, 99), "max": round(max(samples), 4), "queued": iterations,
                               "cross_gateway": crossed, "slots_busy_after": leaked, "queue_left": left,
                               "release_call_ms": summary(calls) | {"p99": pct(calls, 99)}}


def _worker_idle(launched: Launched, timeout: float = 30.0) -> None:
    """The previous phase's last session has ended on the (one-slot) worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{launched.worker_url()}/health", timeout=2,
                         headers=launched.worker_headers).json().get("active_sessions") == 0:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError("the worker still runs a session from the previous phase")


def _log_problems(launched: Launched, names: list[str]) -> list[str]:
    """Tracebacks and errors in the gateways' logs (a bug in the shared path shows up here)."""
    lines = []
    for name in names:
        for line in launched.log(name).splitlines():
            if any(word in line for word in ("Traceback", "ERROR", "Exception", "CRITICAL")):
                lines.append(f"{name}: {line[:300]}")
    return lines[:20]


def run(clients: int = 1000, hold_s: float = 10.0, gateways: int = 1, iterations: int = 1000,
        e2e_reps: int = 100) -> dict[str, Any]:
    fds = raise_fd_limit()
    if fds < clients * 2 + 100:
        raise SystemExit(f"need {clients * 2 + 100} file descriptors, the limit is {fds}")
    if gateways > 1:
        return run_cluster(clients, hold_s, gateways, iterations, e2e_reps)
    out: dict[str, Any] = {"dispatch_in_process_ms": asyncio.run(dispatch_in_process(iterations))}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        # All clients come from one IP here: the per-IP session limits are lifted for the test.
        with Launched(Path(tmp), workers=1, queue={"capacity": clients + 100, "max_wait_s": 3600},
                      recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            out["queue"] = asyncio.run(hold_queue(launched, clients, hold_s))
    return out


def run_cluster(clients: int, hold_s: float, gateways: int, iterations: int, e2e_reps: int) -> dict[str, Any]:
    """One worker; first one gateway with the in-process pool (the reference, same run), then
    ``gateways`` gateways sharing the queue through a private redis-server, the worker in the
    first one's config (the others learn it from Redis). Clients ask for ``extensions=queue``."""
    out: dict[str, Any] = {"gateways": gateways, "dispatch_in_process_ms": asyncio.run(dispatch_in_process(iterations))}
    reps = min(e2e_reps, clients - 1)
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp, redis_server(Path(tmp) / "redis") as url:
        out["dispatch_shared_ms"] = asyncio.run(dispatch_shared(url, iterations))
        # The same without anyone listening for places: what the position fan-out costs
        out["dispatch_shared_no_places_ms"] = asyncio.run(dispatch_shared(url, iterations, hear_places=False))
        with Launched(Path(tmp), workers=1, start_gateway=False,
                      queue={"capacity": clients + 100, "max_wait_s": 3600}, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            launched.add_gateway("single")
            launched.wait_gateway("single")
            out["queue_single"] = asyncio.run(hold_queue(launched, clients, hold_s, ["single"], "queue", reps,
                                                                refill=True))
            problems = _log_problems(launched, ["single"])
            launched.stop_one("single")
            _worker_idle(launched)

            names = [f"g{i}" for i in range(gateways)]
            for i, name in enumerate(names):
                launched.add_gateway(name, cluster={"redis_url": url, "gateway_id": name, "prefix": "bench"},
                                     **({} if i == 0 else {"workers": {"count": 0}}))
            for name in names:
                launched.wait_gateway(name)
            out["queue"] = asyncio.run(hold_queue(launched, clients, hold_s, names, "queue", reps, refill=True))
            time.sleep(2.0)  # the last session ends; its lease goes back to Redis
            out["slots_busy_after"] = asyncio.run(_busy(url, "bench"))
            problems += _log_problems(launched, names)
            out["gateway_log_problems"] = problems
    return out


async def _busy(url: str, prefix: str) -> dict[str, Any]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        ids = [i.decode() for i in await client.smembers(f"{prefix}:workers")]
        busy = {i: int(await client.hget(f"{prefix}:worker:{i}", "busy") or 0) for i in ids}
        return {"busy": busy, "queue_length": int(await client.zcard(f"{prefix}:queue"))}
    finally:
        await client.aclose()


def run_cli(args) -> dict[str, Any]:
    return run(args.clients, args.hold, gateways=getattr(args, "gateways", 1))


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def heard_by_all_ms(q: dict[str, Any]) -> float:
    """The slowest position change, if every waiter heard one (else the goal is missed: inf)."""
    pc = q["position_change_heard_ms"]
    return pc["max"] if q["told"] == q["clients"] and pc["max"] is not None else math.inf


def report(r: dict[str, Any]) -> str:
    if "queue_single" in r:
        return report_cluster(r)
    q, d = r["queue"], r["dispatch_in_process_ms"]
    pc = q["position_change_heard_ms"]
    e2e = q["release_to_assigned_through_gateway_ms"]
    rows = [
        ("clients queued (told their place within 60 s)", f"{q['clients']} ({q['placed_within_60s']})",
         goal_mark(q["placed_within_60s"], q["clients"], "all", at_least=True)),
        ("all queued within", f"{q['all_queued_s']:.3f} s", goal_mark(q["all_queued_s"], 1, "<= 1 s")),
        ("gateway RSS holding them", f"{q['gateway_rss_holding_mb']} MB (idle {q['gateway_rss_idle_mb']} MB)",
         goal_mark(q["gateway_rss_holding_mb"], 100, "<= 100 MB")),
        ("gateway CPU while holding", f"{q['gateway_cpu_holding_pct_of_core']} % of a core",
         goal_mark(q["gateway_cpu_holding_pct_of_core"], 5, "<= 5 %")),
        ("position change heard by all", f"p50 {pc['p50']} ms, max {pc['max']} ms ({q['told']} told)",
         goal_mark(heard_by_all_ms(q), 100, "<= 100 ms")),
        ("dispatch, release -> lease (pool)", f"p50 {d['p50']} ms, p99 {d['p99']} ms",
         goal_mark(d["p99"], 2, "p99 <= 2 ms")),
        ("release -> queue.assigned (gateway, e2e)", f"p50 {e2e['p50']} ms, p90 {e2e['p90']} ms", ""),
    ]
    lines = ["| measure | result | goal |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def report_cluster(r: dict[str, Any]) -> str:
    one, many, n = r["queue_single"], r["queue"], r["gateways"]
    pool, shared, quiet = r["dispatch_in_process_ms"], r["dispatch_shared_ms"], r["dispatch_shared_no_places_ms"]

    def both(key, limit: float, shown: str, at_least: bool = False) -> str:
        """The goal judged in each column: ``key`` picks the figure from a queue result."""
        return (f"{shown}: 1 gateway {goal_mark(key(one), limit, at_least=at_least)}, "
                f"{n} gateways {goal_mark(key(many), limit, at_least=at_least)}")

    pc1, pcn = one["position_change_heard_ms"], many["position_change_heard_ms"]
    e1, en = one["release_to_assigned_through_gateway_ms"], many["release_to_assigned_cross_gateway_ms"]
    es = many["release_to_assigned_same_gateway_ms"]
    rows = [
        ("clients queued (told their place within 60 s)", f"{one['clients']} ({one['placed_within_60s']})",
         f"{many['clients']} alternating ({many['placed_within_60s']})", "",
         both(lambda q: q["placed_within_60s"] - q["clients"], 0, "all", at_least=True)),
        ("all queued within (first `queue.position` each)", f"{one['all_queued_s']:.3f} s",
         f"{many['all_queued_s']:.3f} s", _ratio(many["all_queued_s"], one["all_queued_s"]),
         both(lambda q: q["all_queued_s"], 1, "<= 1 s")),
        ("gateway RSS holding them (worst gateway)", f"{one['gateway_rss_holding_mb']} MB",
         f"{many['gateway_rss_holding_mb']} MB", _ratio(many["gateway_rss_holding_mb"], one["gateway_rss_holding_mb"]),
         both(lambda q: q["gateway_rss_holding_mb"], 100, "<= 100 MB")),
        ("gateway CPU while holding (worst gateway)", f"{one['gateway_cpu_holding_pct_of_core']} % of a core",
         f"{many['gateway_cpu_holding_pct_of_core']} % of a core",
         _ratio(many["gateway_cpu_holding_pct_of_core"], one["gateway_cpu_holding_pct_of_core"]),
         both(lambda q: q["gateway_cpu_holding_pct_of_core"], 5, "<= 5 %")),
        ("position change heard by every client", f"p50 {pc1['p50']}, p99 {pc1['p99']}, max {pc1['max']} ms "
         f"({one['told']} told)", f"p50 {pcn['p50']}, p99 {pcn['p99']}, max {pcn['max']} ms ({many['told']} told)",
         _ratio(pcn["max"], pc1["max"]), both(heard_by_all_ms, 100, "<= 100 ms")),
        ("dispatch, release -> head has its lease (queue level)", f"p50 {pool['p50']}, p99 {pool['p99']} ms (pool)",
         f"p50 {shared['p50']}, p99 {shared['p99']} ms (Redis, across gateways)",
         _ratio(shared["p99"], pool["p99"]), goal_mark(shared["p99"], 5, "p99 <= 5 ms (Redis)")),
        ("  the same, no waiter listening for its place", "", f"p50 {quiet['p50']}, p99 {quiet['p99']} ms",
         _ratio(quiet["p99"], pool["p99"]), goal_mark(quiet["p99"], 5, "p99 <= 5 ms")),
        ("holder's close -> head's `queue.assigned` (end to end)", f"p50 {e1['p50']}, p99 {e1['p99']} ms "
         f"({e1['n']})", f"across gateways: p50 {en['p50']}, p99 {en['p99']} ms ({en['n']}); same gateway: "
         f"p50 {es['p50']}, p99 {es['p99']} ms ({es['n']})", _ratio(en["p99"], e1["p99"]), ""),
    ]
    lines = [f"| measure | 1 gateway (in-process pool) | {n} gateways (Redis) | ratio | goal |",
             "|---|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    per = many.get("gateways", {})
    lines += ["", "| gateway | clients | RSS idle / holding (MB) | CPU holding (% of a core) |", "|---|---|---|---|"]
    lines += [f"| {name} | {g['clients']} | {g['rss_idle_mb']} / {g['rss_holding_mb']} | {g['cpu_holding_pct_of_core']} |"
              for name, g in per.items()]
    notes = [f"dispatch through Redis: {shared['n']} hand-overs, {shared['cross_gateway']} across gateways, "
             f"max {shared['max']} ms, the `release` call itself p50 {shared['release_call_ms']['p50']} / p99 "
             f"{shared['release_call_ms']['p99']} ms; after: {shared['slots_busy_after']} slot busy, {shared['queue_left']} queued"]
    notes.append(f"after the {n}-gateway run: Redis busy {r['slots_busy_after']['busy']}, "
                 f"queue {r['slots_busy_after']['queue_length']}")
    for key, q in (("1 gateway", one), (f"{n} gateways", many)):
        if q["not_told"]["count"]:
            notes.append(f"{key}: {q['not_told']['count']} clients never heard a position change "
                         f"{q['not_told']['per_gateway']}; e.g. {q['not_told']['sample'][:1]}")
        if q.get("e2e_not_assigned"):
            notes.append(f"{key}: {q['e2e_not_assigned']} heads never got `queue.assigned` (30 s)")
    if r.get("gateway_log_problems"):
        notes.append("gateway logs: " + "; ".join(r["gateway_log_problems"][:5]))
    return "\n".join(lines + [""] + [f"- {x}" for x in notes])
