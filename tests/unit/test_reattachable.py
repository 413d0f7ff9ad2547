"""The worker's side of a resumable session (issue 72, ``worker/reattachable.py``): a dropped
connection holds the session, a new one takes it on with what was kept, the grace period ends it."""

from __future__ import annotations

import asyncio
import json

import pytest

from core.resume import CLOSE_CLIENT_LOST, CLOSE_TAKEN_OVER
from core.transport import ChannelClosed, EventChannel
from worker.reattachable import Reattachable


class ConnectionDouble(EventChannel):
    """A gateway connection in memory: ``drop(code)`` ends it as the gateway's close would."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[str | int] = asyncio.Queue()
        self.sent: list[str | bytes] = []
        self.closed_with: int | None = None

    def drop(self, code: int) -> None:
        self.inbox.put_nowait(code)

    async def receive(self) -> str:
        message = await self.inbox.get()
        if isinstance(message, int):
            self.closed_with = self.closed_with or message
            raise ChannelClosed(message)
        return message

    async def send(self, message: str | bytes) -> None:
        if self.closed_with is not None:
            raise ChannelClosed(self.closed_with)
        self.sent.append(message)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed_with is None:
            self.closed_with = code
            self.inbox.put_nowait(1006)


def event(kind: str) -> str:
    return json.dumps({"type": kind})


async def test_a_dropped_connection_is_held_and_a_new_one_goes_on_with_what_was_kept():
    first, second = ConnectionDouble(), ConnectionDouble()
    link = Reattachable(first, grace_s=5, token_hash="h")
    lost, back = [], []
    link.on_detached, link.on_attached = lambda: lost.append(1), lambda: back.append(1)
    first.inbox.put_nowait(event("one"))
    assert json.loads(await link.receive())["type"] == "one"
    first.drop(CLOSE_CLIENT_LOST)
    reading = asyncio.create_task(link.receive())
    await asyncio.sleep(0.01)
    assert lost == [1] and not reading.done() and not link.attached  # held, not ended
    await link.send(event("response.done"))  # made while away: kept
    await link.send(event("response.output_audio.delta"))  # audio nobody hears: not kept
    await link.send(b"\x00" * 8)
    ended = await link.attach(second, [event("session.created")])
    assert [json.loads(m)["type"] for m in second.sent] == ["session.created", "response.done"]
    assert back == [1] and link.attached
    second.inbox.put_nowait(event("two"))
    assert json.loads(await asyncio.wait_for(reading, 1))["type"] == "two"
    await link.close(1000)
    assert ended.is_set() and second.closed_with == 1000


async def test_the_gateway_lost_is_held_in_a_cluster_but_a_deliberate_close_ends_it():
    cases = [(1006, True, True), (1012, True, True), (1006, False, False), (1000, True, False), (1008, True, False)]
    for code, cluster, held in cases:
        conn = ConnectionDouble()
        link = Reattachable(conn, grace_s=5, token_hash="h", gateway_loss_holds=cluster)
        conn.drop(code)
        reading = asyncio.create_task(link.receive())
        await asyncio.sleep(0.01)
        assert reading.done() is not held, code
        if not held:
            with pytest.raises(ChannelClosed):
                reading.result()
        reading.cancel()


async def test_nobody_back_within_the_grace_period_ends_the_session():
    conn = ConnectionDouble()
    link = Reattachable(conn, grace_s=0.2, token_hash="h")
    conn.drop(CLOSE_CLIENT_LOST)
    with pytest.raises(ChannelClosed) as ended:
        await asyncio.wait_for(link.receive(), 2)
    assert ended.value.code == CLOSE_CLIENT_LOST
    with pytest.raises(ChannelClosed):  # and nobody attaches afterwards
        await link.attach(ConnectionDouble(), [])


async def test_a_newer_connection_replaces_one_still_attached():
    old, new = ConnectionDouble(), ConnectionDouble()
    link = Reattachable(old, grace_s=5, token_hash="h")
    reading = asyncio.create_task(link.receive())
    await asyncio.sleep(0.01)
    await link.attach(new, [event("session.created")])
    assert old.closed_with == CLOSE_TAKEN_OVER
    new.inbox.put_nowait(event("from the new one"))
    assert json.loads(await asyncio.wait_for(reading, 1))["type"] == "from the new one"


def test_the_token_must_match():
    link = Reattachable(ConnectionDouble(), grace_s=5, token_hash="abc")
    assert link.matches("abc") and not link.matches("abd") and not link.matches("")
