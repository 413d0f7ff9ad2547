"""The sideband (issue 33, part 4): ``wss /v1/realtime?call_id=...`` joins a running WebRTC call's
session, on the call's own gateway and through another gateway of a Redis cluster.

The browser (a real ``aiortc`` peer) holds the media; the app server's sideband asks the question
(``conversation.item.create`` + ``response.create``), and both see the session's events: the
browser on its data channel, each sideband on its WebSocket (audio stays on the track). Hangup
closes the sidebands; an ephemeral key or an unknown call is refused with a reason.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import pytest
import websockets

from tests.e2e.test_cluster import Cluster
from tests.support.stack import free_port
from tests.support.webrtc_client import CallClient

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian redis-server not installed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("sideband"), free_port())
    try:
        c.stack.start()
        c.start_gateway("b")
        for name in ("a", "b"):
            c.wait_healthy(name)
        yield c
    finally:
        c.stop()


def url(cluster: Cluster, gateway: str) -> str:
    return f"http://127.0.0.1:{cluster.ports[gateway]}"


def sideband_url(cluster: Cluster, gateway: str, call_id: str) -> str:
    return f"ws://127.0.0.1:{cluster.ports[gateway]}/v1/realtime?call_id={call_id}"


async def events_until(ws, kind: str, timeout: float = 60.0) -> list[dict]:
    seen: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            event = json.loads(await ws.recv())
            seen.append(event)
            if event["type"] == kind:
                return seen


async def test_sidebands_on_both_gateways_drive_the_call_and_close_with_it(cluster):
    call = CallClient(url(cluster, "a"))
    try:
        await call.connect(session={"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        await call.until("session.created", timeout=30)
        local = await websockets.connect(sideband_url(cluster, "a", call.call_id))
        remote = await websockets.connect(sideband_url(cluster, "b", call.call_id))
        await asyncio.sleep(0.5)  # the remote sideband's join reaches the call's gateway through Redis
        await remote.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What is the capital of France?"}]}}))
        await remote.send(json.dumps({"type": "response.create"}))

        done = await call.until("response.done", timeout=60)
        answer = " ".join(part.get("transcript") or part.get("text") or ""
                          for item in done["response"]["output"] for part in item.get("content", []))
        assert "paris" in answer.lower(), answer
        assert call.of("conversation.item.created") or call.of("conversation.item.added")
        for ws in (local, remote):
            seen = await events_until(ws, "response.done")
            kinds = [e["type"] for e in seen]
            assert "response.output_audio_transcript.delta" in kinds, kinds
            assert "response.output_audio.delta" not in kinds, "audio rides the call's track only"
            assert seen[-1]["response"]["id"] == done["response"]["id"]
        await asyncio.sleep(1.0)
        assert call.loud_ms() > 300, "the answer was spoken on the call's track"

        assert (await call.hangup()).status_code == 200
        for ws in (local, remote):
            async with asyncio.timeout(10):
                with pytest.raises(websockets.ConnectionClosedOK):
                    while True:
                        await ws.recv()
    finally:
        await call.close()


async def test_sideband_refusals_say_why(cluster):
    async def refused(gateway: str, call_id: str, headers: dict | None = None) -> tuple[dict, int]:
        async with websockets.connect(sideband_url(cluster, gateway, call_id), additional_headers=headers) as ws:
            event = json.loads(await asyncio.wait_for(ws.recv(), 10))
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            return event["error"], ws.close_code

    for gateway in ("a", "b"):
        error, code = await refused(gateway, "rtc_doesnotexist")
        assert (error["code"], code) == ("call_not_found", 1008)
    minted = httpx.post(f"{url(cluster, 'a')}/v1/realtime/client_secrets", json={}, timeout=10).json()
    error, code = await refused("a", "rtc_whatever", {"Authorization": f"Bearer {minted['value']}"})
    assert (error["code"], code) == ("invalid_api_key", 1008) and "ephemeral" in error["message"]
