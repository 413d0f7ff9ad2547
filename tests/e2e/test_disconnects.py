"""Client disconnects at every moment of a session's life, clean close and TCP abort.

After each one, every slot must be idle within 1 s: the gateway's ``slots_busy`` and
``queue_length`` and the worker's ``active_sessions`` all back to 0. See docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest
import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import LONG, TEXT_ITEM, end, health, wait_idle, ws_url
from tests.support.stack import Stack


HOW = ["close", "abort"]
RACE_ITERATIONS = 200 if LONG else 25
IDLE_S = 1.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("disconnects"), workers=1, queue={"capacity": 8},
              auth={"per_ip": {"sessions_per_minute": 100000, "concurrent": 64}}).start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
async def idle_before(stack):
    await wait_idle(stack, timeout=10)  # a previous test's failure must not cascade
    yield


async def _after(delay: float, action) -> None:
    await asyncio.sleep(delay)
    await action


@pytest.mark.parametrize("how", HOW)
async def test_while_queued(stack, how):
    holder = await websockets.connect(ws_url(stack))
    await recv_until(holder, "session.created")
    waiter = await websockets.connect(ws_url(stack))
    await recv_until(waiter, "queue.position")
    await end(waiter, how)
    deadline = time.monotonic() + IDLE_S
    while (await health(stack))[0]["queue_length"] != 0:  # dropped from the queue at once
        assert time.monotonic() < deadline, "waiter still queued"
        await asyncio.sleep(0.02)
    # the holder is unaffected and the freed slot is not given to the departed waiter
    await holder.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "nope"}))
    assert (await recv_until(holder, "error"))["error"]["code"] == "item_not_found"
    await holder.close()
    await wait_idle(stack, IDLE_S)


@pytest.mark.parametrize("how", HOW)
async def test_slot_frees_in_the_instant_the_waiter_leaves(stack, how):
    """The leak the reference demo had: a queued client leaves in the same instant a worker frees
    up, before the gateway notices the disconnect. Jitter moves the two events across each other
    so some iterations land in the instant of assignment."""
    rng = random.Random(f"race-{how}")
    for i in range(RACE_ITERATIONS):
        holder = await websockets.connect(ws_url(stack))
        await recv_until(holder, "session.created")
        waiter = await websockets.connect(ws_url(stack))
        await recv_until(waiter, "queue.position")
        jitter = rng.uniform(-0.01, 0.01)

        await asyncio.gather(_after(max(0.0, jitter), end(holder, rng.choice(HOW))),
                             _after(max(0.0, -jitter), end(waiter, how)))
        try:
            await wait_idle(stack, IDLE_S)
        except AssertionError as exc:
            raise AssertionError(f"iteration {i} (jitter {jitter * 1000:.1f} ms): {exc}") from None


@pytest.mark.parametrize("how", HOW)
async def test_right_after_queue_assigned(stack, how):
    holder = await websockets.connect(ws_url(stack))
    await recv_until(holder, "session.created")
    waiter = await websockets.connect(ws_url(stack))
    await recv_until(waiter, "queue.position")
    await holder.close()
    await recv_until(waiter, "queue.assigned")
    await end(waiter, how)
    await wait_idle(stack, IDLE_S)
    # and immediately assigned (no queue) too
    ws = await websockets.connect(ws_url(stack))
    await recv_until(ws, "queue.assigned")
    await end(ws, how)
    await wait_idle(stack, IDLE_S)


@pytest.mark.parametrize("how", HOW)
async def test_before_session_update(stack, how):
    ws = await websockets.connect(ws_url(stack))
    await recv_until(ws, "session.created")
    await end(ws, how)
    await wait_idle(stack, IDLE_S)


@pytest.mark.parametrize("how", HOW)
async def test_mid_response(stack, how):
    ws = await websockets.connect(ws_url(stack))
    await recv_until(ws, "session.created")
    await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    await ws.send(json.dumps(TEXT_ITEM))
    await ws.send(json.dumps({"type": "response.create"}))
    await recv_until(ws, "response.output_audio.delta", timeout=60)
    await end(ws, how)
    await wait_idle(stack, IDLE_S)


@pytest.mark.parametrize("how", HOW)
async def test_during_pause(stack, how):
    ws = await websockets.connect(ws_url(stack))
    await recv_until(ws, "session.created")
    await ws.send(json.dumps({"type": "session.pause"}))
    await recv_until(ws, "session.paused")
    await end(ws, how)
    await wait_idle(stack, IDLE_S)


@pytest.mark.parametrize("how", HOW)
async def test_while_sending_early_events_in_queue(stack, how):
    """Events sent while queued are kept for the worker; leaving with them pending leaks nothing."""
    holder = await websockets.connect(ws_url(stack))
    await recv_until(holder, "session.created")
    waiter = await websockets.connect(ws_url(stack))
    await recv_until(waiter, "queue.position")
    for _ in range(10):
        await waiter.send(json.dumps({"type": "session.update", "session": {"instructions": "Be brief."}}))
    await asyncio.gather(holder.close(), end(waiter, how))
    await wait_idle(stack, IDLE_S)
