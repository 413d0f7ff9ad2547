"""Gateway access control in process (no workers needed; refusals happen before the queue):
API keys (Bearer and the browser subprotocol), the Origin check, app toggles, per-IP and
per-key session limits, and session ids on log lines."""

from __future__ import annotations

import logging

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from core.config import AppConfig
from core.logctx import ContextFilter, bind
from gateway.app import create_app

ADMIN = "a" * 24
KEY = "sk-test-0123456789"


def make_client(tmp_path, **sections) -> TestClient:
    config = AppConfig.model_validate({"data_dir": str(tmp_path), "workers": {"count": 0},
                                       "gateway": {"allowed_hosts": ["testserver"]},  # TestClient's Host
                                       "admin": {"token": ADMIN}, **sections})
    return TestClient(create_app(config))


def refused(ws) -> tuple[str, int]:
    """(error code, close code) of a refused realtime connection."""
    event = ws.receive_json()
    assert event["type"] == "error"
    with pytest.raises(WebSocketDisconnect) as closed:
        ws.receive_json()
    return event["error"]["code"], closed.value.code


def queued(ws) -> dict:
    event = ws.receive_json()
    assert event["type"] == "queue.position", event
    return event


def test_api_keys_bearer_subprotocol_and_rest(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        with c.websocket_connect("/v1/realtime?extensions=all") as ws:
            assert refused(ws) == ("invalid_api_key", 1008)
        with c.websocket_connect("/v1/realtime?extensions=all", headers={"Authorization": "Bearer wrong-key-123"}) as ws:
            assert refused(ws) == ("invalid_api_key", 1008)
        with c.websocket_connect("/v1/realtime?extensions=all", headers={"Authorization": f"Bearer {KEY}"}) as ws:
            queued(ws)
        # What browsers send: they cannot set headers on a WebSocket.
        with c.websocket_connect("/v1/realtime?extensions=all", subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"]) as ws:
            assert ws.accepted_subprotocol == "realtime"
            queued(ws)
        with c.websocket_connect("/v1/realtime?extensions=all", headers={"Authorization": f"Bearer {ADMIN}"}) as ws:
            queued(ws)  # the admin token works as a key too
        r = c.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert c.get("/api/apps").json()["api_key_required"] is True
        assert c.get("/health").status_code == 200  # pages and health stay open


def test_open_service_needs_no_key(tmp_path):
    with make_client(tmp_path) as c:
        with c.websocket_connect("/v1/realtime?extensions=all", headers={"Authorization": "Bearer unused"}) as ws:
            queued(ws)
        assert c.get("/v1/models").status_code == 200
        assert c.get("/api/apps").json()["api_key_required"] is False


def test_origin_check(tmp_path):
    with make_client(tmp_path, auth={"allowed_origins": ["https://partner.example"]}) as c:
        with c.websocket_connect("/v1/realtime?extensions=all", headers={"Origin": "https://evil.example"}) as ws:
            assert refused(ws) == ("origin_not_allowed", 1008)
        for origin in ("http://testserver", "https://partner.example"):  # own origin, configured one
            with c.websocket_connect("/v1/realtime?extensions=all", headers={"Origin": origin}) as ws:
                queued(ws)
        with c.websocket_connect("/v1/realtime?extensions=all") as ws:  # no Origin: not a browser
            queued(ws)


OWN_PAGE = {"Origin": "http://testserver"}  # what our own pages send (app-gate.js adds ?app=)


def test_app_toggles_refuse_new_sessions_and_persist(tmp_path):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with make_client(tmp_path) as c:
        assert c.put("/api/admin/apps/omni", json={"enabled": False}, headers=admin).status_code == 200
        with c.websocket_connect("/v1/realtime?extensions=all&app=omni", headers=OWN_PAGE) as ws:
            code, close = refused(ws)
            assert (code, close) == ("app_disabled", 1008)
        with c.websocket_connect("/v1/realtime?extensions=all&app=audio_duplex", headers=OWN_PAGE) as ws:
            queued(ws)
        assert c.put("/api/admin/apps/api", json={"enabled": False}, headers=admin).status_code == 200
        r = c.get("/v1/models")
        assert r.status_code == 403 and r.json()["error"]["code"] == "app_disabled"
        with c.websocket_connect("/v1/realtime?extensions=all") as ws:  # no page named: the api app
            assert refused(ws)[0] == "app_disabled"
        assert c.put("/api/admin/apps/nope", json={"enabled": False}, headers=admin).status_code == 404
    # A restart keeps the toggles (data_dir/operator.json).
    with make_client(tmp_path) as c:
        apps = {a["id"]: a["enabled"] for a in c.get("/api/apps").json()["apps"]}
        assert apps == {"chat": True, "audio_duplex": True, "omni": False, "api": False}


def test_only_our_own_pages_choose_their_app_an_api_client_is_api_whatever_it_says(tmp_path):
    """Issue 68, finding 7b: ``?app=omni`` let an API client past the "api" toggle. The page a
    session names counts only when our own page opened it (its Origin is ours); any other client,
    another site's page included, counts as "api"."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with make_client(tmp_path, auth={"allowed_origins": ["*"]}) as c:
        assert c.put("/api/admin/apps/api", json={"enabled": False}, headers=admin).status_code == 200
        for path in ("/v1/realtime?extensions=all", "/v1/live/sessions?extensions=queue"):
            for headers in ({}, {"Origin": "https://partner.example"}, {"Origin": "http://testserver.evil"}):
                for app in ("omni", "chat", "audio_duplex", "api", "nope"):
                    with c.websocket_connect(f"{path}&app={app}", headers=headers) as ws:
                        assert refused(ws)[0] == "app_disabled", (path, headers, app)
            with c.websocket_connect(f"{path}&app=omni", headers=OWN_PAGE) as ws:  # our omni page: its app
                queued(ws)
        assert c.put("/api/admin/apps/api", json={"enabled": True}, headers=admin).status_code == 200
        assert c.put("/api/admin/apps/omni", json={"enabled": False}, headers=admin).status_code == 200
        with c.websocket_connect("/v1/realtime?extensions=all&app=omni", headers=OWN_PAGE) as ws:
            assert refused(ws)[0] == "app_disabled"
        with c.websocket_connect("/v1/realtime?extensions=all&app=omni") as ws:  # an API client: the api app
            queued(ws)


def test_per_ip_concurrency_and_rate(tmp_path):
    with make_client(tmp_path, auth={"per_ip": {"concurrent": 2, "sessions_per_minute": 4}}) as c:
        with c.websocket_connect("/v1/realtime?extensions=all") as a, c.websocket_connect("/v1/realtime?extensions=all") as b:
            queued(a)
            queued(b)
            with c.websocket_connect("/v1/realtime?extensions=all") as third:
                assert refused(third) == ("too_many_sessions", 4029)
        # Both closed: concurrency is free again, but 2 of 4 starts this minute are used.
        for _ in range(2):
            with c.websocket_connect("/v1/realtime?extensions=all") as ws:
                queued(ws)
        with c.websocket_connect("/v1/realtime?extensions=all") as ws:
            assert refused(ws) == ("rate_limited", 4029)
        metrics = c.get("/metrics").text
        assert 'omniduplex_rejected_sessions_total{reason="too_many_sessions"} 1.0' in metrics
        assert 'omniduplex_rejected_sessions_total{reason="rate_limited"} 1.0' in metrics


REST = ("/v1/chat/completions", "/v1/audio/speech", "/v1/audio/transcriptions")


def rest_refusal(r, code: str, who: str) -> None:
    """A REST request over a limit: 429 in OpenAI's error shape, with the reason and Retry-After."""
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("rate_limit_error", code, None), error
    assert who in error["message"] and "limit" in error["message"], error
    assert int(r.headers["retry-after"]) >= 1


def test_rest_requests_count_against_the_per_address_limits(tmp_path):
    """Issue 68, finding 7c: the REST API had no per-address or per-key limits. A model request
    counts as a session does: one more open (until its answer ends) and one more start."""
    with make_client(tmp_path, auth={"per_ip": {"concurrent": 1, "sessions_per_minute": 3}}) as c:
        with c.websocket_connect("/v1/realtime?extensions=all") as ws:  # the address's one open session
            queued(ws)
            for path in REST:
                rest_refusal(c.post(path, json={}), "too_many_sessions", "this address")
        # The session closed: 1 of 3 starts this minute used; two requests go on (to their 400s) ...
        assert c.post("/v1/chat/completions", json={}).status_code == 400
        assert c.post("/v1/audio/speech", json={}).status_code == 400
        assert c.app.state.limiter.open_count(ip="testclient") == 0  # each answer gave its slot back
        # ... and the third is over the rate.
        r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")})
        rest_refusal(r, "rate_limited", "this address")
        assert c.get("/v1/models").status_code == 200  # reads run no model: not counted


def test_rest_requests_count_against_the_per_key_limits(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY, "sk-test-other-tenant"], "per_key": {"concurrent": 1}}) as c:
        auth = {"Authorization": f"Bearer {KEY}"}
        with c.websocket_connect("/v1/realtime?extensions=all", headers=auth) as ws:
            queued(ws)
            rest_refusal(c.post("/v1/chat/completions", json={}, headers=auth), "too_many_sessions", "this API key")
            other = {"Authorization": "Bearer sk-test-other-tenant"}
            assert c.post("/v1/chat/completions", json={}, headers=other).status_code == 400  # another key's own


def test_per_key_concurrency(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY], "per_key": {"concurrent": 1}}) as c:
        auth = {"Authorization": f"Bearer {KEY}"}
        with c.websocket_connect("/v1/realtime?extensions=all", headers=auth) as a:
            queued(a)
            with c.websocket_connect("/v1/realtime?extensions=all", headers=auth) as b:
                code, close = refused(b)
                assert code == "too_many_sessions" and close == 4029


def test_log_lines_carry_session_and_worker(caplog):
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    f = ContextFilter()
    f.filter(record)
    assert record.ctx == ""

    import contextvars

    def inside() -> logging.LogRecord:
        bind(session="sess_abc", worker="w3")
        r = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
        f.filter(r)
        return r

    r = contextvars.copy_context().run(inside)
    assert r.ctx == " session=sess_abc worker=w3" and r.session_id == "sess_abc" and r.worker_id == "w3"


def test_reference_voices_only_where_a_worker_offers_them(tmp_path):
    import numpy as np

    from core.media import wav_bytes

    admin = {"Authorization": f"Bearer {ADMIN}"}
    sample = wav_bytes((np.sin(np.arange(32000) / 10) * 8000).astype("<i2"), 16000)
    with make_client(tmp_path) as c:
        pool = c.app.state.pool
        worker = pool.add_worker("http://127.0.0.1:9")
        r = c.post("/api/admin/voices", data={"name": "me"}, files={"file": ("me.wav", sample)}, headers=admin)
        assert r.status_code == 409 and "no reference voices" in r.json()["detail"]
        # A backend that clones voices says so in its capabilities (reported on its /health).
        pool.update_health(worker.id, True, info={"capabilities": ["audio_output", "reference_voices"]})
        r = c.post("/api/admin/voices", data={"name": "me"}, files={"file": ("me.wav", sample)}, headers=admin)
        assert r.status_code == 201 and r.json() == {"name": "me", "seconds": 2.0}
        assert (tmp_path / "voices" / "me.wav").is_file()
        r = c.post("/api/admin/voices", data={"name": "bad"}, files={"file": ("x.wav", b"not audio")}, headers=admin)
        assert r.status_code == 422
        r = c.post("/api/admin/voices", data={"name": "../x"}, files={"file": ("me.wav", sample)}, headers=admin)
        assert r.status_code == 422
        assert c.get("/api/admin/voices", headers=admin).json() == {
            "supported": True, "workers": [worker.id], "voices": ["me"]}
        assert c.delete("/api/admin/voices/me", headers=admin).json() == {"deleted": "me"}
        assert c.delete("/api/admin/voices/me", headers=admin).status_code == 404


# ------------------------------------------------------- client address behind a proxy (issue 45, item 7)


def test_a_client_cannot_choose_its_address_behind_an_appending_proxy(tmp_path):
    """A usual proxy appends the peer to whatever X-Forwarded-For the client sent: the right-most
    entry (``auth.forwarded_hops`` from the right) is the one a trusted proxy wrote."""
    limits = {"trust_forwarded_for": True, "per_ip": {"concurrent": 1}}
    url = "/v1/realtime?extensions=all"
    with make_client(tmp_path, auth=limits) as c:
        with c.websocket_connect(url, headers={"X-Forwarded-For": "1.1.1.1, 203.0.113.7"}) as a:
            queued(a)
            second_line = httpx.Headers([("X-Forwarded-For", "3.3.3.3"), ("X-Forwarded-For", "203.0.113.7")])
            for forged in ({"X-Forwarded-For": "2.2.2.2, 203.0.113.7"}, second_line):
                with c.websocket_connect(url, headers=forged) as b:
                    assert refused(b) == ("too_many_sessions", 4029)
            with c.websocket_connect(url, headers={"X-Forwarded-For": "203.0.113.7, 198.51.100.9"}) as other:
                queued(other)  # another client of the same proxy
    with make_client(tmp_path / "two", auth={**limits, "forwarded_hops": 2}) as c:
        with c.websocket_connect(url, headers={"X-Forwarded-For": "1.1.1.1, 203.0.113.7, 10.0.0.2"}) as a:
            queued(a)
            with c.websocket_connect(url, headers={"X-Forwarded-For": "2.2.2.2, 203.0.113.7, 10.0.0.3"}) as b:
                assert refused(b) == ("too_many_sessions", 4029)
            another = {"X-Forwarded-For": "203.0.113.7, 198.51.100.9, 10.0.0.2"}
            with c.websocket_connect(url, headers=another) as other:
                queued(other)


def test_forwarded_address_must_be_an_ip_else_the_peer(tmp_path):
    from starlette.requests import HTTPConnection

    from gateway.access.policy import Access

    def ip(*lines: str, hops: int = 1, trust: bool = True) -> str:
        config = AppConfig.model_validate({"data_dir": str(tmp_path), "workers": {"count": 0},
                                           "auth": {"trust_forwarded_for": trust, "forwarded_hops": hops}})
        scope = {"type": "http", "client": ("10.9.9.9", 5000),
                 "headers": [(b"x-forwarded-for", line.encode()) for line in lines]}
        return Access(config, ADMIN).client_ip(HTTPConnection(scope))

    assert ip("198.51.100.9") == "198.51.100.9"
    assert ip("1.1.1.1,2001:DB8::0:1") == "2001:db8::1"  # one spelling per address, for the limits
    assert ip("3.3.3.3", "1.1.1.1, 203.0.113.7") == "203.0.113.7"  # a proxy that adds a second line
    for junk in ("not-an-ip", "1.1.1.1, unknown", "198.51.100.9:4711", "fe80::1%" + "x" * 60, "1.1.1.1, "):
        assert ip(junk) == "10.9.9.9", junk
    assert ip() == "10.9.9.9"
    assert ip("1.1.1.1, 203.0.113.7", trust=False) == "10.9.9.9"
    assert ip("1.1.1.1, 203.0.113.7, 10.0.0.2", hops=2) == "203.0.113.7"
    assert ip("203.0.113.7", hops=2) == "203.0.113.7"  # fewer entries: each was written by a trusted proxy
    with pytest.raises(ValueError, match="forwarded_hops"):
        AppConfig.model_validate({"auth": {"forwarded_hops": 0}})
