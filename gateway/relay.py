"""Opaque two-way relay between a client WebSocket and a worker WebSocket.

Frames pass through untouched (never decoded, re-chunked or buffered beyond the socket
libraries' own queues). Whichever side ends first decides how the other is closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RelayResult:
    """How the relay ended: ``ended_by`` is ``client``, ``worker`` or ``worker_failed``."""

    ended_by: str
    code: int
    reason: str


async def relay(client: WebSocket, worker: ClientConnection, first_messages: list[str] | None = None,
                on_worker_text: Callable[[str], None] | None = None) -> RelayResult:
    """``on_worker_text`` sees each worker->client text frame (cheaply; it must not block or raise)."""
    for message in first_messages or []:
        await worker.send(message)

    async def client_to_worker() -> RelayResult:
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                return RelayResult("client", message.get("code", 1000) or 1000, message.get("reason") or "")
            text = message.get("text")
            if text is not None:
                await worker.send(text)
            elif message.get("bytes") is not None:
                await worker.send(message["bytes"])

    async def worker_to_client() -> RelayResult:
        try:
            async for message in worker:
                if isinstance(message, str):
                    if on_worker_text is not None:
                        on_worker_text(message)
                    await client.send_text(message)
                else:
                    await client.send_bytes(message)
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

    tasks = [asyncio.create_task(client_to_worker()), asyncio.create_task(worker_to_client())]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    task = done.pop()
    try:
        return task.result()
    except WebSocketDisconnect as exc:
        return RelayResult("client", exc.code, exc.reason or "")
    except ConnectionClosed as exc:
        if exc.rcvd is None:
            return RelayResult("worker_failed", 1011, "worker connection lost")
        return RelayResult("worker", exc.rcvd.code, exc.rcvd.reason)
    except (RuntimeError, OSError) as exc:  # client socket already gone while sending to it
        return RelayResult("client", 1006, str(exc))
