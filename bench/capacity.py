"""Gateway capacity: 1,000 queued WebSocket clients, and dispatch latency.

    python -m bench capacity [--clients 1000] [--hold 10] [--json]

Real gateway and worker processes. One client holds the only worker; N more connect at once
and queue. Reported: time until every client has its first ``queue.position``; the gateway's
RSS and CPU (share of one core) while it holds them; the delay from the holder leaving to every
waiter hearing its new position (measured at the clients, so it includes the client process's
own event loop draining 1,000 sockets). Dispatch: the WorkerPool in-process, from ``release``
to the head waiter running with its lease (p50/p99 over 1,000 releases), which is the gateway's
share of "slot release -> queue.assigned"; plus the same through the real gateway, measured at
the clients from the holder's close to the head's ``queue.assigned`` (adds the close handshakes
with client and worker).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import websockets

from bench.launch import Launched, raise_fd_limit
from bench.stats import summary


class Waiter:
    """One queued client: connects, records each event with its arrival time."""

    def __init__(self, url: str) -> None:
        self.url = url
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
                     extensions: str = "all", e2e_reps: int = 20) -> dict[str, Any]:
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

    waiters = [Waiter(urls[(i + 1) % len(urls)]) for i in range(n)]
    t0 = time.monotonic()
    await asyncio.gather(*(w.connect() for w in waiters))
    await asyncio.gather(*(asyncio.wait_for(w.first_position.wait(), 60) for w in waiters))
    queued_s = max(w.events[0][0] for w in waiters) - t0

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

    # Through the gateway(s): each head leaves as soon as it is live; the next is assigned.
    e2e, missed = [], 0
    for i in range(min(e2e_reps, n - 1)):
        head, nxt = waiters[i], waiters[i + 1]
        while not any(ev["type"] == "session.created" for _, ev in head.events):
            if head.reader.done():
                break
            await asyncio.sleep(0.005)
        t = time.monotonic()
        await head.ws.close()
        deadline = t + 30
        while nxt.assigned_at() is None and time.monotonic() < deadline and not nxt.reader.done():
            await asyncio.sleep(0.001)
        if nxt.assigned_at() is None:
            missed += 1
            continue
        e2e.append((nxt.assigned_at() - t) * 1000)

    await asyncio.gather(*(w.ws.close() for w in waiters), return_exceptions=True)
    out = {
        "clients": n,
        "all_queued_s": round(queued_s, 3),
        "gateway_rss_idle_mb": round(max(rss_idle) / 2**20, 1),
        "gateway_rss_holding_mb": round(max(rss_hold) / 2**20, 1),
        "gateway_cpu_holding_pct_of_core": round(max(cpu_pct), 2),
        "position_change_heard_ms": summary(delays) | {"p99": pct(delays, 99),
                                                       "max": round(max(delays), 3) if delays else None},
        "told": len(delays),
        "release_to_assigned_through_gateway_ms": summary(e2e) | {"p99": pct(e2e, 99)},
    }
    if len(names) > 1:  # the scalar figures above are the worst gateway's; each one here
        out["gateways"] = {name: {"clients": sum(1 for i in range(n) if (i + 1) % len(names) == g),
                                  "rss_idle_mb": round(rss_idle[g] / 2**20, 1),
                                  "rss_holding_mb": round(rss_hold[g] / 2**20, 1),
                                  "cpu_holding_pct_of_core": round(cpu_pct[g], 2)}
                           for g, name in enumerate(names)}
        out["e2e_cross_gateway"] = True
        out["e2e_not_assigned"] = missed
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
    from gateway.worker_pool import WorkerPool

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


def run(clients: int = 1000, hold_s: float = 10.0) -> dict[str, Any]:
    fds = raise_fd_limit()
    if fds < clients * 2 + 100:
        raise SystemExit(f"need {clients * 2 + 100} file descriptors, the limit is {fds}")
    out: dict[str, Any] = {"dispatch_in_process_ms": asyncio.run(dispatch_in_process())}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        # All clients come from one IP here: the per-IP session limits are lifted for the test.
        with Launched(Path(tmp), workers=1, queue={"capacity": clients + 100, "max_wait_s": 3600},
                      recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            out["queue"] = asyncio.run(hold_queue(launched, clients, hold_s))
    return out


def report(r: dict[str, Any]) -> str:
    q, d = r["queue"], r["dispatch_in_process_ms"]
    pc = q["position_change_heard_ms"]
    e2e = q["release_to_assigned_through_gateway_ms"]
    rows = [
        ("clients queued", f"{q['clients']}", ""),
        ("all queued within", f"{q['all_queued_s']:.3f} s", "<= 1 s"),
        ("gateway RSS holding them", f"{q['gateway_rss_holding_mb']} MB (idle {q['gateway_rss_idle_mb']} MB)", "<= 100 MB"),
        ("gateway CPU while holding", f"{q['gateway_cpu_holding_pct_of_core']} % of a core", "<= 5 %"),
        ("position change heard by all", f"p50 {pc['p50']} ms, max {pc['max']} ms ({q['told']} told)", "<= 100 ms"),
        ("dispatch, release -> lease (pool)", f"p50 {d['p50']} ms, p99 {d['p99']} ms", "p99 <= 2 ms"),
        ("release -> queue.assigned (gateway, e2e)", f"p50 {e2e['p50']} ms, p90 {e2e['p90']} ms", ""),
    ]
    lines = ["| measure | result | target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)
