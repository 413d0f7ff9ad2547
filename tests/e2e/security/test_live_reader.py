"""Issue 68, finding 1: one malformed Live message took a worker out. After ``session.start`` on
``/v1/live/sessions``, ``"[" * 100000 + "]" * 100000`` killed the worker's Live reader: the
session never learned the client left, and the worker held its slot until the idle timeout while
every new client assigned to it was closed with 1013. Now the message is an ``error`` event
(``nesting_too_deep``), the session goes on, and when the client leaves the next Live session on
that worker starts at once. On the shared default stack (``tests/conftest.py``; one worker)."""

from __future__ import annotations

import json
import time

import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import wait_idle

BOMB = "[" * 100_000 + "]" * 100_000
START = json.dumps({"type": "session.start", "event_id": "c_start", "session": {"model": "omniduplex-cascade"}})


def live_url(stack) -> str:
    return f"ws://127.0.0.1:{stack.port}/v1/live/sessions?model=omniduplex-cascade"


async def test_a_nesting_bomb_after_session_start_is_an_error_and_the_next_live_session_starts_at_once(stack):
    async with websockets.connect(live_url(stack), max_size=None) as ws:
        await ws.send(START)
        await recv_until(ws, "session.started", 30)
        await ws.send(BOMB)
        error = await recv_until(ws, "error", 5)
        assert error["error"]["code"] == "nesting_too_deep", error
        await ws.send(json.dumps({"type": "session.input_audio.mute", "event_id": "c_mute"}))
        muted = await recv_until(ws, "session.input_audio.muted", 5)
        assert muted["client_event_id"] == "c_mute"
    # The client left: the same (only) worker serves the next Live session at once.
    t0 = time.monotonic()
    async with websockets.connect(live_url(stack)) as ws:
        await ws.send(START)
        started = await recv_until(ws, "session.started", 1.0)
        assert started["client_event_id"] == "c_start" and time.monotonic() - t0 < 1.0
    await wait_idle(stack, 1.0)
