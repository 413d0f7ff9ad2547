"""The pool's operator paths: drain and enable, mark dead, add and remove at runtime, cancel a
queued request, a fixed ETA. Fast, no network."""

from __future__ import annotations

import asyncio

import pytest

from gateway.pool.model import Health, NoCapableWorkerError, QueueCancelledError, QueueTimeoutError
from gateway.pool.worker_pool import WorkerPool
from tests.support.pool import healthy, settle


async def test_drain_finishes_running_session_takes_no_new_one_and_enable_restores():
    pool = WorkerPool()
    w = healthy(pool, "http://a:1")
    running = await pool.acquire()
    pool.set_disabled(w.id, True)
    assert w.health == Health.DISABLED and w.busy == 1  # the running session is untouched
    waiting = asyncio.create_task(pool.acquire())
    await settle()
    pool.release(running)  # the session ends: the slot is free but the worker is draining
    await settle()
    assert not waiting.done() and w.busy == 0 and pool.queue_length == 1
    for _ in range(3):  # probes keep succeeding while disabled; they never re-enable it
        pool.update_health(w.id, True)
    await settle()
    assert w.health == Health.DISABLED and not waiting.done()
    pool.set_disabled(w.id, False)  # enable: healthy at once (its probes were ok all along)
    lease = await asyncio.wait_for(waiting, 1)
    assert lease.worker is w and w.health == Health.HEALTHY
    pool.release(lease)


async def test_dead_is_sticky_until_enabled_and_unserveable_waiters_fail():
    pool = WorkerPool()
    w = healthy(pool, "http://a:1", capabilities=frozenset({"audio_output"}))
    pool.mark_dead(w.id)
    pool.update_health(w.id, True)
    pool.update_health(w.id, True)
    assert w.health == Health.DEAD
    with pytest.raises(NoCapableWorkerError):
        await pool.acquire(frozenset({"audio_output"}))
    pool.set_disabled(w.id, False)
    assert w.health == Health.HEALTHY
    pool.release(await pool.acquire(frozenset({"audio_output"})))


async def test_worker_added_at_runtime_takes_the_queue_and_removed_one_keeps_its_lease():
    pool = WorkerPool()
    a = healthy(pool, "http://a:1")
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire(ticket="t1"))
    second = asyncio.create_task(pool.acquire(ticket="t2"))
    await settle()
    assert pool.queue_length == 2
    b = pool.add_worker("http://b:2", slots=2)
    with pytest.raises(ValueError):
        pool.add_worker("http://b:2/")  # same URL twice
    await settle()
    assert pool.queue_length == 2  # UNKNOWN until probes admit it
    pool.update_health(b.id, True)
    pool.update_health(b.id, True)
    got = [await asyncio.wait_for(first, 1), await asyncio.wait_for(second, 1)]
    assert [g.worker for g in got] == [b, b] and [g.ticket for g in got] == ["t1", "t2"]
    # Remove a with a session running: the lease stays valid, releasing it frees nothing elsewhere.
    pool.remove_worker(a.id)
    assert pool.get_worker(a.id) is None
    pool.release(held)
    pool.release(held)
    for g in got:
        pool.release(g)
    assert b.busy == 0 and not b.sessions


async def test_cancel_a_queued_request():
    pool = WorkerPool()
    healthy(pool, "http://a:1")
    held = await pool.acquire()
    statuses = []
    victim = asyncio.create_task(pool.acquire(ticket="victim"))
    after = asyncio.create_task(pool.acquire(ticket="after", on_status=lambda s: statuses.append(s.position)))
    await settle()
    assert pool.cancel("victim", "removed by test")
    with pytest.raises(QueueCancelledError, match="removed by test"):
        await victim
    assert isinstance(QueueCancelledError("x"), QueueTimeoutError)  # REST callers treat it as "no worker in time"
    await settle()
    assert statuses[-1] == 1 and pool.queue_length == 1
    assert not pool.cancel("victim") and not pool.cancel("nobody")
    pool.release(held)
    pool.release(await asyncio.wait_for(after, 1))


async def test_fixed_eta_reaches_waiters_at_once():
    pool = WorkerPool(default_session_s=100)
    healthy(pool, "http://a:1")
    held = await pool.acquire()
    etas = []
    waiting = asyncio.create_task(pool.acquire(on_status=lambda s: etas.append(s.eta_s)))
    await settle()
    assert etas == [100]
    pool.set_eta_session_s(30)
    assert etas == [100, 30]
    pool.set_eta_session_s(None)
    assert etas[-1] == 100
    pool.release(held)
    pool.release(await asyncio.wait_for(waiting, 1))
