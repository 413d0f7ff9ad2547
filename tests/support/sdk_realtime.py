"""The official ``openai`` SDK's realtime connection, as the resume tests drive it (issue 72)."""

from __future__ import annotations

import asyncio

from openai import AsyncOpenAI


def sdk(port: int, key: str = "sk-none") -> AsyncOpenAI:
    return AsyncOpenAI(api_key=key, base_url=f"http://127.0.0.1:{port}/v1",
                       websocket_base_url=f"ws://127.0.0.1:{port}/v1", max_retries=0)


async def until(conn, kind: str, timeout: float = 60.0):
    """The next event of type ``kind`` (others are skipped; an error fails)."""
    async def look():
        while True:
            event = await conn.recv()
            if event.type == kind:
                return event
            assert event.type != "error", event
    return await asyncio.wait_for(look(), timeout)


async def drain(conn) -> None:
    """Read until the connection fails."""
    while True:
        await conn.recv()


async def say(conn, text: str) -> str:
    """A user message (its item id) and a response asked for."""
    await conn.conversation.item.create(item={"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": text}]})
    item_id = (await until(conn, "conversation.item.added")).item.id
    await conn.response.create()
    return item_id


async def opened(conn, grace_s: float) -> tuple[str, str]:
    """(session id, resume token) of a session opened with the resume extension."""
    token = await until(conn, "session.resume_token")  # before session.created, as session.recording is
    session = (await until(conn, "session.created", 10)).session
    assert token.session_id == session.id and token.grace_s == grace_s
    return session.id, token.resume_token
