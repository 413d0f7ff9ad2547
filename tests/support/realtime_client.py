"""Realtime test clients.

- :func:`recv_until`: read a raw WebSocket until an event of one type arrives (the one helper for
  that: async, and :func:`recv_until_sync` for ``websockets.sync`` sockets).
- :class:`Client`: one connection that records every server event and validates each one against
  the ``openai`` package's own types (``core/openai_events.py``), as the OpenAI Agents SDK does."""

from __future__ import annotations

import asyncio
import json
import time

import websockets

from core.openai_events import validation_error
from core.protocol import EXTENSION_EVENTS

_open: list = []


async def recv_until(ws, kind: str, timeout: float = 30.0, log: list | None = None, *,
                     timed: bool = False, raise_on_error: bool = False) -> dict:
    """Read ``ws`` until an event of ``kind`` arrives and return it; AssertionError naming the last
    events seen after ``timeout`` seconds. ``log``: every event read is appended to it (as
    ``(time.monotonic(), event)`` with ``timed``); ``raise_on_error``: an ``error`` event (when
    not waiting for one) fails at once."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while True:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            ev = json.loads(await asyncio.wait_for(ws.recv(), left))
        except TimeoutError:
            raise AssertionError(f"no {kind} within {timeout}s; saw {seen[-15:]}") from None
        seen.append(ev["type"])
        if log is not None:
            log.append((time.monotonic(), ev) if timed else ev)
        if raise_on_error and ev["type"] == "error" and kind != "error":
            raise AssertionError(f"error event: {ev['error']}")
        if ev["type"] == kind:
            return ev


def recv_until_sync(ws, kind: str, timeout: float = 20.0) -> dict:
    """:func:`recv_until` for a ``websockets.sync`` connection."""
    deadline = time.monotonic() + timeout
    while True:
        ev = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if ev["type"] == kind:
            return ev


async def close_leftovers() -> None:
    """Close sockets a failed test left open, so the next test gets the worker's slot."""
    while _open:
        await _open.pop().close()


class Client:
    """One connection; records every event and checks each against the openai types."""

    def __init__(self, ws, beta: bool = False, extensions: frozenset[str] = frozenset(), timeout: float = 60.0) -> None:
        """``timeout``: how long :meth:`until` waits unless told."""
        self.ws, self.beta, self.extensions, self.timeout = ws, beta, extensions, timeout
        self.events: list[dict] = []
        self.invalid: list[str] = []

    @classmethod
    async def open(cls, stack, beta: bool = False, query: str = "", extensions: frozenset[str] = frozenset(),
                   created: str = "session.created") -> Client:
        deadline = time.monotonic() + 20
        while stack.health()["slots_busy"]:  # one slot: wait for the last test's session to end
            assert time.monotonic() < deadline, "the worker's slot was never released"
            await asyncio.sleep(0.05)
        headers = {"OpenAI-Beta": "realtime=v1"} if beta else {}
        url = f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-cascade{query}"
        c = cls(await websockets.connect(url, additional_headers=headers, max_size=None), beta, extensions)
        _open.append(c.ws)
        await c.until(created)
        return c

    def _check(self, event: dict) -> None:
        kind = event["type"]
        if kind in EXTENSION_EVENTS:
            if kind not in self.extensions:
                self.invalid.append(f"{kind}: an extension event this client did not ask for")
            return
        why = validation_error(event, self.beta)
        if why:
            self.invalid.append(f"{kind}: {why}")

    async def send(self, kind: str, **fields) -> None:
        await self.ws.send(json.dumps({"type": kind, **fields}))

    async def until(self, kind: str, timeout: float | None = None, count: int = 1) -> dict:
        """The ``count``-th event of ``kind`` (read on until it has come)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while sum(e["type"] == kind for e in self.events) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind}; saw {[(e['type'], e.get('error')) for e in self.events][-12:]}")
            try:
                event = json.loads(await asyncio.wait_for(self.ws.recv(), left))
            except TimeoutError:
                continue
            self._check(event)
            self.events.append(event)
        return [e for e in self.events if e["type"] == kind][count - 1]

    async def settle(self, seconds: float = 0.3) -> None:
        while True:
            try:
                event = json.loads(await asyncio.wait_for(self.ws.recv(), seconds))
            except TimeoutError:
                return
            self._check(event)
            self.events.append(event)

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    async def error(self, type: str, **fields) -> dict:  # noqa: A002 - the event's own field name
        """Send one event and return the error it causes."""
        n = len(self.of("error"))
        await self.send(type, **fields)
        return (await self.until("error", count=n + 1))["error"]

    async def close(self) -> None:
        await self.settle(0.2)
        await self.ws.close()
        assert not self.invalid, "\n".join(self.invalid)

    # ---------------------------------------------------------------- dialect helpers

    def added(self) -> str:
        return "conversation.item.created" if self.beta else "conversation.item.added"

    async def update(self, **session) -> dict:
        n = len(self.of("session.updated"))
        if not self.beta:
            session = {"type": "realtime", **session}
        await self.send("session.update", session=session)
        return (await self.until("session.updated", count=n + 1))["session"]

    async def turn_based(self) -> None:
        if self.beta:
            await self.update(turn_detection=None, temperature=0)
        else:
            await self.update(audio={"input": {"turn_detection": None}})

    async def typed(self, text: str, **item) -> dict:
        n = len(self.of(self.added()))
        await self.send("conversation.item.create", item={"type": "message", "role": "user",
                                                          "content": [{"type": "input_text", "text": text}], **item})
        return await self.until(self.added(), count=n + 1)

    async def respond(self, **response) -> dict:
        n = len(self.of("response.done"))
        await self.send("response.create", response={"max_output_tokens": 12, **response})
        return (await self.until("response.done", count=n + 1, timeout=90))["response"]
