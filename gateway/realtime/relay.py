"""Opaque two-way relay between a client (any ``EventChannel``) and a worker WebSocket.

Messages pass through untouched (never decoded, re-chunked or buffered beyond the socket
libraries' own queues). Whichever side ends first decides how the other is closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from core.transport import ChannelClosed, EventChannel

log = logging.getLogger(__name__)

CLIENT_SEND_TIMEOUT_S = 10.0  # a client that takes this long to accept one frame is not reading
CLOSE_NOT_READING = 1008


class _ClientNotReading(Exception):
    pass


@dataclass(slots=True)
class RelayResult:
    """How the relay ended: ``ended_by`` is ``client``, ``worker`` or ``worker_failed``."""

    ended_by: str
    code: int
    reason: str


async def relay(client: EventChannel, worker: ClientConnection, first_messages: list[str] | None = None,
                on_worker_text: Callable[[str], None] | None = None, drop_prefix: str | None = None) -> RelayResult:
    """``on_worker_text`` sees each worker->client text frame (cheaply; it must not block or raise);
    text frames that start with ``drop_prefix`` are not passed on (the gateway's own metrics
    frames, for a client that did not ask for them)."""
    for message in first_messages or []:
        await worker.send(message)

    async def client_to_worker() -> RelayResult:
        while True:
            await worker.send(await client.receive())

    blocked_since: list[float | None] = [None]  # when the pending send to the client started

    async def to_client(message: str | bytes) -> None:
        # No wait_for per frame (it costs a task and a timer each); the watchdog below checks.
        blocked_since[0] = time.monotonic()
        await client.send(message)
        blocked_since[0] = None

    async def watchdog() -> RelayResult:
        """A client that takes CLIENT_SEND_TIMEOUT_S to accept one frame is not reading."""
        while True:
            await asyncio.sleep(1.0)
            since = blocked_since[0]
            if since is not None and time.monotonic() - since > CLIENT_SEND_TIMEOUT_S:
                raise _ClientNotReading

    async def worker_to_client() -> RelayResult:
        try:
            async for message in worker:
                if isinstance(message, str):
                    if on_worker_text is not None:
                        on_worker_text(message)
                    if drop_prefix is not None and message.startswith(drop_prefix):
                        continue
                await to_client(message)
        except ConnectionClosedOK:
            pass
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            if rcvd is None:  # no close frame: the worker died or the network cut it off
                return RelayResult("worker_failed", 1011, "worker connection lost")
            return RelayResult("worker", rcvd.code, rcvd.reason)
        # The iterator ends quietly on a normal close (1000/1001); anything else is in close_exc.
        rcvd = worker.protocol.close_rcvd
        if rcvd is None:
            return RelayResult("worker_failed", 1011, "worker connection lost")
        return RelayResult("worker", rcvd.code, rcvd.reason)

    tasks = [asyncio.create_task(client_to_worker()), asyncio.create_task(worker_to_client()),
             asyncio.create_task(watchdog())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    task = done.pop()
    result = _result(task)
    since = blocked_since[0]
    if result.ended_by == "worker_failed" and since is not None and time.monotonic() - since > 1.0:
        # Not the worker's fault: we stopped reading it (and answering its pings) because the
        # client stopped reading us.
        return RelayResult("client", CLOSE_NOT_READING, "client is not reading")
    return result


def _result(task: asyncio.Task) -> RelayResult:
    try:
        return task.result()
    except _ClientNotReading:
        return RelayResult("client", CLOSE_NOT_READING, "client is not reading")
    except ChannelClosed as exc:  # the client left (a receive), or was gone when sent to
        return RelayResult("client", exc.code, exc.reason)
    except ConnectionClosed as exc:
        if exc.rcvd is None:
            return RelayResult("worker_failed", 1011, "worker connection lost")
        return RelayResult("worker", exc.rcvd.code, exc.rcvd.reason)
