"""A conversation survives a dropped connection (issue 72), with the official ``openai`` SDK.

The SDK's socket goes through a forwarder the test cuts (``devtools/net_cut.py``): the
gateway sees its client vanish without a close, as when a phone leaves Wi-Fi. The SDK opens a new
connection with the session's resume token and the conversation goes on on the same worker.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from devtools.net_cut import CutProxy
from tests.support.reliability import wait_meta
from tests.support.sdk_realtime import drain, say, until
from tests.support.sdk_realtime import opened as opened_with
from tests.support.sdk_realtime import sdk as sdk_client
from tests.support.stack import Stack

KEY, OTHER_KEY = "sk-resume-owner-0123", "sk-resume-other-4567"
GRACE_S = 4.0
MARGIN_S = 2.0  # gateway/realtime/resume.py: the slot is released this long after the worker's grace


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("resume"), workers=1, auth={"api_keys": [KEY, OTHER_KEY]},
              limits={"resume_grace_s": GRACE_S}).start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
async def idle_before(stack):
    deadline = time.monotonic() + GRACE_S + MARGIN_S + 5  # a held session of an earlier test
    while (h := stack.health())["slots_busy"] or h["queue_length"]:
        assert time.monotonic() < deadline, f"a slot or queue entry was left behind: {h}"
        await asyncio.sleep(0.1)


def sdk(port: int, key: str = KEY):
    return sdk_client(port, key)


async def opened(conn) -> tuple[str, str]:
    return await opened_with(conn, GRACE_S)


async def dropped(stack) -> tuple[str, str]:
    """(session id, resume token) of a session whose connection the network then cut."""
    async with CutProxy("127.0.0.1", stack.port) as proxy:
        conn = await sdk(proxy.port).realtime.connect(model="omniduplex-cascade",
                                                      extra_query={"extensions": "resume"}).enter()
        opening = await opened(conn)
        proxy.cut()
    return opening


async def refused(port: int, key: str, token: str) -> tuple[dict, int]:
    """The error event and close code a connection with ``token`` gets."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime?resume_token={token}",
                                  additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        return event, ws.close_code


async def test_the_sdk_comes_back_after_its_connection_drops_mid_reply(stack):
    async with CutProxy("127.0.0.1", stack.port) as proxy:
        conn = await sdk(proxy.port).realtime.connect(model="omniduplex-cascade",
                                                      extra_query={"extensions": "resume"}).enter()
        session_id, token = await opened(conn)
        first = await say(conn, "My name is Ada. Tell me a long story about a lighthouse keeper.")
        await until(conn, "response.output_audio.delta")  # mid-reply
        proxy.cut()
        with pytest.raises(Exception):  # the SDK's socket died under it (after what it had already read)
            await asyncio.wait_for(drain(conn), 10)
    cut_at = time.monotonic()
    async with sdk(stack.port).realtime.connect(model="omniduplex-cascade",
                                                extra_query={"extensions": "resume", "resume_token": token}) as conn:
        created = await until(conn, "session.created", 10)
        assert time.monotonic() - cut_at < 5
        assert created.session.id == session_id
        back = await until(conn, "session.reattached", 10)
        assert back.session_id == session_id and back.items >= 2  # the user's message and the cut reply
        done = await until(conn, "response.done", 10)  # the reply cut when the listener went, kept for it
        assert done.response.status == "cancelled"
        await conn.conversation.item.retrieve(item_id=first)
        assert (await until(conn, "conversation.item.retrieved", 10)).item.id == first
        second = await say(conn, "What was my name again?")
        done = await until(conn, "response.done")
        assert done.response.status == "completed"
        await conn.conversation.item.retrieve(item_id=second)
        assert (await until(conn, "conversation.item.retrieved", 10)).item.id == second
    # One recording, both connections' turns in it, finished once
    meta = await wait_meta(stack, session_id)
    assert meta["status"] == "finished"
    recorded = (stack.sessions_dir / session_id / "recording.json").read_text()
    assert "lighthouse keeper" in recorded and "my name again" in recorded
    assert [p.name for p in stack.sessions_dir.iterdir() if session_id in p.name] == [session_id]


async def test_a_token_works_only_with_the_key_that_opened_the_session(stack):
    session_id, token = await dropped(stack)
    event, code = await refused(stack.port, OTHER_KEY, token)  # a stolen token, another key
    assert event["error"]["code"] == "invalid_resume_token" and code == 1008
    event, code = await refused(stack.port, KEY, "rt_" + "x" * 32)  # a made-up one
    assert event["error"]["code"] == "invalid_resume_token" and code == 1008
    async with sdk(stack.port).realtime.connect(model="omniduplex-cascade",
                                                extra_query={"resume_token": token}) as conn:
        assert (await until(conn, "session.created", 10)).session.id == session_id


async def test_one_connection_at_a_time_the_newer_one_wins(stack):
    """A client that reconnects before the gateway noticed its old connection die takes over."""
    old = await sdk(stack.port).realtime.connect(model="omniduplex-cascade",
                                                 extra_query={"extensions": "resume"}).enter()
    session_id, token = await opened(old)
    async with sdk(stack.port).realtime.connect(model="omniduplex-cascade",
                                                extra_query={"resume_token": token}) as new:
        assert (await until(new, "session.created", 10)).session.id == session_id
        with pytest.raises(Exception) as closed:
            await asyncio.wait_for(old.recv(), 10)
        assert "4009" in str(closed.value)
        await say(new, "Hello again.")
        assert (await until(new, "response.done")).response.status == "completed"
    assert stack.health()["slots_busy"] <= 1


async def test_after_the_grace_period_the_slot_goes_to_the_next_in_the_queue(stack):
    _, token = await dropped(stack)
    cut_at = time.monotonic()
    async with sdk(stack.port).realtime.connect(model="omniduplex-cascade", extra_query={"extensions": "queue"}) as nxt:
        assert (await until(nxt, "queue.position", 10)).position >= 1  # the held session keeps its slot
        await until(nxt, "session.created", GRACE_S + MARGIN_S + 10)
        assert time.monotonic() - cut_at >= GRACE_S
        event, code = await refused(stack.port, KEY, token)
        assert event["error"]["code"] == "resume_token_expired" and code == 4010


async def test_a_deliberate_close_ends_the_session_at_once(stack):
    conn = await sdk(stack.port).realtime.connect(model="omniduplex-cascade",
                                                  extra_query={"extensions": "resume"}).enter()
    _, token = await opened(conn)
    await conn.close()
    deadline = time.monotonic() + 2
    while stack.health()["slots_busy"]:
        assert time.monotonic() < deadline, "a closed session's slot was held"
        await asyncio.sleep(0.05)
    event, code = await refused(stack.port, KEY, token)
    assert event["error"]["code"] == "resume_token_expired"


async def test_a_call_comes_back_with_the_token_its_answer_carried(stack):
    """A WebRTC call offered with ``extensions=resume``: the answer carries the token; a new
    offer with it (the old connection failed, as after a network change) brings back the same
    session with its items, and the old call is closed."""
    from tests.support.webrtc_client import CallClient

    auth = {"Authorization": f"Bearer {KEY}"}
    old = CallClient(stack.url, "?extensions=resume", auth, frozenset({"session.resume_token"}))
    new = None
    try:
        await old.connect()
        token = old.answer_headers["x-resume-token"]
        session_id = (await old.until("session.created", timeout=30))["session"]["id"]
        assert (await old.until("session.resume_token"))["resume_token"] == token
        old.send("conversation.item.create", item={"type": "message", "role": "user",
                                                   "content": [{"type": "input_text", "text": "My name is Ada."}]})
        first = (await old.until("conversation.item.added"))["item"]["id"]
        refused = await CallClient(stack.url, f"?resume_token={token}",
                                   {"Authorization": f"Bearer {OTHER_KEY}"}).post()  # a stolen token
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "invalid_resume_token"
        new = CallClient(stack.url, f"?resume_token={token}", auth)
        await new.connect()
        assert (await new.until("session.created", timeout=30))["session"]["id"] == session_id
        new.send("conversation.item.retrieve", item_id=first)
        assert (await new.until("conversation.item.retrieved"))["item"]["id"] == first
        assert stack.health()["slots_busy"] == 1
        assert (await new.hangup()).status_code == 200
    finally:
        await old.close()
        if new is not None:
            await new.close()
    deadline = time.monotonic() + 5
    while stack.health()["slots_busy"]:
        assert time.monotonic() < deadline, "the call's slot was not freed by its hangup"
        await asyncio.sleep(0.05)
