"""``worker/read_ahead.py``: a session learns that its client left as soon as the close arrives,
not after working through everything the client had sent; what it reads ahead is bounded."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from core.transport import ChannelClosed, EventChannel, Message
from worker.read_ahead import ReadAhead


class ScriptedPeerDouble(EventChannel):
    """A test double of a client: ``messages`` then (if ``then_close``) its close; counts reads."""

    def __init__(self, messages: list[str], then_close: bool = True) -> None:
        self.messages = list(messages)
        self.then_close = then_close
        self.read = 0
        self.closed: tuple[int, str] | None = None

    async def receive(self) -> Message:
        await asyncio.sleep(0)
        if self.read < len(self.messages):
            self.read += 1
            return self.messages[self.read - 1]
        if self.then_close:
            raise ChannelClosed(1006, "gone")
        await asyncio.Event().wait()  # a client that sends nothing more
        raise AssertionError

    async def send(self, message: Message) -> None:
        pass

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)


async def test_a_client_that_left_is_known_after_a_few_messages_not_after_all():
    peer = ScriptedPeerDouble([f"m{i:05d}" for i in range(10_000)])
    channel = ReadAhead(peer, max_bytes=8 * 1024 * 1024)
    handled = []
    with pytest.raises(ChannelClosed):
        while True:
            handled.append(await channel.receive())
            await asyncio.sleep(0.001)  # the session's work on each (an append's VAD)
    assert handled == [f"m{i:05d}" for i in range(len(handled))]  # in order, none skipped before the close
    assert len(handled) < 100, len(handled)  # without reading ahead: all 10,000 (10 s here)
    with pytest.raises(ChannelClosed):  # and every later receive
        await channel.receive()


async def test_what_is_read_ahead_is_bounded_and_every_message_arrives():
    peer = ScriptedPeerDouble(["x" * 100] * 1000, then_close=False)
    channel = ReadAhead(peer, max_bytes=1000)
    first = await channel.receive()
    await asyncio.sleep(0.05)  # the pump runs while the session does not take
    assert first == "x" * 100 and peer.read <= 12, peer.read  # 1 taken + 10 buffered (+1 in hand)
    for _ in range(999):
        assert await channel.receive() == "x" * 100
    await channel.close(1000, "bye")
    assert peer.closed == (1000, "bye")


async def test_a_live_session_learns_its_client_left_without_working_through_what_waits():
    """The Live channel stops reading while ``MAX_PENDING`` events wait for the session; the
    client's departure, seen by the read-ahead below it, must still reach the session at its
    next ``receive``, not after the session has taken every waiting event."""
    from worker.live.channel import MAX_PENDING, LiveChannel

    audio = base64.b64encode(b"\0" * 960).decode()
    append = json.dumps({"type": "session.input_audio.append", "audio": audio})
    peer = ScriptedPeerDouble([append] * (4 * MAX_PENDING))
    below = ReadAhead(peer, max_bytes=8 * 1024 * 1024)
    live = LiveChannel(below, "sess_left", "omni", max_session_s=600, client_left=below.left)
    live.started = True  # as after session.start: appends go to the session
    live.config = {"format": {"type": "audio/pcm", "rate": 24000}}
    first = await live.receive()  # the reader starts, fills MAX_PENDING, and waits for the session
    assert json.loads(first)["type"] == "input_audio_buffer.append"
    await asyncio.sleep(0.05)  # the peer's close arrives meanwhile
    assert below.left.is_set()
    with pytest.raises(ChannelClosed):
        await live.receive()  # not the MAX_PENDING - 1 appends still waiting
    await live.close(1000)
