"""A stored Live session forked into a new one (issue 72), with the official ``openai`` SDK's
``client.live.forks``: the fork starts from the stored session's history and config, its
``session.start`` holds overrides only, and what cannot be forked says why."""

from __future__ import annotations

import asyncio
import json

import websockets
from openai import AsyncOpenAI

from core.live_events import server_event_error
from tests.support.reliability import wait_meta

# ``stack``: the suite's shared default stack (``tests/conftest.py``).

HISTORY = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "My name is Ada."}]},
           {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "Nice to meet you, Ada."}]}]


def sdk(stack) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=f"{stack.url}/v1", websocket_base_url=f"ws://127.0.0.1:{stack.port}/v1")


async def until(conn, kind: str, timeout: float = 30.0):
    async def look():
        async for ev in conn:
            assert ev.type != "error", ev
            assert server_event_error(ev.to_dict()) is None, ev
            if ev.type == kind:
                return ev
    return await asyncio.wait_for(look(), timeout)


async def stored_session(stack, store: bool = True) -> str:
    """A closed Live session with a two-message history; its id."""
    async with sdk(stack).live.connect() as conn:
        await conn.session.start(session={"model": "omniduplex-cascade", "instructions": "Answer in one word.",
                                          "store": store, "input": HISTORY})
        started = await until(conn, "session.started")
        await conn.session.close()
        await until(conn, "session.closed")
    await wait_meta(stack, started.session.id)
    return started.session.id


async def refusal(stack, session_id: str) -> dict:
    async with websockets.connect(f"ws://127.0.0.1:{stack.port}/v1/live/sessions/{session_id}/fork") as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert server_event_error(event) is None, event
        await asyncio.wait_for(ws.wait_closed(), 10)
        assert ws.close_code == 1008
        return event["error"]


async def test_a_fork_starts_from_the_stored_sessions_history_and_config(stack):
    stored_id = await stored_session(stack)
    async with sdk(stack).live.forks.connect(session_id=stored_id) as conn:
        await conn.session.start(session={})  # overrides: none; the model is inherited
        started = await until(conn, "session.started")
        session = started.session
        assert session.id != stored_id and session.model == "omniduplex-cascade"
        assert session.instructions == "Answer in one word." and session.store is True
        said = [part["text"] for item in started.to_dict()["session"]["input"] for part in item["content"]]
        assert said == ["My name is Ada.", "Nice to meet you, Ada."]
        await conn.session.close()
        await until(conn, "session.closed")
    # The fork is stored in turn (inherited): its history is the conversation the worker held
    meta = await wait_meta(stack, session.id)
    assert meta["forked_from"] == stored_id and meta["dialect"] == "live"
    kept = json.loads((stack.sessions_dir / session.id / "stored_session.json").read_text())
    assert [(i["role"], i["content"][0]["text"]) for i in kept["input"]] == [
        ("user", "My name is Ada."), ("assistant", "Nice to meet you, Ada.")]


async def test_what_cannot_be_forked_says_why(stack):
    assert (await refusal(stack, "sess_" + "0" * 32))["code"] == "session_not_found"
    assert (await refusal(stack, "not-a-session-id"))["code"] == "session_not_found"
    unstored = await stored_session(stack, store=False)
    assert (await refusal(stack, unstored))["code"] == "session_not_stored"
    stored_id = await stored_session(stack)
    async with sdk(stack).live.forks.connect(session_id=stored_id) as conn:  # a new model is not an override
        await conn.send({"type": "session.start", "session": {"model": "another-model"}})
        error = await asyncio.wait_for(conn.recv(), 30)
        assert error.type == "error" and error.error.code == "invalid_value" and "model" in error.error.message
