"""A realtime client in memory for the worker's ``RealtimeSession``: the test puts client events in
and reads server events out, each checked against the ``openai`` package's own types (as the
OpenAI Agents SDK parses them). No sockets, no gateway: a session on a scripted backend runs in
milliseconds."""

from __future__ import annotations

import asyncio
import json

from core.openai_events import validation_error
from core.transport import ChannelClosed, EventChannel


class SessionChannel(EventChannel):
    """A client in memory: client events in, server events out (each checked against the openai types)."""

    def __init__(self, beta: bool = False) -> None:
        self.beta = beta
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue()
        self.events: list[dict] = []
        self.times: list[float] = []  # when each event arrived (loop time)
        self.invalid: list[str] = []
        self.arrived = asyncio.Event()

    def validation_error(self, event: dict) -> str | None:
        return validation_error(event, self.beta)

    async def receive(self) -> str:
        message = await self.inbox.get()
        if message is None:
            raise ChannelClosed(1000, "client left")
        return message

    async def send(self, message: str) -> None:
        event = json.loads(message)
        why = self.validation_error(event)
        if why:
            self.invalid.append(f"{event['type']}: {why}")
        self.events.append(event)
        self.times.append(asyncio.get_running_loop().time())
        self.arrived.set()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        pass

    def client(self, kind: str, **fields) -> None:
        self.inbox.put_nowait(json.dumps({"type": kind, **fields}))

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    async def until(self, kind: str, count: int = 1, timeout: float = 10.0) -> dict:
        async with asyncio.timeout(timeout):
            while len(self.of(kind)) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.of(kind)[count - 1]
