"""The transport seam: a realtime session through the gateway's proxy over a channel that is not
a WebSocket. What a WebRTC call will plug in: queueing, relaying and the slot's release must work
for any ``EventChannel``, with the same events and close codes.

The client is ``MemoryChannelDouble`` (a test double: two in-memory queues); the worker is a
small echo server on a real WebSocket (``websockets``), which is how the gateway reaches workers.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import serve

from core.config import AppConfig
from core.transport import ChannelClosed, EventChannel
from gateway.pool.worker_pool import WorkerPool
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.request import SessionRequest
from tests.support.pool import healthy


class MemoryChannelDouble(EventChannel):
    """A client in memory: the test puts client events in, reads server events out."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()  # client -> gateway; None = leave
        self.outbox: asyncio.Queue[str] = asyncio.Queue()  # gateway -> client
        self.closed: tuple[int, str] | None = None

    async def receive(self) -> str | bytes:
        message = await self.inbox.get()
        if message is None:
            raise ChannelClosed(1000, "client left")
        return message

    async def send(self, message: str | bytes) -> None:
        if self.closed is not None:
            raise ChannelClosed(1006, "closed")
        await self.outbox.put(message if isinstance(message, str) else message.decode())

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed is None:
            self.closed = (code, reason)

    async def next_event(self, timeout: float = 5.0) -> dict:
        return json.loads(await asyncio.wait_for(self.outbox.get(), timeout))


@pytest.fixture
async def echo_worker():
    """A worker double: sends session.created, then echoes each event back as ``echo``."""
    seen: list[str] = []

    async def handler(conn) -> None:
        await conn.send(json.dumps({"type": "session.created", "event_id": "e0", "session": {}}))
        async for message in conn:
            seen.append(message)
            await conn.send(json.dumps({"type": "echo", "of": json.loads(message)["type"]}))

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}", seen


def one_worker_pool(url: str) -> WorkerPool:
    pool = WorkerPool()
    healthy(pool, url)
    return pool


async def test_a_session_over_a_memory_channel_is_queued_relayed_and_released(echo_worker):
    url, seen = echo_worker
    pool = one_worker_pool(url)
    config = AppConfig.model_validate({"recording": {"enabled": False}})
    blocker = await pool.acquire()  # the only slot is taken: the session waits in the queue

    client = MemoryChannelDouble()
    request = SessionRequest(extensions=frozenset({"queue.position", "queue.assigned"}), client_ip="10.0.0.9")
    proxy = RealtimeProxy(client, request, pool, config)
    running = asyncio.create_task(proxy.run())

    queued = await client.next_event()
    assert queued["type"] == "queue.position" and queued["position"] == 1
    await client.inbox.put(json.dumps({"type": "session.update", "session": {}}))  # sent while queued
    await asyncio.sleep(0.05)
    assert proxy.state == "queued" and seen == []

    pool.release(blocker)
    assert (await client.next_event())["type"] == "queue.assigned"
    assert (await client.next_event())["type"] == "session.created"
    assert await client.next_event() == {"type": "echo", "of": "session.update"}  # kept, then forwarded
    await client.inbox.put(json.dumps({"type": "response.create"}))
    assert await client.next_event() == {"type": "echo", "of": "response.create"}
    assert proxy.state == "active" and proxy.info()["client"] == "10.0.0.9"

    await client.inbox.put(None)  # the client leaves
    await asyncio.wait_for(running, 5)
    assert proxy.state == "ended"
    assert pool.snapshot(with_queue=False)["busy"] == 0  # the slot is back


async def test_a_client_that_leaves_while_queued_takes_no_slot(echo_worker):
    url, seen = echo_worker
    pool = one_worker_pool(url)
    blocker = await pool.acquire()
    client = MemoryChannelDouble()
    proxy = RealtimeProxy(client, SessionRequest(), pool, AppConfig())
    running = asyncio.create_task(proxy.run())
    await asyncio.sleep(0.05)
    assert pool.snapshot(with_queue=True)["queue_length"] == 1

    await client.inbox.put(None)
    await asyncio.wait_for(running, 5)
    assert pool.snapshot(with_queue=True)["queue_length"] == 0
    pool.release(blocker)
    await asyncio.sleep(0.05)
    assert pool.snapshot(with_queue=False)["busy"] == 0 and seen == []


async def test_a_worker_that_vanishes_is_reported_to_the_client_with_close_1011(echo_worker):
    url, _ = echo_worker
    pool = one_worker_pool(url.replace(url.rsplit(":", 1)[1], "1"))  # nothing listens on port 1
    client = MemoryChannelDouble()
    proxy = RealtimeProxy(client, SessionRequest(), pool, AppConfig())
    await asyncio.wait_for(proxy.run(), 10)
    error = await client.next_event()
    assert error["type"] == "error" and error["error"]["code"] == "worker_unavailable"
    assert client.closed is not None and client.closed[0] == 1011
    assert pool.snapshot(with_queue=False)["busy"] == 0

