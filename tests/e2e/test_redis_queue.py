"""The shared FIFO queue and slot leases in Redis (``gateway/pool/redis_queue.py``), against a
real ``redis-server`` started here: FIFO across gateways, no slot handed out twice under random
load from three gateways, and a gateway that stops beating loses its slots to the queue."""

from __future__ import annotations

import asyncio
import random
import shutil
import time

import pytest

from gateway.pool.redis_queue import ClusterUnavailable, QueueFull, RedisQueue
from launcher.redis_server import start_redis

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian redis-server not installed")


@pytest.fixture
async def gateways(redis_url, request):
    """Three gateways' queues on one Redis, each test under its own key prefix."""
    import redis.asyncio as aioredis

    prefix = f"t{abs(hash(request.node.name)) % 10**8}"
    clients, queues = [], []
    for name in ("a", "b", "c"):
        client = aioredis.from_url(redis_url)
        q = RedisQueue(client, gateway_id=name, prefix=prefix, lease_ttl_s=1.5, capacity=500)
        await q.start()
        clients.append(client)
        queues.append(q)
    yield queues
    for q in queues:  # bounded: a teardown that hangs must fail the test, not the run
        await asyncio.wait_for(q.close(), 5)
    for c in clients:
        await asyncio.wait_for(c.aclose(), 5)


async def test_fifo_across_gateways(gateways):
    a, b, _ = gateways
    await a.upsert_worker("w0", "http://w0", 1, frozenset({"audio"}), "healthy")
    first = await a.acquire()
    assert first.worker_id == "w0"
    places: list[int] = []
    on_b = asyncio.create_task(b.acquire(on_place=lambda place, _length: places.append(place)))  # queued first, on B
    await asyncio.sleep(0.05)
    on_a = asyncio.create_task(a.acquire())  # then on gateway A
    await asyncio.sleep(0.05)
    assert await a.queue_length() == 2 and set(places) == {1}
    await a.release(first)
    served = await asyncio.wait_for(on_b, 2)
    assert served.worker_id == "w0" and not on_a.done()
    await b.release(served)
    await b.release(await asyncio.wait_for(on_a, 2))
    assert await a.busy("w0") == 0 and await a.queue_length() == 0


async def test_requirements_and_capacity(gateways):
    a, b, _ = gateways
    await a.upsert_worker("text", "http://t", 1, frozenset({"text_output"}), "healthy")
    await a.upsert_worker("omni", "http://o", 1, frozenset({"text_output", "audio_input"}), "healthy")
    lease = await a.acquire(frozenset({"text_output"}))
    assert lease.worker_id == "text", "the least over-qualified worker first"
    audio = await b.acquire(frozenset({"audio_input"}))
    assert audio.worker_id == "omni"
    b.capacity = 1
    waiting = asyncio.create_task(b.acquire(frozenset({"audio_input"})))
    await asyncio.sleep(0.05)
    with pytest.raises(QueueFull):
        await b.acquire(frozenset({"text_output"}))
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert await a.queue_length() == 0, "a cancelled waiter leaves the queue"
    await a.release(lease)
    await b.release(audio)


async def test_no_slot_is_handed_out_twice_under_random_load(gateways):
    rng = random.Random(7)
    await gateways[0].upsert_worker("w0", "http://w0", 2, frozenset(), "healthy")
    await gateways[0].upsert_worker("w1", "http://w1", 2, frozenset(), "healthy")
    holding = {"w0": set(), "w1": set()}
    worst = {"w0": 0, "w1": 0}

    async def client(i: int) -> None:
        q = gateways[i % 3]
        task = asyncio.ensure_future(q.acquire())
        if rng.random() < 0.25:  # some give up while queued
            await asyncio.sleep(rng.random() * 0.05)
            task.cancel()
            try:
                lease = await task
            except asyncio.CancelledError:
                return
        else:
            lease = await asyncio.wait_for(task, 60)
        holding[lease.worker_id].add(lease.ticket)
        worst[lease.worker_id] = max(worst[lease.worker_id], len(holding[lease.worker_id]))
        await asyncio.sleep(rng.random() * 0.02)
        holding[lease.worker_id].discard(lease.ticket)
        await q.release(lease)

    await asyncio.gather(*(client(i) for i in range(200)))
    assert worst["w0"] <= 2 and worst["w1"] <= 2 and max(worst.values()) == 2
    assert await gateways[0].busy("w0") == 0 and await gateways[0].busy("w1") == 0
    assert await gateways[0].queue_length() == 0


async def test_a_gateway_that_stops_beating_loses_its_slot(gateways):
    a, _, c = gateways
    await a.upsert_worker("w0", "http://w0", 1, frozenset(), "healthy")
    held = await c.acquire()
    waiting = asyncio.create_task(a.acquire())
    await c.close()  # gateway C dies: no release, no more heartbeats
    started = time.monotonic()
    lease = await asyncio.wait_for(waiting, 5)
    assert lease.worker_id == "w0" and held.ticket != lease.ticket
    assert time.monotonic() - started < 1.5 + 1.0, "freed within the lease time (+ one beat)"
    await a.release(lease)
    assert await a.busy("w0") == 0


async def test_redis_away_gives_clear_errors_and_comes_back(tmp_path):
    """Redis stops: a queued waiter and a new request get ``ClusterUnavailable`` (not a hang);
    once it is back the queue works again (its state starts empty: no persistence here)."""
    from gateway.pool.redis_queue import redis_client

    server = start_redis(tmp_path)
    client = redis_client(server.url)  # the gateway's own client
    q = RedisQueue(client, gateway_id="a", lease_ttl_s=1.5)
    try:
        await q.start()
        await q.upsert_worker("w0", "http://w0", 1, frozenset(), "healthy")
        held = await q.acquire()
        waiting = asyncio.create_task(q.acquire())
        await asyncio.sleep(0.1)
        server.kill()
        with pytest.raises(ClusterUnavailable, match="unreachable"):
            await asyncio.wait_for(waiting, 5)
        with pytest.raises(ClusterUnavailable):
            await asyncio.wait_for(q.acquire(), 5)
        server = start_redis(tmp_path, server.port)
        await q.upsert_worker("w0", "http://w0", 1, frozenset(), "healthy")
        again = await asyncio.wait_for(q.acquire(), 5)
        assert again.worker_id == "w0" and again.ticket != held.ticket
        await q.release(again)
        assert await q.busy("w0") == 0 and await q.queue_length() == 0
    finally:
        await asyncio.wait_for(q.close(), 5)
        await asyncio.wait_for(client.aclose(), 5)
        server.kill()


async def test_a_burst_of_joins_queues_for_redis_connections(redis_url):
    """300 clients joining one gateway at once (more than its Redis connections) all queue."""
    from gateway.pool.redis_queue import redis_client

    client = redis_client(redis_url)
    q = RedisQueue(client, gateway_id="burst", prefix="burst", lease_ttl_s=5, capacity=1000)
    await q.start()
    try:
        await q.upsert_worker("w0", "http://w0", 1, frozenset(), "healthy")
        holder = await q.acquire()
        places: dict[int, int] = {}
        waiters = [asyncio.create_task(q.acquire(on_place=lambda p, n, i=i: places.__setitem__(i, p)))
                   for i in range(300)]
        deadline = time.monotonic() + 20
        while len(places) < 300:
            assert time.monotonic() < deadline and not any(w.done() for w in waiters), len(places)
            await asyncio.sleep(0.05)
        assert await q.queue_length() == 300
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await q.release(holder)
        assert await q.queue_length() == 0 and await q.busy("w0") == 0
    finally:
        await q.close()
        await client.aclose()


async def test_a_resumable_lease_outlives_its_gateway_and_moves_to_the_one_that_brings_it_back(gateways):
    """Issue 72: a dead gateway's resumable session keeps its slot for the grace period (the
    worker holds it), another gateway takes the lease over with the token's hash and the right
    owner, and the old gateway can no longer free it."""
    a, b, c = gateways
    await a.upsert_worker("w0", "http://w0", 1, frozenset(), "healthy")
    held = await c.acquire()
    assert await c.call("resumable", held.ticket, "hash1", "sess_1", "owner1", 10_000, "c") == 1
    waiting = asyncio.create_task(a.acquire())
    await c.close()  # gateway C dies with the session
    await asyncio.sleep(1.5 + 1.0)  # past its lease time: the reaper has been
    assert not waiting.done() and await a.busy("w0") == 1, "a resumable session's slot was freed by the reaper"
    assert await b.call("adopt", "hash1", "someone-else", "b") == ["invalid"]  # a stolen token
    assert await b.call("adopt", "nohash", "owner1", "b") == ["invalid"]
    answer = await b.call("adopt", "hash1", "owner1", "b")
    assert answer[:4] == ["ok", "sess_1", held.ticket, "w0"]
    assert await a.call("leave", held.ticket, "c") == "none"  # its old gateway's release frees nothing
    assert await a.busy("w0") == 1 and not waiting.done()
    assert await b.call("leave", held.ticket, "b") == "released"
    lease = await asyncio.wait_for(waiting, 2)
    assert await b.call("adopt", "hash1", "owner1", "b") == ["expired"]  # the session ended: told so
    await a.release(lease)
    assert await a.busy("w0") == 0


async def test_a_held_lease_nobody_comes_back_for_is_freed_after_its_grace(gateways):
    a, _, c = gateways
    await a.upsert_worker("w0", "http://w0", 1, frozenset(), "healthy")
    held = await c.acquire()
    await c.call("resumable", held.ticket, "hash2", "sess_2", "", 500, "c")
    waiting = asyncio.create_task(a.acquire())
    await c.close()
    lease = await asyncio.wait_for(waiting, 1.5 + 0.5 + 2.0)  # lease time, grace, and a beat or two
    assert lease.worker_id == "w0"
    assert await a.call("adopt", "hash2", "", "a") == ["expired"]
    await a.release(lease)
