"""One table of FIFO cases, run against both queue implementations (``SessionQueue``): the
in-memory ``WorkerPool`` and the Redis-backed ``SharedPool`` on a real ``redis-server``.

Each case is data: the workers (slots, capabilities, state), then steps (sessions joining with
requirements, releases, a client leaving, the operator cancelling, worker changes, waiting past
``max_wait_s``) and after them what must be seen: grants in order, errors, each waiter's last
position and ETA, the queue length. Both implementations are driven only through the interface;
the Redis one is asynchronous, so each expectation is awaited (up to a few seconds) and then
checked exactly, after a short pause in which nothing more may happen.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass, field

import pytest

from gateway.pool.interface import SessionQueue
from gateway.pool.model import Health, Lease, QueueStatus

ETA_SESSION_S = 10.0  # the operator's fixed session length: ETAs are ceil(place / slots) * 10
POLL_S = 6.0  # how long an expectation may take to show (the shared pool mirrors every second)


@dataclass
class W:
    id: str
    slots: int = 1
    caps: tuple[str, ...] = ()
    state: str = "healthy"  # healthy | unhealthy | disabled | dead | unknown (caps known, not ready)


@dataclass
class Case:
    name: str
    workers: list[W]
    steps: list
    capacity: int = 100
    max_wait_s: float = 60.0
    id: str = field(default="")


def join(session: str, *requires: str) -> tuple:
    return ("join", session, frozenset(requires))


def expect(granted=(), errors=None, positions=None, queue=None) -> dict:
    """granted: [(session, worker)] since the last expectation, in order; errors: {session:
    error class name} since then; positions: {session: (place, eta_s)} now; queue: its length."""
    return {"granted": list(granted), "errors": errors or {}, "positions": positions or {}, "queue": queue}


AUDIO, IMAGE = ("audio",), ("audio", "image")

CASES = [
    Case("strict FIFO with one slot; release dispatches the next", [W("a")], [
        join("s1"), expect([("s1", "a")], queue=0),
        join("s2"), join("s3"), join("s4"),
        expect(positions={"s2": (1, 10.0), "s3": (2, 20.0), "s4": (3, 30.0)}, queue=3),
        ("release", "s1"), expect([("s2", "a")], positions={"s3": (1, 10.0), "s4": (2, 20.0)}, queue=2),
        ("release", "s2"), expect([("s3", "a")], positions={"s4": (1, 10.0)}, queue=1),
        ("release", "s3"), expect([("s4", "a")], queue=0),
        ("release", "s4"), expect(queue=0),
    ]),
    Case("head of the line keeps the only capable worker; a later session takes what the head cannot use",
         [W("aud", caps=AUDIO), W("img", caps=IMAGE)], [
        join("s1", "audio"), expect([("s1", "aud")]),  # the least over-qualified worker first
        join("s2", "audio"), expect([("s2", "img")]),
        join("s3", "image"), join("s4", "audio"), expect(positions={"s3": (1, 10.0), "s4": (2, 10.0)}),
        ("release", "s1"), expect([("s4", "aud")], positions={"s3": (1, 10.0)}),  # s3 cannot use aud
        ("release", "s4"), expect(queue=1),  # aud free again: still no use to s3
        join("s5", "audio"), expect([("s5", "aud")], queue=1),  # served at once, past s3
        join("s6", "audio"), expect(positions={"s3": (1, 10.0), "s6": (2, 10.0)}),
        ("release", "s2"), expect([("s3", "img")], positions={"s6": (1, 10.0)}),  # the head first
        ("release", "s5"), expect([("s6", "aud")], queue=0),
        ("release", "s3"), ("release", "s6"), expect(queue=0),
    ]),
    Case("the head waits for a worker both could use; the later one does not overtake it",
         [W("aud", caps=AUDIO), W("img", caps=IMAGE)], [
        join("s1", "audio"), join("s2", "image"), expect([("s1", "aud"), ("s2", "img")]),
        join("s3", "audio"), join("s4", "image"), expect(positions={"s3": (1, 10.0), "s4": (2, 20.0)}),
        ("release", "s2"), expect([("s3", "img")], positions={"s4": (1, 10.0)}),  # FIFO: s3 gets img
        ("release", "s1"), expect(queue=1),  # aud is no use to s4
        ("release", "s3"), expect([("s4", "img")], queue=0),
        ("release", "s4"), expect(queue=0),
    ]),
    Case("requirements no worker can ever meet", [W("aud", caps=AUDIO), W("img", caps=IMAGE, state="dead")], [
        join("s1", "video"), expect(errors={"s1": "NoCapableWorkerError"}, queue=0),
        join("s2", "image"), expect(errors={"s2": "NoCapableWorkerError"}),  # only a dead worker has it
        join("s3", "audio"), expect([("s3", "aud")]),
    ]),
    Case("a queued session fails once its only capable worker goes, even with every slot busy",
         [W("aud", caps=AUDIO), W("img", caps=IMAGE)], [
        join("s1", "audio"), join("s2", "image"), expect([("s1", "aud"), ("s2", "img")]),
        join("s3", "image"), join("s4", "audio"), expect(positions={"s3": (1, 10.0), "s4": (2, 10.0)}),
        ("remove", "img"), expect(errors={"s3": "NoCapableWorkerError"}, positions={"s4": (1, 10.0)}, queue=1),
        ("release", "s1"), expect([("s4", "aud")], queue=0),
    ]),
    Case("queue full", [W("a")], [
        join("s1"), join("s2"), join("s3"), expect([("s1", "a")], queue=2),
        join("s4"), expect(errors={"s4": "QueueFullError"}, queue=2),
        ("release", "s1"), expect([("s2", "a")], queue=1),
        join("s5"), expect(positions={"s3": (1, 10.0), "s5": (2, 20.0)}, queue=2),
    ], capacity=2),
    Case("a full queue still serves at once a session a free worker can take",
         [W("aud", caps=AUDIO), W("img", caps=IMAGE)], [
        join("s1", "image"), join("s2", "image"), expect([("s1", "img")], queue=1),
        join("s3", "image"), expect(errors={"s3": "QueueFullError"}),
        join("s4", "audio"), expect([("s4", "aud")], queue=1),
    ], capacity=1),
    Case("cancel of a queued ticket, and a client that leaves", [W("a")], [
        join("s1"), join("s2"), join("s3"), join("s4"), expect([("s1", "a")], queue=3),
        ("cancel", "s2"), expect(errors={"s2": "QueueCancelledError"},
                                 positions={"s3": (1, 10.0), "s4": (2, 20.0)}, queue=2),
        ("leave", "s3"), expect(errors={"s3": "CancelledError"}, positions={"s4": (1, 10.0)}, queue=1),
        ("release", "s1"), expect([("s4", "a")], queue=0),
    ]),
    Case("timeout", [W("a")], [
        join("s1"), join("s2"), expect([("s1", "a")], queue=1),
        ("sleep", 1.5), expect(errors={"s2": "QueueTimeoutError"}, queue=0),
        ("release", "s1"), join("s3"), expect([("s3", "a")], queue=0),
    ], max_wait_s=1.0),
    Case("disabled, dead, unhealthy and unknown workers are not picked",
         [W("a", state="disabled"), W("b", state="dead"), W("c", state="unhealthy"), W("d", state="unknown"),
          W("e")], [
        join("s1"), expect([("s1", "e")]),
        join("s2"), expect(positions={"s2": (1, 10.0)}, queue=1),
        ("state", "e", "disabled"), ("release", "s1"), expect(queue=1),  # drained: no new session
        ("state", "c", "healthy"), expect([("s2", "c")], queue=0),
        join("s3"), ("state", "a", "enabled"), expect([("s3", "a")]),
        join("s4"), ("state", "c", "unhealthy"), ("release", "s2"), expect(queue=1),  # c failed: not reused
        ("state", "e", "enabled"), expect([("s4", "e")], queue=0),
    ]),
    Case("several slots: least loaded first, ETAs over the capable slots", [W("a", slots=2), W("b")], [
        join("s1"), join("s2"), join("s3"), expect([("s1", "a"), ("s2", "b"), ("s3", "a")]),
        join("s4"), join("s5"), join("s6"), join("s7"),
        expect(positions={"s4": (1, 10.0), "s5": (2, 10.0), "s6": (3, 10.0), "s7": (4, 20.0)}, queue=4),
        ("release", "s2"), expect([("s4", "b")], positions={"s5": (1, 10.0), "s6": (2, 10.0), "s7": (3, 10.0)}),
        ("release", "s1"), ("release", "s3"), expect([("s5", "a"), ("s6", "a")], positions={"s7": (1, 10.0)}),
        ("release", "s4"), expect([("s7", "b")], queue=0),
    ]),
    Case("a worker enabled, added or turning healthy serves the queue in order",
         [W("a", caps=AUDIO), W("b", caps=IMAGE, state="disabled")], [
        join("s1", "audio"), join("s2", "image"), join("s3", "audio"),
        expect([("s1", "a")], positions={"s2": (1, 10.0), "s3": (2, 20.0)}, queue=2),
        ("state", "b", "enabled"), expect([("s2", "b")], positions={"s3": (1, 10.0)}, queue=1),
        ("add", W("c", caps=AUDIO, state="unknown")), expect(queue=1),
        ("state", "c", "healthy"), expect([("s3", "c")], queue=0),
        join("s4", "image"), ("add", W("d", caps=IMAGE)), expect([("s4", "d")], queue=0),
    ]),
]


# ---------------------------------------------------------------- drivers


class Run:
    """One case on one pool, through ``SessionQueue`` only."""

    def __init__(self, pool: SessionQueue) -> None:
        self.pool = pool
        self.tasks: dict[str, asyncio.Task] = {}
        self.statuses: dict[str, QueueStatus] = {}
        self.leases: dict[str, Lease] = {}
        self.granted: list[tuple[str, str]] = []
        self.errors: dict[str, str] = {}

    async def wait_for(self, check, what: str) -> None:
        deadline = time.monotonic() + POLL_S
        while not check():
            assert time.monotonic() < deadline, f"not seen within {POLL_S} s: {what}"
            await asyncio.sleep(0.02)

    async def add(self, w: W) -> None:
        await self.pool.admin_add_worker(f"http://{w.id}.test", worker_id=w.id, slots=w.slots)
        await self.state(w.id, w.state, w)

    def info(self, worker_id: str) -> dict:
        w = self.pool.get_worker(worker_id)
        return {"model_loaded": True, "state": "IDLE", "capabilities": sorted(self.caps[worker_id]), "slots": w.slots}

    async def state(self, worker_id: str, state: str, w: W | None = None) -> None:
        pool = self.pool
        if w is not None:
            self.caps[worker_id] = w.caps
        if state in ("healthy", "enabled"):
            if state == "enabled":
                await pool.admin_set_disabled(worker_id, False)
            for _ in range(20):  # as many probes as the pool wants (a failure reported meanwhile resets it)
                pool.update_health(worker_id, True, self.info(worker_id))
                await pool.flush()
                if pool.get_worker(worker_id).health == Health.HEALTHY:
                    break
            else:  # the case's setup did not happen: say so, never go on with a worker in another state
                raise AssertionError(f"{worker_id} not healthy after 20 good probes: "
                                     f"{pool.get_worker(worker_id).health}")
        elif state == "unknown":
            pool.update_health(worker_id, False, self.info(worker_id), "loading", failure=False)
        elif state == "unhealthy":
            if pool.get_worker(worker_id).health == Health.UNKNOWN:
                pool.update_health(worker_id, False, self.info(worker_id), "loading", failure=False)
            pool.report_failure(worker_id, "a session saw it fail")
        elif state == "disabled":
            await pool.admin_set_disabled(worker_id, True)
        elif state == "dead":
            await pool.admin_mark_dead(worker_id)
        await pool.flush()
        expected = {"enabled": "healthy"}.get(state, state)
        await self.wait_for(lambda: pool.get_worker(worker_id).health.value == expected,
                            f"{worker_id} {expected}")

    async def waiter(self, session: str, requirements: frozenset[str]) -> None:
        try:
            lease = await self.pool.acquire(requirements, ticket=session,
                                            on_status=lambda s: self.statuses.__setitem__(session, s))
        except BaseException as exc:  # noqa: BLE001 - the class name is what the table states
            self.errors[session] = type(exc).__name__
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.leases[session] = lease
        self.granted.append((session, lease.worker.id))

    async def step(self, step: tuple) -> None:
        kind, *args = step
        pool = self.pool
        if kind == "join":
            session, requirements = args
            self.tasks[session] = asyncio.create_task(self.waiter(session, requirements))
            # in the queue (a place heard), served or refused before the next step
            await self.wait_for(lambda: session in self.statuses or self.tasks[session].done(), f"{session} joined")
        elif kind == "release":
            pool.release(self.leases.pop(args[0]))
        elif kind == "cancel":
            assert await pool.admin_cancel(args[0])
        elif kind == "leave":
            self.tasks[args[0]].cancel()
        elif kind == "state":
            await self.state(*args)
        elif kind == "add":
            await self.add(args[0])
        elif kind == "remove":
            await pool.admin_remove_worker(args[0])
        elif kind == "sleep":
            await asyncio.sleep(args[0])
        else:
            raise AssertionError(kind)
        await pool.flush()

    async def check(self, want: dict) -> None:
        pool = self.pool

        def seen() -> bool:
            await_places = all(s in self.statuses and (self.statuses[s].position, self.statuses[s].eta_s) == p
                               for s, p in want["positions"].items())
            return (len(self.granted) >= len(want["granted"]) and set(want["errors"]) <= set(self.errors)
                    and await_places and (want["queue"] is None or pool.queue_length == want["queue"]))

        try:
            await self.wait_for(seen, str(want))
        except AssertionError:
            pass  # the exact comparison below says what differs
        await pool.flush()
        await asyncio.sleep(self.grace)  # nothing more may happen
        assert self.granted == want["granted"], "grants in order"
        assert self.errors == want["errors"], "errors"
        places = {s: (self.statuses[s].position, self.statuses[s].eta_s) for s in want["positions"]
                  if s in self.statuses}
        assert places == want["positions"], "positions and ETAs"
        if want["queue"] is not None:
            assert pool.queue_length == want["queue"], "queue length"
        self.granted, self.errors = [], {}

    async def play(self, case: Case) -> None:
        self.caps: dict[str, tuple[str, ...]] = {}
        await self.pool.admin_set_eta(ETA_SESSION_S)
        for w in case.workers:
            await self.add(w)
        for number, step in enumerate(case.steps):
            if isinstance(step, dict):
                try:
                    await self.check(step)
                except AssertionError as exc:
                    raise AssertionError(f"expectation after step {number} of {case.name!r}: {exc}") from None
            else:
                await self.step(step)

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for lease in self.leases.values():
            self.pool.release(lease)


def memory_pool(case: Case, _redis_url: str | None, _prefix: str):
    from gateway.pool.worker_pool import WorkerPool

    return WorkerPool(capacity=case.capacity, max_wait_s=case.max_wait_s, default_session_s=ETA_SESSION_S)


def redis_pool(case: Case, redis_url: str, prefix: str):
    from gateway.pool.shared_pool import SharedPool

    return SharedPool(redis_url, prefix=prefix, lease_ttl_s=5.0, gateway_id="g1", capacity=case.capacity,
                      max_wait_s=case.max_wait_s, default_session_s=ETA_SESSION_S, healthy_after=2,
                      unhealthy_after=3)


@pytest.fixture(params=["memory", "redis"])
def implementation(request):
    if request.param == "redis":
        if shutil.which("redis-server") is None:
            pytest.skip("Debian redis-server not installed")
        return redis_pool, request.getfixturevalue("redis_url"), 0.3
    return memory_pool, None, 0.0


@pytest.mark.parametrize("case", CASES, ids=[c.name.split(";")[0].split(",")[0] for c in CASES])
async def test_fifo_case(case: Case, implementation, request):
    make, redis_url, grace = implementation
    pool = make(case, redis_url, f"cases{CASES.index(case)}")
    await pool.start()
    run = Run(pool)
    run.grace = grace
    try:
        if redis_url is not None:  # connected, and this gateway is the one that probes
            await run.wait_for(lambda: (pool.cluster_health() or {}).get("ok") and pool.cluster_health()["prober"],
                               "the shared pool connected")
        await run.play(case)
    finally:
        await run.close()
        await asyncio.wait_for(pool.close(), 10)
