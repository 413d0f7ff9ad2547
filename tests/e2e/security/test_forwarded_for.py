"""A client's address is what the app's own rule says (issue 68, finding 7): with
``auth.trust_forwarded_for`` off (the default), an ``X-Forwarded-For`` header changes nothing.

uvicorn rewrites the peer from ``X-Forwarded-For`` by default (``proxy_headers``, trusting
127.0.0.1) before the app sees the request, so a local client could name any address: evade a
per-address limit, or fill the mint store under 16 addresses. Only a real gateway process shows
it (an in-process ``TestClient`` has no uvicorn in front). The operator's live list says which
address a session is counted under."""

from __future__ import annotations

import httpx
import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import wait_idle, ws_url

# ``stack``: the suite's shared default stack (``tests/conftest.py``); its gateway trusts no proxy.


async def test_x_forwarded_for_does_not_change_the_client_address(stack):
    headers = {"X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https"}
    async with websockets.connect(ws_url(stack, record="false"), additional_headers=headers) as ws:
        created = await recv_until(ws, "session.created")
        async with httpx.AsyncClient(base_url=stack.url, timeout=5) as http:
            live = (await http.get("/api/admin/live", headers=stack.admin_headers)).json()
    ours = [s for s in live["sessions"] if s["session_id"] == created["session"]["id"]]
    assert [s["client"] for s in ours] == ["127.0.0.1"], live
    await wait_idle(stack, 1.0)
