"""A session's connection to its gateway that may drop and come back (issue 72).

A phone that walks from Wi-Fi to mobile data, a laptop that sleeps a second, a gateway that dies:
the conversation lives here, in the worker, so none of them need end it. A resumable session's
channel is a ``Reattachable``: when its gateway connection closes with ``CLOSE_CLIENT_LOST`` (the
gateway saw its client drop) or, in a cluster whose gateways share the tokens, without a close at
all (the gateway itself went), the session is *held* for ``grace_s``: its reader waits, what it sends meanwhile is kept (audio excepted: nobody
hears it), and ``on_detached`` tells the session to stop what the listener was hearing. A gateway
that presents the session's resume token (its hash, ``matches``) within the grace period attaches
a new connection (``attach``) and the session goes on where it was. After the grace period the
reader sees the close, and the session ends as if the client had left then.

A close with any other code is the gateway's deliberate end (its client closed, the operator
ended it): final, as for a session that is not resumable.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import logging
import time
from collections.abc import Callable

from core.resume import CLOSE_CLIENT_LOST, CLOSE_NO_SESSION, CLOSE_TAKEN_OVER
from core.transport import ChannelClosed, EventChannel, Message

__all__ = ["CLOSE_NO_SESSION", "MAX_GRACE_S", "Reattachable"]

log = logging.getLogger(__name__)

GATEWAY_LOST = frozenset({1006, 1011, 1012})  # the gateway went (no close frame, or it stopped)
MAX_GRACE_S = 600.0  # a gateway's grace_s is capped here (a held session holds a slot)
BACKLOG_EVENTS = 512  # events kept while detached (a reply's end, transcripts, errors); the oldest go first


def is_audio(message: Message) -> bool:
    """The reply's audio (a binary frame or an audio delta event): not kept for an absent client."""
    return isinstance(message, bytes) or "audio.delta" in message[:64]


class Reattachable(EventChannel):
    """``first`` until it drops; then, within ``grace_s``, whatever ``attach`` gives."""

    def __init__(self, first: EventChannel, grace_s: float, token_hash: str, gateway_loss_holds: bool = False,
                 keeps: Callable[[Message], bool] = lambda m: not is_audio(m)) -> None:
        self.transport = first.transport
        self.grace_s = grace_s
        self.token_hash = token_hash
        self.keeps = keeps  # what is kept for the client while it is away (not the reply's audio)
        # Held when its gateway goes too: only where another gateway can know the token (a cluster's
        # shared store); a lone gateway that restarts knows none, and the slot would only wait.
        self.holding = frozenset({CLOSE_CLIENT_LOST} | (GATEWAY_LOST if gateway_loss_holds else set()))
        self.on_detached: Callable[[], None] | None = None
        self.on_attached: Callable[[], None] | None = None
        self._inner: EventChannel | None = first
        self._ended = asyncio.Event()  # the attached connection's: detached, replaced or closed
        self._back = asyncio.Event()
        self._backlog: collections.deque[Message] = collections.deque(maxlen=BACKLOG_EVENTS)
        self._closed = False
        self.detached_at: float | None = None
        self._why = ChannelClosed(1006, "the client left")  # the close that detached it
        self.reattached = 0  # connections attached after the first

    @property
    def attached(self) -> bool:
        return self._inner is not None

    def matches(self, token_hash: str) -> bool:
        return bool(token_hash) and hmac.compare_digest(token_hash.encode(), self.token_hash.encode())

    # ------------------------------------------------------------------ the session's side

    async def receive(self) -> Message:
        while True:
            if self._closed:
                raise ChannelClosed(self._why.code, self._why.reason)
            inner = self._inner
            if inner is None:
                await self._wait_for_return()
                continue
            try:
                return await inner.receive()
            except ChannelClosed as exc:
                if inner is not self._inner:
                    continue  # replaced meanwhile: read the new connection
                if exc.code not in self.holding or self._closed or self.grace_s <= 0:
                    raise
                self._detach(exc)

    async def send(self, message: Message) -> None:
        inner = self._inner
        if inner is not None:
            try:
                await inner.send(message)
                return
            except ChannelClosed:
                if self._closed:
                    raise
                # The connection went: the reader learns how (a hold, or the end) and acts.
        if self.keeps(message):
            self._backlog.append(message)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self._closed = True
        self._back.set()
        inner, self._inner = self._inner, None
        if inner is not None:
            await inner.close(code, reason)
        self._ended.set()

    # ------------------------------------------------------------------ the gateway's side

    async def attach(self, connection: EventChannel, first: list[Message]) -> asyncio.Event:
        """A new connection presented the session's token: ``first`` (what tells its client where
        the session stands), then what was kept while it was away, then the session goes on. A
        connection still attached is closed (``CLOSE_TAKEN_OVER``): one at a time. Returns the
        event set when this connection is detached, replaced or closed (its handler waits on it)."""
        if self._closed:
            raise ChannelClosed(self._why.code, "the session has ended")
        self._back.clear()
        old, self._inner = self._inner, None
        old_ended, self._ended = self._ended, asyncio.Event()
        if old is not None:
            old_ended.set()
            with contextlib.suppress(Exception):
                await old.close(CLOSE_TAKEN_OVER, "the session was resumed on another connection")
        try:
            for message in first:
                await connection.send(message)
            while self._backlog:  # the writer may add to it meanwhile: until it is empty, then live
                await connection.send(self._backlog.popleft())
        except ChannelClosed:
            self.detached_at = self.detached_at or time.monotonic()  # gone again: the grace runs on
            raise
        self._inner = connection
        self.reattached += 1
        away = time.monotonic() - self.detached_at if self.detached_at is not None else 0.0
        self.detached_at = None
        log.info("session reattached after %.1f s away", away)
        self._back.set()
        if self.on_attached is not None:
            self.on_attached()
        return self._ended

    def _detach(self, exc: ChannelClosed) -> None:
        self._inner = None
        self._ended.set()
        self._back.clear()
        self.detached_at = time.monotonic()
        self._why = exc
        log.info("session detached (%s %s): held %.0f s for its resume token", exc.code, exc.reason, self.grace_s)
        if self.on_detached is not None:
            self.on_detached()

    async def _wait_for_return(self) -> None:
        """Until a connection is attached; past the grace period, the close that detached it."""
        left = self.grace_s - (time.monotonic() - (self.detached_at or time.monotonic()))
        if not self._closed and left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._back.wait(), left)
        if self._inner is None and not self._closed:
            self._closed = True
            self._backlog.clear()
            self._why = ChannelClosed(self._why.code, self._why.reason or "the client did not come back")
            log.info("session not resumed within %.0f s: it ends", self.grace_s)
