"""Streaming helpers shared by gateway and worker REST routes.

``ClosingStreamingResponse`` runs a cleanup callback when the response ends *however* it ends.
A plain ``StreamingResponse`` relies on its generator's ``finally``, which never runs if the
client leaves before the generator's first step: a leased slot would leak.

``iterate_in_thread`` drives a blocking iterator (model output, encoder) on one thread and hands
items to the event loop, with backpressure and a stop flag checked between items.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)
T = TypeVar("T")
_END = object()


class ClosingStreamingResponse(StreamingResponse):
    """A ``StreamingResponse`` whose ``on_close`` runs once, on every path (shielded from cancel)."""

    def __init__(self, content: AsyncIterator[Any], on_close: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._on_close()


async def iterate_in_thread(make: Callable[[], Iterator[T]], max_ahead: int = 64) -> AsyncIterator[T]:
    """Yield what ``make()`` yields, computed on a dedicated thread.

    At most ``max_ahead`` items wait unread (a slow reader pauses the producer). When the
    consumer stops early (client gone), the thread stops before its next item and closes the
    iterator on its own thread, so generator cleanup never races a running ``next()``.
    Exceptions from the iterator are re-raised here.
    """
    loop = asyncio.get_running_loop()
    items: asyncio.Queue[Any] = asyncio.Queue()
    room = threading.Semaphore(max_ahead)
    stop = threading.Event()

    def put(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(items.put_nowait, item)
        except RuntimeError:  # loop closed
            stop.set()

    def run() -> None:
        iterator = None
        try:
            iterator = make()
            for item in iterator:
                while not room.acquire(timeout=0.2):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                put(item)
            put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(exc)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    log.exception("closing a streamed iterator failed")

    thread = threading.Thread(target=run, name="stream", daemon=True)
    thread.start()
    try:
        while True:
            item = await items.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            room.release()
            yield item
    finally:
        stop.set()
