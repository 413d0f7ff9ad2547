"""What a client can make the gateway hold for its worker (issue 45, items 1, 4 and 5): one byte
budget per session (``gateway/realtime/budget.py``, ``limits.queued_bytes``) for the events it sends
while queued and for a call's data channel and sideband, and offers with extra m-lines refused.

The client is ``MemoryChannelDouble`` or the WebRTC channel with a data-channel double; the worker
is the echo double of ``test_transport_seam.py`` on a real WebSocket.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiortc.sdp import SessionDescription

from core.config import AppConfig
from core.transport import ChannelClosed
from gateway.realtime.budget import InboundBudget
from gateway.realtime.proxy import MAX_EARLY_MESSAGES, RealtimeProxy
from gateway.realtime.request import SessionRequest
from gateway.realtime.webrtc.channel import WebRTCChannel
from gateway.realtime.webrtc.sdp import parse_offer
from gateway.realtime.webrtc.sideband import serve_local
from gateway.rest.models import ApiError
from tests.support.webrtc_client import OFFER
from tests.unit.test_transport_seam import MemoryChannelDouble, echo_worker, one_worker_pool  # noqa: F401
from tests.unit.test_webrtc_channel import DataChannelDouble, FramerDouble

BUDGET = 64 * 1024
CONFIG = {"recording": {"enabled": False}, "limits": {"queued_bytes": BUDGET, "max_message_bytes": 16 * 1024}}


def update(size: int) -> str:
    """A ``session.update`` of about ``size`` bytes (long instructions)."""
    return json.dumps({"type": "session.update", "session": {"instructions": "x" * size}})


def append(n: int, size: int = 2000) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": f"{n:06d}" + "A" * size})


async def queued_session(echo):
    url, seen = echo
    pool = one_worker_pool(url)
    blocker = await pool.acquire()  # the only slot is taken: the session waits in the queue
    client = MemoryChannelDouble()
    proxy = RealtimeProxy(client, SessionRequest(), pool, AppConfig.model_validate(CONFIG))
    return pool, blocker, client, proxy, asyncio.create_task(proxy.run())


async def test_a_client_flooding_while_queued_is_closed_within_its_budget(echo_worker):
    pool, blocker, client, proxy, running = await queued_session(echo_worker)
    held = []
    for _ in range(40):  # 40 x 8 KiB = 320 KiB: five times the budget
        await client.inbox.put(update(8 * 1024))
        await asyncio.sleep(0)
        held.append(sum(len(m) for m in proxy.early))
    await asyncio.wait_for(running, 5)
    assert max(held) <= BUDGET and proxy.budget.held == 0
    error = await client.next_event()
    assert error["type"] == "error" and error["error"]["code"] == "queue_overflow"
    assert "queued_bytes" in error["error"]["message"]
    assert client.closed is not None and client.closed[0] == 1008
    assert pool.queue_length == 0  # out of the queue: the slot it waited for goes to the next one
    pool.release(blocker)
    assert pool.snapshot(with_queue=False)["busy"] == 0


async def test_audio_streamed_while_queued_keeps_its_latest_seconds(echo_worker):
    pool, blocker, client, proxy, running = await queued_session(echo_worker)
    await client.inbox.put(update(100))
    for n in range(300):  # 300 appends of ~2 KB: past both the count and the byte budget
        await client.inbox.put(append(n))
    await client.inbox.put(json.dumps({"type": "response.create"}))
    for _ in range(500):  # until the proxy has read them all
        if client.inbox.empty() and proxy.early and "response.create" in proxy.early[-1]:
            break
        await asyncio.sleep(0.01)
    assert proxy.state == "queued" and client.closed is None  # a microphone is not a flood
    assert len(proxy.early) <= MAX_EARLY_MESSAGES and proxy.budget.held <= BUDGET
    kinds = [json.loads(m)["type"] for m in proxy.early]
    assert kinds[0] == "session.update" and kinds[-1] == "response.create"  # order kept, nothing else lost
    audio = [json.loads(m)["audio"][:6] for m in proxy.early if "append" in m]
    assert audio[-1] == "000299" and audio == sorted(audio)  # the newest, in order
    pool.release(blocker)
    assert (await client.next_event())["type"] == "session.created"
    assert (await client.next_event())["of"] == "session.update"
    assert proxy.budget.held == 0  # handed to the relay
    await client.inbox.put(None)
    await asyncio.wait_for(running, 5)


# ---------------------------------------------------------------------------- a call's data channel


def call_channel() -> tuple[WebRTCChannel, DataChannelDouble]:
    channel = WebRTCChannel(framer=FramerDouble(), budget=InboundBudget(BUDGET))
    dc = DataChannelDouble()
    channel.attach(dc)
    return channel, dc


async def test_a_flooded_data_channel_closes_the_call_with_1008():
    channel, dc = call_channel()  # nobody takes the inbox: a stalled relay
    for _ in range(40):
        dc.handlers["message"](update(8 * 1024))
    assert channel.budget.held <= BUDGET
    assert channel._inbox.qsize() <= BUDGET // (8 * 1024)
    assert dc.sent[-1]["type"] == "error" and dc.sent[-1]["error"]["code"] == "inbound_overflow"
    taken = 0
    with pytest.raises(ChannelClosed) as closed:
        while True:
            await channel.receive()
            taken += 1
    assert closed.value.code == 1008 and "queued_bytes" in closed.value.reason
    assert channel.budget.held == 0


async def test_a_flooding_sideband_is_closed_and_the_call_goes_on():
    channel, dc = call_channel()
    sideband = MemoryChannelDouble()
    serving = asyncio.create_task(serve_local(sideband, channel))
    for _ in range(40):
        await sideband.inbox.put(update(8 * 1024))
    await asyncio.wait_for(serving, 5)
    assert sideband.closed is not None and sideband.closed[0] == 1008
    refused = await sideband.next_event()
    assert refused["error"]["code"] == "inbound_overflow"
    while not channel._inbox.empty():  # the relay catches up: the call still takes the browser's events
        await channel.receive()
    dc.client_sends({"type": "response.create"})
    assert json.loads(await channel.receive()) == {"type": "response.create"}


def test_the_budget_must_hold_one_message():
    with pytest.raises(ValueError, match="queued_bytes"):
        AppConfig.model_validate({"limits": {"queued_bytes": 1024 * 1024, "max_message_bytes": 2 * 1024 * 1024}})


# ---------------------------------------------------------------------------- offers


def _with_extra(kind: str) -> str:
    """``OFFER`` with its ``kind`` m-line section repeated (a second microphone, camera or channel)."""
    head, *sections = OFFER.split("\r\nm=")
    extra = next(s for s in sections if s.startswith(kind)).replace("a=mid:", "a=mid:9")
    return "\r\nm=".join([head, *sections, extra]) + ("" if extra.endswith("\r\n") else "\r\n")


@pytest.mark.parametrize("kind", ["audio", "application"])
def test_an_offer_with_extra_m_lines_is_refused(kind):
    with pytest.raises(ApiError) as refused:
        parse_offer(_with_extra(kind), SessionDescription)
    assert refused.value.status == 400 and refused.value.code == "invalid_offer"
    assert f"2 {kind} m-lines" in refused.value.message
