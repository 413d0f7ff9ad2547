"""A session's client read ahead of the session, so a client that leaves is known at once.

A session handles its client's events one by one, and some take real work: an audio append runs
the VAD over its samples in a thread. A client that sent a minute of audio in a burst and left was
noticed only once the worker had worked through all of it (10,000 appends of 20 ms: its slot held
2.5 s, the next client refused meanwhile; found by the fuzz, issue 68). Reading ahead costs next
to nothing per message, so the peer's close is seen as soon as it arrives; what was read and not
handled yet is then dropped (its sender is gone, and nobody hears a reply to it) and the next
``receive`` raises.

What is read ahead is bounded by ``max_bytes`` (``limits.read_ahead_bytes``, 32 MiB: more than the
sockets between a client and the worker hold in flight, so a burst that fits in them is dropped at
once when its client leaves): past it the pump waits, so a client that sends faster than the
session works is held back by its socket, not buffered without end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

from core.transport import EventChannel, Message


class ReadAhead(EventChannel):
    """``inner`` read by a pump task into a bounded buffer; ``receive`` takes from the buffer."""

    def __init__(self, inner: EventChannel, max_bytes: int) -> None:
        self.inner = inner
        self.transport = inner.transport
        self.max_bytes = max_bytes
        self._ready: collections.deque[Message] = collections.deque()
        self._bytes = 0
        self._gone: BaseException | None = None  # why the pump stopped: the peer left, or the transport failed
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._pump_task: asyncio.Task | None = None
        self.left = asyncio.Event()  # the peer has gone (or its transport failed): for a channel above

    async def receive(self) -> Message:
        if self._pump_task is None:
            self._pump_task = asyncio.create_task(self._pump(), name="read-ahead")
        while self._gone is None and not self._ready:
            self._arrived.clear()
            await self._arrived.wait()
        if self._gone is not None:
            raise self._gone
        message = self._ready.popleft()
        self._bytes -= len(message)
        self._room.set()
        return message

    async def send(self, message: Message) -> None:
        await self.inner.send(message)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump_task
        await self.inner.close(code, reason)

    async def _pump(self) -> None:
        try:
            while True:
                while self._bytes >= self.max_bytes:  # the session is behind: stop reading
                    self._room.clear()
                    await self._room.wait()
                message = await self.inner.receive()
                self._ready.append(message)
                self._bytes += len(message)
                self._arrived.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - ChannelClosed, or a transport failure: the session's to see
            self._ready.clear()  # unheard: the client is gone
            self._bytes = 0
            self._gone = exc
            self._arrived.set()
            self.left.set()
