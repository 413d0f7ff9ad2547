"""The admin API against real worker and gateway processes: every admin route is 401 without
the token; with it, drain/enable, ending a session, cancelling a queued client, adding a worker
at runtime (which then takes the queue), ETA, presets, apps and voices all work."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
import websockets

from core.config import AppConfig
from tests.support.realtime_client import recv_until
from tests.support.stack import Stack, free_port



@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("admin_stack"), workers=1).start()
    yield s
    s.stop()


def admin(stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=10)


def ws_url(stack, app: str | None = None) -> str:
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?extensions=all" + (f"&app={app}" if app else "")


async def closed_with(ws, timeout: float = 10.0) -> tuple[list[dict], int]:
    """Every event until the server closes, and its close code."""
    events = []
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout)))
    return events, closed.value.rcvd.code


async def silent_for(ws, seconds: float) -> list[str]:
    """Event types received within ``seconds`` (queue.position aside)."""
    kinds = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            ev = json.loads(await asyncio.wait_for(ws.recv(), left))
        except TimeoutError:
            break
        if ev["type"] != "queue.position":
            kinds.append(ev["type"])
    return kinds


async def text_turn(ws) -> dict:
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "Say hello."}]}}))
    await ws.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["text"]}}))
    return await recv_until(ws, "response.done", 60)


async def wait_state(stack, pred, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    with admin(stack) as c:
        while True:
            o = c.get("/api/admin/overview").json()
            if pred(o):
                return o
            if time.monotonic() > deadline:
                raise AssertionError(f"state not reached: {json.dumps(o)[:1500]}")
            await asyncio.sleep(0.1)


def idle(o: dict) -> bool:
    return o["totals"]["busy"] == 0 and o["totals"]["queue_length"] == 0 and not o["live"]


# ---------------------------------------------------------------- auth


def admin_routes(tmp_path) -> list[tuple[str, str]]:
    """Every admin route of a gateway app (path parameters filled in), read from the app itself."""
    from gateway.app import create_app

    app = create_app(AppConfig(data_dir=str(tmp_path), workers={"count": 0}, admin={"token": "x" * 20}))
    def walk(routes):  # included routers nest (no prefixes are used)
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                yield from walk(inner.routes)
            else:
                yield route

    routes = []
    for route in walk(app.routes):
        path = getattr(route, "path", "")
        if not (path.startswith(("/api/admin", "/admin")) or path == "/static/admin.html"):
            continue
        if path in ("/admin/login", "/admin/logout"):
            continue  # the sign-in form itself, and sign-out (clears a cookie, nothing else)
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            if method != "HEAD":
                routes.append((method, concrete))
    return routes


def test_every_admin_route_is_401_without_the_token(stack, tmp_path):
    routes = admin_routes(tmp_path)
    assert len(routes) >= 25 and ("GET", "/api/admin/sessions") in routes  # recordings' listing too
    with httpx.Client(base_url=stack.url, timeout=10) as anon:
        for method, path in routes:
            for headers in ({}, {"Authorization": "Bearer not-the-token-at-all"}, {"Cookie": "omni_admin=nope"}):
                r = anon.request(method, path, headers=headers, json={} if method in ("POST", "PUT") else None)
                assert r.status_code == 401, (method, path, headers, r.status_code, r.text[:200])
        assert anon.get("/api/admin/no/such/route").status_code == 401
        assert anon.get(f"/admin?token={stack.admin_token}", follow_redirects=False).status_code == 303
    with admin(stack) as c:
        assert c.get("/api/admin/no/such/route").status_code == 404
        page = c.get("/admin")
        assert page.status_code == 200 and "Workers" in page.text


def test_admin_page_sign_in_sets_a_strict_cookie(stack):
    with httpx.Client(base_url=stack.url, timeout=10) as c:
        r = c.post("/admin/login", data={"token": "wrong"})
        assert r.status_code == 401 and "Wrong token" in r.text
        r = c.post("/admin/login", data={"token": stack.admin_token}, follow_redirects=False)
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Secure" not in cookie  # plain http to 127.0.0.1: a Secure cookie would not come back
        assert c.get("/admin").status_code == 200
        assert c.get("/api/admin/overview").status_code == 200
        # A state change with the cookie from another site's page is refused.
        r = c.post("/api/admin/workers/w0/enable", headers={"Origin": "https://evil.example"})
        assert r.status_code == 403


# ---------------------------------------------------------------- workers and sessions


async def test_drain_finishes_the_session_takes_no_new_one_and_enable_restores(stack):
    a = await websockets.connect(ws_url(stack))
    await recv_until(a, "session.created")
    with admin(stack) as c:
        w = c.post("/api/admin/workers/w0/disable").json()
        assert w["health"] == "disabled" and w["busy"] == 1
    b = await websockets.connect(ws_url(stack))
    pos = await recv_until(b, "queue.position")
    assert pos["position"] == 1
    # The draining worker keeps serving its running session ...
    done = await text_turn(a)
    assert done["response"]["status"] == "completed"
    # ... and the ETA setting reaches the waiting client at once.
    with admin(stack) as c:
        assert c.put("/api/admin/eta", json={"session_s": 42}).json()["session_s"] == 42
    assert (await recv_until(b, "queue.position"))["eta_s"] == 42
    await a.close()
    o = await wait_state(stack, lambda o: o["totals"]["busy"] == 0)
    assert o["totals"]["queue_length"] == 1 and o["workers"][0]["health"] == "disabled"
    assert await silent_for(b, 1.5) == []  # free but draining: no assignment
    with admin(stack) as c:
        assert c.put("/api/admin/eta", json={"session_s": None}).json()["session_s"] is None
        assert c.post("/api/admin/workers/w0/enable").json()["health"] in ("healthy", "unknown")
    assigned = await recv_until(b, "queue.assigned")
    assert assigned["worker_id"] == "w0"
    await recv_until(b, "session.created")
    await b.close()
    await wait_state(stack, idle)


async def test_end_a_running_session_and_cancel_a_queued_one(stack):
    a = await websockets.connect(ws_url(stack))
    await recv_until(a, "session.created")
    b = await websockets.connect(ws_url(stack, app="audio_duplex"))
    ticket = (await recv_until(b, "queue.position"))["ticket"]
    o = await wait_state(stack, lambda o: len(o["live"]) == 2)
    running = next(s for s in o["live"] if s["state"] == "active")
    assert running["worker_id"] == "w0" and running["session_id"]
    assert o["workers"][0]["sessions"][0]["session_id"] == running["session_id"]
    assert [q["ticket"] for q in o["queue"]] == [ticket] and o["queue"][0]["app"] == "audio_duplex"
    with admin(stack) as c:
        assert c.delete("/api/admin/queue/ticket_nope").status_code == 404
        assert c.delete(f"/api/admin/queue/{ticket}").json() == {"cancelled": ticket}
    events, code = await closed_with(b)
    assert code == 4004 and events[-1]["error"]["code"] == "queue_cancelled"
    with admin(stack) as c:
        assert c.post("/api/admin/sessions/sess_nope/end").status_code == 404
        r = c.post(f"/api/admin/sessions/{running['session_id']}/end", json={"reason": "ended by the test"})
        assert r.status_code == 200
    events, code = await closed_with(a)
    assert code == 4004
    err = events[-1]["error"]
    assert err["code"] == "session_ended_by_operator" and "ended by the test" in err["message"]
    await wait_state(stack, idle)
    worker = await asyncio.to_thread(stack.worker_health)
    assert worker["active_sessions"] == 0
    # Both processes logged the session's end with the same ids on the line.
    tag = f"session={running['session_id']} worker=w0"
    for log in ("gateway.log", "worker0.log"):
        lines = [ln for ln in (stack.tmp / log).read_text().splitlines() if tag in ln]
        assert any("ended" in ln for ln in lines), (log, tag)


async def test_a_worker_added_at_runtime_takes_queued_clients(stack):
    a = await websockets.connect(ws_url(stack))
    await recv_until(a, "session.created")
    b = await websockets.connect(ws_url(stack))
    await recv_until(b, "queue.position")
    port = free_port()
    stack._spawn("extra", ["worker", "--index", "1", "--worker-port", str(port)])
    try:
        with admin(stack) as c:
            assert c.post("/api/admin/workers", json={"url": "ftp://nope:1"}).status_code == 422
            assert c.post("/api/admin/workers", json={"url": stack.worker_url()}).status_code == 409
            added = c.post("/api/admin/workers", json={"url": f"http://127.0.0.1:{port}"})
            assert added.status_code == 201, added.text
            new_id = added.json()["id"]
            # While it loads, the admin view shows its load progress.
            seen_loading = False
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                w = next(w for w in c.get("/api/admin/workers").json()["workers"] if w["id"] == new_id)
                seen_loading |= w["state"] == "LOADING" and w["load_progress"] is not None
                if w["health"] == "healthy":
                    break
                await asyncio.sleep(0.2)
        assigned = await recv_until(b, "queue.assigned", 120)
        assert assigned["worker_id"] == new_id
        await recv_until(b, "session.created")
        assert (await text_turn(b))["response"]["status"] == "completed"
        await b.close()
        await a.close()
        await wait_state(stack, idle)
        with admin(stack) as c:
            assert c.delete(f"/api/admin/workers/{new_id}").json()["removed"] == new_id
            assert c.delete(f"/api/admin/workers/{new_id}").status_code == 404
            assert [w["id"] for w in c.get("/api/admin/workers").json()["workers"]] == ["w0"]
        print(f"runtime worker {new_id}: load progress seen: {seen_loading}")
    finally:
        stack.kill("extra")


async def test_mark_dead_then_enable(stack):
    with admin(stack) as c:
        assert c.post("/api/admin/workers/w0/dead").json()["health"] == "dead"
        assert c.post("/api/admin/workers/w0/explode").status_code == 404
        assert c.post("/api/admin/workers/w9/disable").status_code == 404
    # Dead and no other worker: a new client is told no worker can serve it (1008), not queued forever.
    ws = await websockets.connect(ws_url(stack))
    events, code = await closed_with(ws)
    assert code == 1008 and events[-1]["error"]["code"] == "no_capable_worker"
    await asyncio.sleep(0.6)  # probes keep succeeding: they never revive a dead worker
    with admin(stack) as c:
        assert c.get("/api/admin/workers").json()["workers"][0]["health"] == "dead"
        c.post("/api/admin/workers/w0/enable")
    await wait_state(stack, lambda o: o["workers"][0]["health"] == "healthy")


# ---------------------------------------------------------------- settings


def test_presets_apps_voices_and_eta_persist(stack):
    with admin(stack) as c:
        presets = c.get("/api/admin/presets").json()
        assert presets["source"] == "builtin"
        mine = [{"id": "pirate", "name": "Pirate", "instructions": "Talk like a pirate."}]
        r = c.put("/api/admin/presets", json={"presets": mine})
        assert r.status_code == 200 and r.json()["source"] == "file"
        assert [p["id"] for p in httpx.get(f"{stack.url}/api/presets").json()["presets"]] == ["pirate"]
        assert (stack.data_dir / "presets.json").is_file()
        bad = c.put("/api/admin/presets", json={"presets": [{"id": "Bad Id", "name": ""}]})
        assert bad.status_code == 422 and "id" in bad.json()["detail"]
        assert c.delete("/api/admin/presets").json()["source"] == "builtin"
        assert httpx.get(f"{stack.url}/api/presets").json()["source"] == "builtin"

        assert c.put("/api/admin/apps/chat", json={"enabled": False}).status_code == 200
        assert json.loads((stack.data_dir / "operator.json").read_text())["disabled_apps"] == ["chat"]
        assert c.put("/api/admin/apps/chat", json={"enabled": True}).status_code == 200

        # The embedded cascade has one built-in Piper voice: no reference voices, said plainly.
        v = c.get("/api/admin/voices").json()
        assert v == {"supported": False, "workers": [], "voices": []}
        r = c.post("/api/admin/voices", data={"name": "me"}, files={"file": ("me.wav", b"RIFF....WAVE")})
        assert r.status_code == 409 and "no reference voices" in r.json()["detail"]
        assert c.delete("/api/admin/voices/me").status_code == 409

        assert c.put("/api/admin/eta", json={"session_s": 0}).status_code == 422
        assert c.put("/api/admin/eta", json={"session_s": 90}).json()["session_s"] == 90
        assert json.loads((stack.data_dir / "operator.json").read_text())["eta_session_s"] == 90
        c.put("/api/admin/eta", json={"session_s": None})
