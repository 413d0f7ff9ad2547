"""A call's owner across a cluster (issue 45, item 8): the gateway that answered a call announces
it in Redis with the API key it belongs to, and another gateway lets a sideband join it only with
that key. The same rule on one gateway, through the routes: ``tests/unit/test_webrtc_routes.py``."""

from __future__ import annotations

import asyncio

from gateway.realtime.webrtc.channel import WebRTCChannel
from gateway.realtime.webrtc.sideband import CallBridge


async def test_another_gateway_lets_only_the_calls_key_join(redis_url):
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    a, b = CallBridge(client, "own", "a"), CallBridge(client, "own", "b")
    a.host("rtc_owned", WebRTCChannel(), owner="key_tenant_1")
    a.host("rtc_open", WebRTCChannel(), owner=None)  # opened on an open service
    try:
        for _ in range(100):  # the announcement is written by the host's task
            if await client.exists("own:call:rtc_owned") and await client.exists("own:call:rtc_open"):
                break
            await asyncio.sleep(0.02)
        assert await b.joinable("rtc_owned", lambda owner: owner == "key_tenant_1")
        assert not await b.joinable("rtc_owned", lambda owner: owner == "key_tenant_2")
        assert await b.joinable("rtc_open", lambda owner: owner is None)
        assert not await b.joinable("rtc_unknown", lambda owner: True)
        await client.set("own:call:rtc_old", "a")  # an announcement without an owner is joined by no one
        assert not await b.joinable("rtc_old", lambda owner: True)
    finally:
        await a.unhost("rtc_owned")
        await a.unhost("rtc_open")
        await client.aclose()
