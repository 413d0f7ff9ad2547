"""Fields of the wrong shape in a Realtime session's events are refused with an ``error`` naming
the field, and the session goes on (found by ``python -m bench fuzz``: a list inside
``output_modalities`` ended the session with 1011 as a worker error)."""

from __future__ import annotations

import asyncio

import pytest

from core.config import LimitsConfig
from core.protocol import Dialect
from tests.support.scripted_backend import ScriptedBackend
from tests.support.session_channel import SessionChannel
from worker.session import RealtimeSession


@pytest.mark.parametrize("modalities", [[["audio"]], [{"a": 1}], ["text", ["text"]]])
async def test_unhashable_output_modalities_are_an_error_and_the_session_goes_on(modalities):
    channel = SessionChannel()
    session = RealtimeSession(channel, ScriptedBackend(["Hello", "there."]), Dialect(False), LimitsConfig())
    task = asyncio.create_task(session.run())
    try:
        await channel.until("session.created")
        channel.client("response.create", event_id="ev_bad", response={"output_modalities": modalities})
        error = (await channel.until("error"))["error"]
        assert (error["param"], error["event_id"]) == ("response.output_modalities", "ev_bad"), error
        channel.client("session.update", session={"type": "realtime", "output_modalities": modalities})
        error = (await channel.until("error", count=2))["error"]
        assert error["param"] == "session.output_modalities", error
        channel.client("conversation.item.create", item={"type": "message", "role": "user",
                                                         "content": [{"type": "input_text", "text": "Hi"}]})
        channel.client("response.create", response={"output_modalities": ["text"]})
        done = await channel.until("response.done")
        assert done["response"]["status"] == "completed" and not task.done()
        assert channel.invalid == []
    finally:
        channel.inbox.put_nowait(None)
        await asyncio.wait_for(task, 5)
    assert session.end_reason == "client_closed"
