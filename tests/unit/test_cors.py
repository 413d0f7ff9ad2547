"""CORS for the routes a page on another origin calls as it calls OpenAI's (issue 33): minting
ephemeral keys and WebRTC calls. Preflights from allowed and refused origins, the
``Access-Control-Allow-Origin`` header on answers and errors, the web guard letting an allowed
cross-origin POST through (and no other), and the body types ``/v1/realtime/calls`` takes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from core.config import AppConfig
from gateway.access.cors import is_cors_path
from gateway.app import create_app

KEY = "sk-test-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
APP = "https://app.example"
EVIL = "https://evil.example"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


def make_client(tmp_path, **auth) -> TestClient:
    config = AppConfig.model_validate({"data_dir": str(tmp_path), "workers": {"count": 0},
                                       "gateway": {"allowed_hosts": ["testserver"]},
                                       "admin": {"token": "a" * 24}, "auth": auth})
    return TestClient(create_app(config))


def test_cors_paths():
    for path in ("/v1/realtime/client_secrets", "/v1/realtime/sessions", "/v1/realtime/calls",
                 "/v1/realtime/calls/rtc_abc123", "/v1/realtime/calls/rtc_abc123/hangup"):
        assert is_cors_path(path), path
    for path in ("/v1/realtime", "/v1/chat/completions", "/v1/realtime/calls/a/b", "/v1/realtime/calls/../x",
                 "/api/shares", "/v1/realtime/client_secrets/x"):
        assert not is_cors_path(path), path


@pytest.mark.parametrize("path", ["/v1/realtime/client_secrets", "/v1/realtime/sessions", "/v1/realtime/calls",
                                  "/v1/realtime/calls/rtc_1", "/v1/realtime/calls/rtc_1/hangup"])
def test_preflight_from_an_allowed_origin(tmp_path, path):
    with make_client(tmp_path, api_keys=[KEY], allowed_origins=[APP]) as c:
        r = c.options(path, headers={"Origin": APP, **PREFLIGHT,
                                     "Access-Control-Request-Headers": "authorization,content-type,openai-beta,"
                                     "x-stainless-os,x-evil"})
        assert r.status_code == 204, r.text
        assert r.headers["access-control-allow-origin"] == APP
        assert "POST" in r.headers["access-control-allow-methods"]
        allowed = [h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")]
        assert {"authorization", "content-type", "openai-beta", "x-stainless-os"} <= set(allowed)
        assert "x-evil" not in allowed
        assert int(r.headers["access-control-max-age"]) > 0 and "Origin" in r.headers["vary"]
        assert r.headers["x-content-type-options"] == "nosniff"  # the security headers as on any answer


def test_preflight_allows_what_the_agents_sdk_sends_with_its_offer(tmp_path):
    """The OpenAI Agents SDK for JavaScript posts its WebRTC offer with ``X-OpenAI-Agents-SDK``:
    Chromium's preflight asks for exactly these headers, and refuses the POST unless all are allowed."""
    with make_client(tmp_path, api_keys=[KEY], allowed_origins=[APP]) as c:
        r = c.options("/v1/realtime/calls", headers={
            "Origin": APP, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-openai-agents-sdk"})
        assert r.status_code == 204, r.text
        allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type", "x-openai-agents-sdk"} <= allowed


def test_preflight_from_a_refused_origin_gets_no_cors_headers(tmp_path):
    with make_client(tmp_path, api_keys=[KEY], allowed_origins=[APP]) as c:
        r = c.options("/v1/realtime/calls", headers={"Origin": EVIL, **PREFLIGHT})
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
        assert "access-control-allow-origin" not in r.headers
        # A foreign Host is refused before any preflight is answered (DNS rebinding).
        r = c.options("/v1/realtime/calls", headers={"Origin": APP, "Host": "evil.example", **PREFLIGHT})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        # Other routes are not CORS routes: no preflight answered there.
        r = c.options("/v1/chat/completions", headers={"Origin": APP, **PREFLIGHT})
        assert "access-control-allow-origin" not in r.headers


def test_answers_and_errors_carry_the_origin_for_allowed_pages(tmp_path):
    with make_client(tmp_path, api_keys=[KEY], allowed_origins=[APP]) as c:
        r = c.post("/v1/realtime/client_secrets", json={}, headers={**AUTH, "Origin": APP})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
        assert "Location" in r.headers["access-control-expose-headers"]
        for headers, status in (({"Origin": APP}, 401), ({**AUTH, "Origin": APP, "Content-Type": "text/plain"}, 415)):
            r = c.post("/v1/realtime/client_secrets", content=b"{}", headers=headers)
            assert r.status_code == status and r.headers["access-control-allow-origin"] == APP, r.text
        r = c.post("/v1/realtime/client_secrets", json={"expires_after": {"seconds": 1}},
                   headers={**AUTH, "Origin": APP})
        assert r.status_code == 400 and r.headers["access-control-allow-origin"] == APP
        # A refused origin: 403 from the web guard, and nothing a page could read.
        r = c.post("/v1/realtime/client_secrets", json={}, headers={**AUTH, "Origin": EVIL})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
        # Without an Origin (an app server) nothing changes.
        r = c.post("/v1/realtime/client_secrets", json={}, headers=AUTH)
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        # Routes outside the list keep the plain Origin rule.
        r = c.post("/v1/chat/completions", json={}, headers={**AUTH, "Origin": APP})
        assert r.status_code != 403 and "access-control-allow-origin" not in r.headers
        r = c.post("/v1/chat/completions", json={}, headers={**AUTH, "Origin": EVIL})
        assert r.status_code == 403


def test_which_origins(tmp_path):
    with make_client(tmp_path / "keys", api_keys=[KEY]) as c:  # keys, no listed origins: only our own
        assert c.options("/v1/realtime/sessions", headers={"Origin": APP, **PREFLIGHT}).status_code == 403
        r = c.options("/v1/realtime/sessions", headers={"Origin": "http://testserver", **PREFLIGHT})
        assert r.status_code == 204
    with make_client(tmp_path / "any", api_keys=[KEY], allowed_origins=["*"]) as c:
        r = c.options("/v1/realtime/sessions", headers={"Origin": EVIL, **PREFLIGHT})
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == EVIL
    with make_client(tmp_path / "open", allowed_origins=[APP]) as c:  # an open service: the same list
        r = c.options("/v1/realtime/client_secrets", headers={"Origin": APP, **PREFLIGHT})
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == APP
        r = c.post("/v1/realtime/client_secrets", json={}, headers={"Origin": APP})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == APP
        r = c.options("/v1/realtime/client_secrets", headers={"Origin": EVIL, **PREFLIGHT})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


WS_ROUTES = ("/v1/realtime?extensions=all", "/v1/live/sessions?extensions=queue")


def test_an_open_service_lets_no_other_site_use_the_models(tmp_path):
    """Issue 68, finding 6: with no keys configured, a page from another site (one the local user
    visits) got CORS, minted a key and opened a session with it. Now no route answers another
    origin unless ``auth.allowed_origins`` lists it; our own pages and non-browser clients go on."""
    with make_client(tmp_path) as c:
        evil = {"Origin": EVIL}
        for path in ("/v1/realtime/client_secrets", "/v1/realtime/sessions", "/v1/realtime/calls",
                     "/v1/realtime/calls/rtc_1/hangup", "/v1/live/sessions", "/v1/live/sessions/sess_1/hangup"):
            r = c.options(path, headers={**evil, **PREFLIGHT})
            assert r.status_code == 403 and "access-control-allow-origin" not in r.headers, (path, r.status_code)
            r = c.post(path, content=b"{}", headers={**evil, "Content-Type": "application/json"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", (path, r.text)
            assert "access-control-allow-origin" not in r.headers, path
        for path in ("/v1/chat/completions", "/v1/audio/speech"):
            r = c.post(path, json={}, headers=evil)
            assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", (path, r.text)
        # A key minted by a non-browser client (no Origin) does not let that page in either.
        key = c.post("/v1/realtime/client_secrets", json={}).json()["value"]
        for path in WS_ROUTES:
            with c.websocket_connect(path, headers=evil, subprotocols=["realtime", f"openai-insecure-api-key.{key}"]
                                     ) as ws:
                assert ws.receive_json()["error"]["code"] == "origin_not_allowed", path
        # Our own page and clients without an Origin are not affected.
        own = {"Origin": "http://testserver"}
        r = c.post("/v1/realtime/client_secrets", json={}, headers=own)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://testserver"
        assert c.post("/v1/realtime/client_secrets", json={}).status_code == 200
        for headers in (own, {}):
            with c.websocket_connect(WS_ROUTES[0], headers=headers) as ws:
                assert ws.receive_json()["type"] == "queue.position"


def test_calls_take_sdp_and_multipart_and_an_ephemeral_key_reaches_the_route(tmp_path):
    with make_client(tmp_path, api_keys=[KEY]) as c:
        for ctype in ("application/sdp", "multipart/form-data; boundary=x"):
            r = c.post("/v1/realtime/calls", content=b"v=0\r\n", headers={**AUTH, "Content-Type": ctype})
            assert r.status_code != 415, (ctype, r.status_code)
        r = c.post("/v1/realtime/calls", content=b"v=0", headers={**AUTH, "Content-Type": "text/plain"})
        assert r.status_code == 415 and "application/sdp" in r.json()["error"]["message"]
        r = c.post("/v1/chat/completions", content=b"v=0", headers={**AUTH, "Content-Type": "application/sdp"})
        assert r.status_code == 415
        # An ephemeral key stands for the service's key on the offer (the route redeems it) ...
        ek = {"Authorization": "Bearer ek_" + "0" * 48, "Content-Type": "application/sdp"}
        r = c.post("/v1/realtime/calls", content=b"v=0\r\n", headers=ek)
        assert not (r.status_code == 401 and "a valid API key is required" in r.text), r.text
        # ... and nowhere else.
        r = c.post("/v1/realtime/calls/rtc_1/hangup", headers={"Authorization": ek["Authorization"]})
        assert r.status_code == 401
        assert c.get("/v1/models", headers={"Authorization": ek["Authorization"]}).status_code == 401
