"""WorkerPool and HealthChecker: queueing, fairness, cancellation, health. Fast, no network."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import pytest

from gateway.pool.health_checker import HealthChecker
from gateway.pool.model import Health, NoCapableWorkerError, QueueFullError, QueueStatus, QueueTimeoutError
from gateway.pool.worker_pool import WorkerPool

AUDIO = frozenset({"audio_input", "audio_output", "duplex"})
IMAGE = AUDIO | {"image_input"}
from tests.support.pool import healthy, settle


def waiter(pool: WorkerPool, requirements=frozenset(), ticket=None, log=None):
    cb = (lambda s: log.append((s.position, s.queue_length))) if log is not None else None
    return asyncio.create_task(pool.acquire(requirements, ticket=ticket, on_status=cb))


def check_invariants(pool: WorkerPool) -> None:
    for w in pool.workers():
        assert 0 <= w.busy <= w.slots and w.busy == len(w.sessions)


# ---------------------------------------------------------------- assignment and FIFO


async def test_immediate_assignment_without_status():
    pool = WorkerPool()
    w = healthy(pool, "http://127.0.0.1:22400/")
    assert w.id == "w0" and w.url == "http://127.0.0.1:22400"
    calls = []
    lease = await pool.acquire(on_status=calls.append)
    assert lease.worker is w and lease.queued_s == 0.0
    assert w.busy == 1 and not w.available and list(w.sessions) == [lease.ticket]
    assert calls == [] and pool.queue_length == 0
    pool.release(lease)
    assert w.busy == 0 and w.sessions == {}


async def test_fifo_order_three_waiters_one_slot():
    pool = WorkerPool()
    healthy(pool, "http://a")
    held = await pool.acquire()
    tasks = [waiter(pool, ticket=t) for t in ("t1", "t2", "t3")]
    await settle()
    assert [e["ticket"] for e in pool.snapshot()["queue"]] == ["t1", "t2", "t3"]
    order = []
    pool.release(held)
    for _ in range(3):
        await settle()
        done = [t for t in tasks if t.done() and t not in order]
        assert len(done) == 1  # exactly one woken per release
        order.append(done[0])
        lease = done[0].result()
        assert lease.worker.busy == 1 and lease.queued_s > 0
        pool.release(lease)
    assert [t.result().ticket for t in order] == ["t1", "t2", "t3"]
    assert pool.snapshot()["busy"] == 0 and pool.queue_length == 0


async def test_positions_pushed_and_move_up_after_cancel():
    pool = WorkerPool(default_session_s=10.0)
    pool.length_update_s = 0.05
    healthy(pool, "http://a")
    held = await pool.acquire()
    a_log, b_log, c_log = [], [], []
    a = waiter(pool, ticket="a", log=a_log)
    await settle()
    b = waiter(pool, ticket="b", log=b_log)
    await settle()
    c = waiter(pool, ticket="c", log=c_log)
    await settle()
    assert a_log == [(1, 1)] and b_log == [(2, 2)] and c_log == [(3, 3)]  # growth behind: not yet
    await asyncio.sleep(0.1)
    assert a_log == [(1, 1), (1, 3)]  # one coalesced update for two joins
    assert b_log == [(2, 2), (2, 3)]
    assert c_log == [(3, 3)]
    a.cancel()
    await settle()
    assert a.cancelled()
    assert a_log == [(1, 1), (1, 3)]  # never told anything after leaving
    assert b_log[-1] == (1, 2) and c_log[-1] == (2, 2)  # moving up is told at once
    assert len(b_log) == 3 and len(c_log) == 2  # one push per change
    pool.release(held)
    await settle()
    assert b.done() and c_log[-1] == (1, 1)
    pool.release(b.result())
    await settle()
    pool.release(c.result())


async def test_a_thousand_joins_cost_linear_messages_and_moves_reach_everyone():
    pool = WorkerPool(capacity=2000)
    pool.length_update_s = 0.5
    healthy(pool, "http://a")
    held = await pool.acquire()
    logs = [[] for _ in range(1000)]
    tasks = [waiter(pool, ticket=f"t{i}", log=logs[i]) for i in range(1000)]
    await settle()
    assert sum(len(x) for x in logs) == 1000  # each hears its own position once
    await asyncio.sleep(0.6)
    assert sum(len(x) for x in logs) <= 2000 and all(x[-1][1] == 1000 for x in logs)
    pool.release(held)
    await settle()
    assert tasks[0].done()
    assert all(logs[i][-1][0] == i for i in range(1, 1000))  # everyone moved up at once
    for t in tasks:
        t.cancel()
    await settle()


async def test_eta_uses_capable_slots_and_session_average():
    pool = WorkerPool(default_session_s=10.0)
    healthy(pool, "http://a", slots=2)
    held = [await pool.acquire(), await pool.acquire()]
    statuses: dict[str, list[QueueStatus]] = {"1": [], "2": [], "3": []}
    tasks = [asyncio.create_task(pool.acquire(ticket=t, on_status=statuses[t].append)) for t in "123"]
    await settle()
    assert [statuses[t][-1].eta_s for t in "123"] == [10.0, 10.0, 20.0]
    pool.release(held[0])  # a ~0 s session pulls the average down by alpha
    assert pool.avg_session_s == pytest.approx(8.0, abs=0.01)
    await settle()
    assert tasks[0].done() and statuses["3"][-1].position == 2
    pool.release(held[1])
    for t in tasks:
        await settle()
        pool.release(t.result())
    assert pool.snapshot()["busy"] == 0


async def test_status_callback_exception_is_ignored():
    pool = WorkerPool()
    healthy(pool, "http://a")
    held = await pool.acquire()

    def boom(_status):
        raise RuntimeError("client went away")

    t = asyncio.create_task(pool.acquire(on_status=boom))
    await settle()
    assert pool.queue_length == 1
    pool.release(held)
    await settle()
    pool.release(t.result())


# ---------------------------------------------------------------- cancellation and limits


async def test_cancel_of_queued_waiter_removes_it_at_once():
    pool = WorkerPool()
    w = healthy(pool, "http://a")
    held = await pool.acquire()
    t = waiter(pool, ticket="gone")
    await settle()
    assert pool.queue_length == 1
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert pool.queue_length == 0 and pool.snapshot()["queue"] == []
    pool.release(held)
    assert w.busy == 0 and w.sessions == {}


async def test_cancel_racing_with_assignment_does_not_leak_slot():
    pool = WorkerPool()
    w = healthy(pool, "http://a")
    held = await pool.acquire()
    first = waiter(pool, ticket="first")
    await settle()
    # Release resolves first's future (slot marked busy) but first has not run yet...
    pool.release(held)
    assert w.busy == 1 and "first" in w.sessions
    # ...and the client disconnects in that same instant.
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert w.busy == 0 and w.sessions == {} and w.available

    # Same race with a second waiter behind: the freed slot goes to it.
    held = await pool.acquire()
    a = waiter(pool, ticket="a")
    b = waiter(pool, ticket="b")
    await settle()
    pool.release(held)
    a.cancel()
    await settle()
    assert a.cancelled() and b.done()
    lease = b.result()
    assert lease.ticket == "b" and w.busy == 1 and list(w.sessions) == ["b"]
    pool.release(lease)
    assert w.busy == 0


async def test_queue_full():
    pool = WorkerPool(capacity=2)
    healthy(pool, "http://a")
    held = await pool.acquire()
    tasks = [waiter(pool), waiter(pool)]
    await settle()
    with pytest.raises(QueueFullError) as e:
        await pool.acquire()
    assert "full" in str(e.value)
    assert pool.queue_length == 2
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    pool.release(held)

    nowait = WorkerPool(capacity=0)
    healthy(nowait, "http://a")
    lease = await nowait.acquire()  # a free worker still serves at capacity 0
    with pytest.raises(QueueFullError):
        await nowait.acquire()
    nowait.release(lease)


async def test_queue_timeout_removes_entry():
    pool = WorkerPool(max_wait_s=0.05)
    w = healthy(pool, "http://a")
    held = await pool.acquire()
    with pytest.raises(QueueTimeoutError):
        await pool.acquire(ticket="slow")
    assert pool.queue_length == 0
    pool.release(held)
    assert w.busy == 0 and w.sessions == {}


async def test_release_is_idempotent():
    pool = WorkerPool()
    w = healthy(pool, "http://a", slots=2)
    a = await pool.acquire()
    b = await pool.acquire()
    queued = waiter(pool)
    await settle()
    pool.release(a)
    await settle()
    assert queued.done() and w.busy == 2
    pool.release(a)  # second call must not free the slot now held by `queued`
    assert w.busy == 2 and pool.queue_length == 0
    for lease in (b, queued.result()):
        pool.release(lease)
        pool.release(lease)
    assert w.busy == 0 and w.sessions == {}


async def test_duplicate_ticket_rejected():
    pool = WorkerPool()
    healthy(pool, "http://a")
    lease = await pool.acquire(ticket="x")
    with pytest.raises(ValueError):
        await pool.acquire(ticket="x")
    pool.release(lease)


# ---------------------------------------------------------------- capabilities


async def test_image_request_does_not_block_audio_request():
    pool = WorkerPool()
    img = healthy(pool, "http://img", capabilities=IMAGE)
    aud = healthy(pool, "http://aud", capabilities=AUDIO)
    held_img = await pool.acquire(frozenset({"image_input"}))
    assert held_img.worker is img
    image_waiter = waiter(pool, frozenset({"image_input"}), ticket="img")
    await settle()
    assert pool.queue_length == 1
    # The audio-only worker is free: an audio request is served now, not behind the image one.
    lease = await pool.acquire(frozenset({"audio_input"}))
    assert lease.worker is aud and not image_waiter.done()

    # Both busy, image first then audio queued: freeing the audio worker serves the audio one.
    audio_waiter = waiter(pool, frozenset({"audio_input"}), ticket="aud")
    await settle()
    pool.release(lease)
    await settle()
    assert audio_waiter.done() and audio_waiter.result().worker is aud
    assert not image_waiter.done()
    pool.release(held_img)
    await settle()
    assert image_waiter.result().worker is img
    pool.release(image_waiter.result())
    pool.release(audio_waiter.result())
    assert pool.snapshot()["busy"] == 0


async def test_plain_request_prefers_least_capable_free_worker():
    pool = WorkerPool()
    healthy(pool, "http://img", capabilities=IMAGE)
    aud = healthy(pool, "http://aud", capabilities=AUDIO)
    lease = await pool.acquire(frozenset({"audio_input"}))
    assert lease.worker is aud  # keeps the image worker free for image requests
    pool.release(lease)


async def test_no_capable_worker():
    pool = WorkerPool(max_wait_s=0.02)
    w = pool.add_worker("http://a")  # capabilities not reported yet: just queue
    with pytest.raises(QueueTimeoutError):
        await pool.acquire(frozenset({"video_input"}))
    pool.update_health(w.id, False, info={"state": "IDLE", "model_loaded": True, "capabilities": sorted(AUDIO)})
    with pytest.raises(NoCapableWorkerError):
        await pool.acquire(frozenset({"video_input"}))
    # Unhealthy workers still count (they may come back); dead ones do not.
    assert w.health != Health.HEALTHY
    with pytest.raises(QueueTimeoutError):
        await pool.acquire(frozenset({"audio_input"}))
    pool.mark_dead(w.id)
    with pytest.raises(NoCapableWorkerError):
        await pool.acquire(frozenset({"audio_input"}))


async def test_queued_entry_fails_when_its_only_capable_worker_goes():
    pool = WorkerPool()
    img = healthy(pool, "http://img", capabilities=IMAGE)
    healthy(pool, "http://aud", capabilities=AUDIO)
    held = await pool.acquire(frozenset({"image_input"}))
    t = waiter(pool, frozenset({"image_input"}))
    await settle()
    pool.remove_worker(img.id)
    with pytest.raises(NoCapableWorkerError):
        await t
    assert pool.queue_length == 0
    pool.release(held)  # lease on a removed worker stays valid; release is a no-op on slots
    assert held.worker.sessions == {} and pool.snapshot()["busy"] == 0


# ---------------------------------------------------------------- workers and health


async def test_add_remove_worker():
    pool = WorkerPool()
    assert pool.add_worker("http://a").id == "w0"
    assert pool.add_worker("http://b").id == "w1"
    assert pool.add_worker("http://c", worker_id="gpu3").id == "gpu3"
    with pytest.raises(ValueError):
        pool.add_worker("http://a/")
    pool.remove_worker("w1")
    assert [w.id for w in pool.workers()] == ["w0", "gpu3"]
    with pytest.raises(KeyError):
        pool.remove_worker("w1")


async def test_health_thresholds():
    pool = WorkerPool(healthy_after=2, unhealthy_after=3)
    w = pool.add_worker("http://a")
    pool.update_health(w.id, True)
    assert w.health == Health.UNKNOWN
    pool.update_health(w.id, True)
    assert w.health == Health.HEALTHY
    pool.update_health(w.id, False, error="timeout")
    pool.update_health(w.id, False, error="timeout")
    assert w.health == Health.HEALTHY  # two blips are tolerated
    pool.update_health(w.id, False, error="timeout")
    assert w.health == Health.UNHEALTHY and w.failures_total == 3 and w.last_error == "timeout"
    pool.update_health(w.id, True)
    assert w.health == Health.UNHEALTHY
    pool.update_health(w.id, True)
    assert w.health == Health.HEALTHY and w.last_error is None

    fresh = pool.add_worker("http://b")
    for _ in range(3):
        pool.update_health(fresh.id, False, error="refused")
    assert fresh.health == Health.UNHEALTHY


async def test_loading_probe_is_not_a_failure_and_info_updates_worker():
    pool = WorkerPool()
    w = pool.add_worker("http://a")
    loading = {"state": "LOADING", "model_loaded": False, "load_progress": {"stage": "llm", "fraction": 0.4}}
    for _ in range(5):
        pool.update_health(w.id, False, info=loading, error="loading", failure=False)
    assert w.health == Health.UNKNOWN and w.failures_total == 0
    assert w.last_probe["load_progress"]["fraction"] == 0.4
    ready = {"state": "IDLE", "model_loaded": True, "slots": 2, "capabilities": ["audio_input", "duplex"]}
    pool.update_health(w.id, True, info=ready)
    pool.update_health(w.id, True, info=ready)
    assert w.health == Health.HEALTHY and w.slots == 2
    assert w.capabilities == frozenset({"audio_input", "duplex"})
    snap = pool.snapshot()
    json.dumps(snap)
    assert snap["workers"][0]["capabilities"] == ["audio_input", "duplex"]
    assert snap["slots_total"] == 2 and snap["healthy"] == 1
    # A healthy worker that restarts and reports loading stops receiving sessions at once.
    pool.update_health(w.id, False, info=loading, error="loading", failure=False)
    assert w.health == Health.UNKNOWN and not w.available


async def test_operator_states_not_overridden_by_probes():
    pool = WorkerPool()
    w = healthy(pool, "http://a")
    lease = await pool.acquire()
    pool.set_disabled(w.id, True)
    assert w.health == Health.DISABLED
    for _ in range(5):
        pool.update_health(w.id, True)
    assert w.health == Health.DISABLED and w.busy == 1  # running session keeps going
    pool.release(lease)
    with pytest.raises(QueueTimeoutError):
        pool.max_wait_s = 0.02
        await pool.acquire()  # drained worker takes nothing new
    pool.set_disabled(w.id, False)  # probes were ok throughout: healthy at once
    assert w.health == Health.HEALTHY
    pool.release(await pool.acquire())

    pool.mark_dead(w.id)
    for _ in range(5):
        pool.update_health(w.id, True)
    assert w.health == Health.DEAD
    pool.report_failure(w.id, "boom")
    assert w.health == Health.DEAD

    other = pool.add_worker("http://b")
    pool.set_disabled(other.id, True)
    pool.set_disabled(other.id, False)  # no probe history: back to unknown
    assert other.health == Health.UNKNOWN


async def test_report_failure_takes_worker_out_at_once():
    pool = WorkerPool()
    w = healthy(pool, "http://a")
    pool.report_failure(w.id, "connect refused")
    assert w.health == Health.UNHEALTHY and w.ok_streak == 0 and w.last_error == "connect refused"
    t = waiter(pool)
    await settle()
    assert not t.done()
    pool.update_health(w.id, True)
    await settle()
    assert not t.done()
    pool.update_health(w.id, True)  # back to healthy: dispatches the waiter
    await settle()
    assert t.done() and t.result().worker is w
    pool.release(t.result())


async def test_worker_becoming_healthy_or_added_dispatches():
    pool = WorkerPool()
    t = waiter(pool)
    await settle()
    assert pool.queue_length == 1
    w = pool.add_worker("http://a")
    await settle()
    assert not t.done()  # unknown workers are never assigned
    pool.update_health(w.id, True)
    pool.update_health(w.id, True)
    await settle()
    assert t.result().worker is w
    pool.release(t.result())


async def test_randomized_acquire_cancel_release_leaves_nothing_behind():
    rng = random.Random(1234)
    pool = WorkerPool(capacity=20, max_wait_s=5.0)
    healthy(pool, "http://a", slots=1, capabilities=IMAGE)
    healthy(pool, "http://b", slots=2, capabilities=AUDIO)
    healthy(pool, "http://c", slots=1, capabilities=AUDIO)
    reqs = [frozenset(), frozenset({"audio_input"}), frozenset({"image_input"})]
    tasks: list[asyncio.Task] = []
    leases = []
    for _ in range(200):
        op = rng.random()
        if op < 0.45:
            tasks.append(asyncio.create_task(pool.acquire(rng.choice(reqs), on_status=lambda s: None)))
        elif op < 0.65 and tasks:
            rng.choice(tasks).cancel()
        elif op < 0.85 and leases:
            lease = leases.pop(rng.randrange(len(leases)))
            pool.release(lease)
            if rng.random() < 0.5:
                pool.release(lease)  # idempotent
            if rng.random() < 0.5 and tasks:
                rng.choice(tasks).cancel()  # race: cancel right after a release may assign
        if rng.random() < 0.6:
            await settle(rng.randint(1, 3))
        for t in [t for t in tasks if t.done()]:
            tasks.remove(t)
            if not t.cancelled() and t.exception() is None:
                leases.append(t.result())
            elif not t.cancelled():
                assert isinstance(t.exception(), QueueFullError)
        check_invariants(pool)
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    leases += [r for r in results if not isinstance(r, BaseException)]
    for lease in leases:
        pool.release(lease)
    await settle()
    assert pool.queue_length == 0
    for w in pool.workers():
        assert w.busy == 0 and w.sessions == {}


# ---------------------------------------------------------------- HealthChecker


READY = {
    "state": "IDLE",
    "model_loaded": True,
    "load_progress": {"stage": "ready", "fraction": 1.0, "detail": ""},
    "active_sessions": 0,
    "slots": 1,
    "capabilities": sorted(IMAGE),
}


class FakeWorkers:
    """MockTransport handler whose answer per host can be switched during a test."""

    def __init__(self) -> None:
        self.mode: dict[str, str] = {}
        self.hits: dict[str, int] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        assert request.url.path == "/health"
        self.hits[host] = self.hits.get(host, 0) + 1
        mode = self.mode.get(host, "ok")
        if mode == "ok":
            return httpx.Response(200, json=READY)
        if mode == "loading":
            return httpx.Response(
                200, json={**READY, "state": "LOADING", "model_loaded": False,
                           "load_progress": {"stage": "llm", "fraction": 0.5, "detail": ""}}
            )
        if mode == "error":
            return httpx.Response(200, json={**READY, "state": "ERROR"})
        if mode == "404":
            return httpx.Response(404, text="not found")
        if mode == "503":
            return httpx.Response(503, text="overloaded")
        raise httpx.ConnectError("connection refused", request=request)


def mock_client(fake: FakeWorkers) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(fake))


async def test_probe_classification():
    fake = FakeWorkers()
    pool = WorkerPool()
    w = pool.add_worker("http://w0:22400")
    async with mock_client(fake) as client:
        checker = HealthChecker(pool, client=client)
        await checker.probe(w)
        assert w.health == Health.UNKNOWN and w.capabilities == IMAGE
        await checker.probe(w)
        assert w.health == Health.HEALTHY

        fake.mode["w0"] = "loading"
        await checker.probe(w)
        assert w.health == Health.UNKNOWN and w.failures_total == 0
        assert w.last_probe["load_progress"]["fraction"] == 0.5

        fake.mode["w0"] = "404"
        await checker.probe(w)
        assert w.failures_total == 0 and w.last_error == "HTTP 404"

        for mode, n in (("503", 1), ("refused", 2), ("error", 3)):
            fake.mode["w0"] = mode
            await checker.probe(w)
            assert w.failures_total == n
        assert w.health == Health.UNHEALTHY and "ERROR" in w.last_error

        # A probe finishing after its worker was removed changes nothing.
        pool.remove_worker(w.id)
        fake.mode["w0"] = "ok"
        await checker.probe(w)
        assert w.ok_streak == 0


async def test_checker_background_healthy_then_unhealthy_and_runtime_workers():
    fake = FakeWorkers()
    pool = WorkerPool()
    w = pool.add_worker("http://w0:22400")
    client = mock_client(fake)
    checker = HealthChecker(pool, interval_s=0.01, timeout_s=0.5, jitter=0.2, client=client)

    async def until(pred, timeout=2.0):
        async with asyncio.timeout(timeout):
            while not pred():
                await asyncio.sleep(0.005)

    await checker.start()
    try:
        await until(lambda: w.health == Health.HEALTHY)
        assert fake.hits["w0"] >= 2
        fake.mode["w0"] = "refused"
        hits = fake.hits["w0"]
        await until(lambda: w.health == Health.UNHEALTHY)
        assert fake.hits["w0"] - hits >= 3 and w.failures_total >= 3

        # Added at runtime: picked up and probed; removed: no longer probed.
        w1 = pool.add_worker("http://w1:22401")
        await until(lambda: w1.health == Health.HEALTHY)
        pool.remove_worker(w1.id)
        await asyncio.sleep(0.1)  # supervisor reconciles every min(interval, 1 s)
        before = fake.hits["w1"]
        await asyncio.sleep(0.1)
        assert fake.hits["w1"] == before

        # Probes never override an operator state.
        fake.mode["w0"] = "ok"
        pool.mark_dead(w.id)
        await asyncio.sleep(0.1)
        assert w.health == Health.DEAD
    finally:
        await checker.stop()
        await client.aclose()
