"""Web hardening of the gateway (issue 32, items 3, 5 and 6).

In process (``TestClient``): the Host allow-list for HTTP and WebSocket (DNS rebinding), REST body
types (415), a foreign Origin on state-changing requests (403), the security headers, the admin
page behind one route whatever the path spelling, and admin sign-in sessions (random, expiring,
revocable cookie; ``?token=`` signs in once and leaves the URL).
In a real Chromium against a real gateway: our pages load with no CSP violation (chat, home,
duplex, viewer, admin), a page's WebSocket still connects, and another origin cannot frame them.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from pydantic import ValidationError

from core.config import AppConfig
from gateway.app import create_app

ADMIN = "t" * 24
STATIC = Path(__file__).resolve().parents[3] / "static"
HOST = "localhost:8006"


def config(tmp_path: Path, **sections) -> AppConfig:
    base = {"data_dir": str(tmp_path), "workers": {"count": 0}, "admin": {"token": ADMIN}}
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return AppConfig.model_validate(base)


def client(tmp_path: Path, host: str = HOST, **sections) -> TestClient:
    return TestClient(create_app(config(tmp_path, **sections)), base_url=f"http://{host}")


def ws_events(c: TestClient, url: str, headers: dict) -> tuple[dict, int | None]:
    """The first event of a realtime connection and, if it was refused, its close code."""
    with c.websocket_connect(url, headers=headers) as ws:
        first = ws.receive_json()
        if first["type"] != "error":
            return first, None
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        return first, closed.value.code


# --------------------------------------------------------------------------- 3. Host allow-list


def test_host_allow_list_http(tmp_path):
    with client(tmp_path) as c:
        for host in ("localhost", "localhost:8006", "127.0.0.1:1234", "[::1]:8006", "LOCALHOST.:8006"):
            assert c.get("/", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example:8006", "localhost.evil.example", "127.0.0.1.nip.io:8006", ""):
            r = c.get("/", headers={"Host": host})
            assert r.status_code == 400, (host, r.status_code)
            assert r.json()["code"] == "host_not_allowed"
            if host:
                assert "gateway.allowed_hosts" in r.json()["detail"] and host in r.json()["detail"]
        # The REST API and the admin API alike (an OpenAI-shaped error under /v1/).
        r = c.get("/v1/models", headers={"Host": "evil.example:8006"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "host_not_allowed"
        assert c.get("/health", headers={"Host": "evil.example:8006"}).status_code == 400
        r = c.get("/api/admin/overview", headers={"Host": "evil.example:8006", "Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 400

    # gateway.host (a public name) and what the operator lists.
    with client(tmp_path / "b", host="omni.example.com", gateway={"host": "omni.example.com", "tls": {"mode": "off"},
                "allowed_hosts": ["*.corp.example", "alias.example:9000"]}) as c:
        for host in ("omni.example.com", "omni.example.com:443", "a.corp.example", "x.y.corp.example:8006",
                     "alias.example:9000", "localhost:8006"):
            assert c.get("/health", headers={"Host": host}).status_code == 200, host
        for host in ("corp.example.evil", "alias.example:9001", "evil.example", "10.0.0.5:8006"):
            assert c.get("/health", headers={"Host": host}).status_code == 400, host

    # A wildcard bind: any address literal (a rebinding page always sends its own *name*), no names.
    with client(tmp_path / "c", host="10.0.0.5:8006", gateway={"host": "0.0.0.0", "tls": {"mode": "off"}}) as c:
        assert c.get("/health", headers={"Host": "10.0.0.5:8006"}).status_code == 200
        assert c.get("/health", headers={"Host": "[fd00::5]:8006"}).status_code == 200
        assert c.get("/health", headers={"Host": "evil.example:8006"}).status_code == 400
    with client(tmp_path / "d", host="anything.example", gateway={"allowed_hosts": ["*"]}) as c:
        assert c.get("/health").status_code == 200


def test_host_allow_list_config_is_validated(tmp_path):
    for bad in ("http://omni.example.com", "omni.example.com/x", "a b", ""):
        with pytest.raises(ValidationError) as err:
            config(tmp_path, gateway={"allowed_hosts": [bad]})
        assert "gateway.allowed_hosts" in str(err.value) and "is not a host name" in str(err.value), bad
    assert config(tmp_path, gateway={"allowed_hosts": ["Omni.Example.COM:8443"]}).gateway.allowed_hosts == [
        "omni.example.com:8443"]


def test_dns_rebinding_websocket_is_refused(tmp_path):
    """The rebinding page: Host is the attacker's name, Origin matches it (so the Origin check passed)."""
    with client(tmp_path) as c:
        evil = {"Host": "evil.example:8006", "Origin": "http://evil.example:8006"}
        event, code = ws_events(c, "ws://evil.example:8006/v1/realtime?extensions=all", evil)
        assert code == 1008 and event["error"]["code"] == "host_not_allowed", event
        assert "evil.example" in event["error"]["message"]
        own = {"Host": HOST, "Origin": f"http://{HOST}"}
        event, code = ws_events(c, f"ws://{HOST}/v1/realtime?extensions=all", own)
        assert code is None and event["type"] == "queue.position", event  # no worker: it waits


# --------------------------------------------------------------------------- 3. body types and Origin


def test_rest_bodies_only_json_or_multipart(tmp_path):
    with client(tmp_path) as c:
        body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]})
        for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                      "multipart/form-data; boundary=x"):
            r = c.post("/v1/chat/completions", content=body, headers={"Content-Type": ctype})
            assert r.status_code == 415, (ctype, r.status_code, r.text)
            error = r.json()["error"]
            assert error["code"] == "unsupported_media_type" and error["type"] == "invalid_request_error"
            assert "application/json" in error["message"]
        r = c.post("/v1/audio/speech", content=b"{}", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
        r = c.post("/v1/audio/transcriptions", content=b"x", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]["message"]
        # What OpenAI accepts passes this gate (and fails later, on the body itself).
        r = c.post("/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json; charset=utf-8"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        r = c.post("/v1/audio/transcriptions", files={"file": ("a.txt", b"abc")})
        assert r.status_code != 415


def test_foreign_origin_on_state_changing_requests(tmp_path):
    bearer = {"Authorization": f"Bearer {ADMIN}"}
    with client(tmp_path, auth={"allowed_origins": ["https://partner.example"]}) as c:
        evil = {"Origin": "https://evil.example"}
        r = c.post("/v1/chat/completions", json={"model": "x", "messages": []}, headers=evil)
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
        assert c.post("/v1/chat/completions", json={}, headers={"Origin": "null"}).status_code == 403
        assert c.post("/v1/chat/completions", json={}, headers={"Origin": "null", "Sec-Fetch-Site": "cross-site"}
                      ).status_code == 403
        # Everywhere, whatever the credentials: admin API with the Bearer token, shares, sign-in.
        for method, path in (("PUT", "/api/admin/apps/chat"), ("DELETE", "/api/admin/presets"),
                             ("PATCH", "/api/admin/eta"), ("POST", "/api/admin/workers/w0/enable")):
            r = c.request(method, path, json={"enabled": True}, headers={**bearer, **evil})
            assert r.status_code == 403 and "evil.example" in r.json()["detail"], (method, path, r.status_code)
        assert c.post("/api/shares", json={"text": "x"}, headers=evil).status_code == 403
        assert c.post("/admin/login", data={"token": ADMIN}, headers=evil).status_code == 403
        # Our own origin, a listed one, and no Origin (not a browser) go through; reads are not affected.
        for origin in ({"Origin": f"http://{HOST}"}, {"Origin": "https://partner.example"}, {}):
            r = c.put("/api/admin/apps/chat", json={"enabled": True}, headers={**bearer, **origin})
            assert r.status_code == 200, (origin, r.status_code, r.text)
        assert c.get("/api/admin/apps", headers={**bearer, **evil}).status_code == 200


# --------------------------------------------------------------------------- 5. headers and the admin page


def test_security_headers_on_every_response(tmp_path):
    with client(tmp_path) as c:
        pages = ["/", "/turnbased.html", "/audio_duplex.html", "/omni.html", "/admin", "/static/viewer.html"]
        others = ["/static/shared/style.css", "/static/chat/chat-page.js", "/health", "/v1/models",
                  "/api/apps", "/nope", "/api/admin/overview"]
        for path in pages + others:
            r = c.get(path)
            h = r.headers
            assert h.get("x-content-type-options") == "nosniff", path
            assert h.get("referrer-policy") in ("same-origin", "no-referrer"), path
            assert h.get("x-frame-options") == "SAMEORIGIN", path
            assert "frame-ancestors 'self'" in h.get("content-security-policy", ""), path
            if path in pages:
                csp = h["content-security-policy"]
                assert "script-src 'self';" in csp and "style-src 'self';" in csp and "unsafe" not in csp, path
                assert "object-src 'none'" in csp and "base-uri 'self'" in csp, path
        assert c.get("/admin").headers["referrer-policy"] == "same-origin"  # no-referrer: forms post Origin null
        # Refusals carry them too.
        assert c.get("/", headers={"Host": "evil.example"}).headers.get("x-content-type-options") == "nosniff"


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "inline <script>"),
    (re.compile(r"<style\b", re.I), "<style> element"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "inline event handler"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
]


def test_our_pages_have_nothing_inline_the_csp_would_block():
    """Backs the CSP (no 'unsafe-inline'): no inline scripts, styles or handlers in any page, no
    style or handler attributes in HTML the scripts build, no injected <style> element."""
    from gateway.admin.page import LOGIN_PAGE

    sources = {str(p.relative_to(STATIC)): p.read_text() for p in STATIC.rglob("*.html")}
    sources["LOGIN_PAGE"] = LOGIN_PAGE
    for name, text in sources.items():
        for pattern, what in INLINE:
            assert not pattern.search(text), f"{name}: {what} ({pattern.search(text).group(0)!r})"
    for path in STATIC.rglob("*.js"):
        text = path.read_text()
        for pattern, what in INLINE[1:4]:
            markup = [m for m in re.findall(r"`[^`]*`|\"[^\"\n]*\"|'[^'\n]*'", text) if "<" in m]
            hits = [m for m in markup if pattern.search(m)]
            assert not hits, f"{path.relative_to(STATIC)}: {what} in markup {hits[0][:80]!r}"
        assert 'createElement("style")' not in text and "eval(" not in text, path


ADMIN_VARIANTS = ["/static//admin.html", "/static///admin.html", "/static/%2e/admin.html", "/static/./admin.html",
                  "/static/shared/../admin.html", "/static/shared/%2e%2e/admin.html", "/static/admin.html",
                  "/static/admin/../admin.html", "/admin.html", "/admin"]


def test_admin_page_only_behind_the_sign_in_whatever_the_spelling(tmp_path):
    page = (STATIC / "admin.html").read_text()
    marker = "/static/admin/admin-page.js"
    assert marker in page
    with client(tmp_path) as c:
        for path in ADMIN_VARIANTS:
            r = c.get(path)
            assert marker not in r.text, (path, r.status_code)
            assert r.status_code in (401, 404), (path, r.status_code)
        # Signed in, the admin routes serve it; the static mount still never does.
        c.post("/admin/login", data={"token": ADMIN})
        assert marker in c.get("/admin").text and marker in c.get("/static/admin.html").text
        assert c.get("/static//admin.html").status_code == 404
        assert c.get("/static/admin/admin-page.js").status_code == 200  # its scripts are public


# --------------------------------------------------------------------------- 6. admin sessions


def test_sign_in_gives_a_random_expiring_session_not_the_token(tmp_path):
    with client(tmp_path, admin={"session_hours": 2}) as c:
        r = c.post("/admin/login", data={"token": ADMIN}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/admin"
        cookie = r.headers["set-cookie"]
        value = c.cookies["omni_admin"]
        assert ADMIN not in cookie and len(value) >= 32, cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=7200" in cookie
        assert c.get("/api/admin/overview").status_code == 200
        other = TestClient(c.app, base_url=f"http://{HOST}")
        other.post("/admin/login", data={"token": ADMIN})
        assert other.cookies["omni_admin"] != value  # random per sign-in
        # Expiry: the server forgets it after admin.session_hours, whatever the browser keeps.
        auth = c.app.state.admin_auth
        real = auth.clock
        auth.clock = lambda: real() + 2 * 3600 + 1
        try:
            assert c.get("/api/admin/overview").status_code == 401
            assert "sign in" in c.get("/admin").text.lower()
        finally:
            auth.clock = real
    with client(tmp_path / "default") as c:
        r = c.post("/admin/login", data={"token": ADMIN}, follow_redirects=False)
        assert "Max-Age=43200" in r.headers["set-cookie"]  # 12 h by default


def test_sign_out_revokes_and_a_restart_or_new_token_ends_sessions(tmp_path):
    with client(tmp_path) as c:
        c.post("/admin/login", data={"token": ADMIN})
        stolen = c.cookies["omni_admin"]
        r = c.post("/admin/logout", follow_redirects=False)
        assert r.status_code == 303
        replay = {"Cookie": f"omni_admin={stolen}"}
        fresh = TestClient(c.app, base_url=f"http://{HOST}")
        assert fresh.get("/api/admin/overview", headers=replay).status_code == 401  # deleted server-side
        fresh.post("/admin/login", data={"token": ADMIN})
        kept = fresh.cookies["omni_admin"]
    with client(tmp_path) as restarted:  # same config, new process
        assert restarted.get("/api/admin/overview", headers={"Cookie": f"omni_admin={kept}"}).status_code == 401
    with client(tmp_path, admin={"token": "n" * 24}) as new_token:
        assert new_token.get("/api/admin/overview", headers={"Cookie": f"omni_admin={kept}"}).status_code == 401
    # The old cookie format (the token itself) is no sign-in either.
    with client(tmp_path) as c:
        assert c.get("/api/admin/overview", headers={"Cookie": f"omni_admin={ADMIN}"}).status_code == 401


def signed_in_cookie(c: TestClient, headers: dict | None = None) -> str:
    r = c.post("/admin/login", data={"token": ADMIN}, headers=headers or {}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return r.headers["set-cookie"]


def test_admin_cookie_is_secure_unless_plain_http_to_loopback(tmp_path):
    """Issue 45, item 9: behind a TLS proxy the gateway sees http, yet the browser used https."""
    public = {"gateway": {"allowed_hosts": ["omni.example.com"]}}
    with client(tmp_path, host="omni.example.com", **public) as c:
        assert "Secure" in signed_in_cookie(c)  # a public name: TLS is in front
    with client(tmp_path, host="127.0.0.1:8006") as c:
        assert "Secure" not in signed_in_cookie(c)  # where tests and local use sign in over http
        assert "Secure" not in signed_in_cookie(c, {"X-Forwarded-Proto": "https"})  # not trusted
        assert c.get("/api/admin/overview").status_code == 200
    # A proxy on the same host that passes Host 127.0.0.1: its X-Forwarded-Proto says https.
    with client(tmp_path, host="127.0.0.1:8006", auth={"trust_forwarded_for": True}) as c:
        assert "Secure" in signed_in_cookie(c, {"X-Forwarded-Proto": "https"})
        assert "Secure" not in signed_in_cookie(c, {"X-Forwarded-Proto": "http"})
    # The override: plain http on a LAN without TLS, or Secure even on loopback.
    with client(tmp_path, host="omni.example.com", admin={"secure_cookie": False}, **public) as c:
        assert "Secure" not in signed_in_cookie(c)
    with client(tmp_path, host="localhost:8006", admin={"secure_cookie": True}) as c:
        assert "Secure" in signed_in_cookie(c)
    with pytest.raises(ValidationError) as err:
        config(tmp_path, admin={"secure_cookie": "yes"})
    assert "admin.secure_cookie" in str(err.value) and "true, false or null" in str(err.value)


def recorded_session(data_dir: Path) -> tuple[str, str]:
    session_id, share = "sess_" + "ab" * 16, "share-token-0123456789"
    path = data_dir / "sessions" / session_id
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps({"id": session_id, "status": "finished",
                                                 "share_token_sha256": hashlib.sha256(share.encode()).hexdigest()}))
    (path / "recording.json").write_text(json.dumps({"events": []}))
    return session_id, share


def test_token_in_the_url_signs_in_once_and_leaves_the_url(tmp_path):
    session_id, share = recorded_session(tmp_path)
    with client(tmp_path) as c:
        for path, target in ((f"/admin?token={ADMIN}", "/admin"), (f"/admin?tab=x&token={ADMIN}", "/admin?tab=x"),
                             (f"/static/admin.html?token={ADMIN}", "/static/admin.html"),
                             (f"/s/{session_id}?token={ADMIN}", f"/s/{session_id}")):
            c.cookies.clear()
            r = c.get(path, follow_redirects=False)
            assert r.status_code == 303 and r.headers["location"] == target, (path, r.status_code)
            assert ADMIN not in r.headers["location"] and ADMIN not in r.headers["set-cookie"]
            assert c.get(target).status_code == 200, path
        # The viewer's data with the sign-in's cookie (the page no longer has a token to send).
        assert c.get(f"/api/sessions/{session_id}?token=").status_code == 200
        anon = TestClient(c.app, base_url=f"http://{HOST}")
        # APIs do not take the admin token from the URL; share links keep working; Bearer too.
        r = anon.get(f"/api/admin/overview?token={ADMIN}")
        assert r.status_code == 401 and "not in the URL" in r.json()["detail"]
        assert anon.get(f"/api/sessions/{session_id}?token={ADMIN}").status_code == 404
        assert anon.get(f"/api/admin/sessions?token={ADMIN}").status_code == 401
        assert anon.get(f"/s/{session_id}?token={share}", follow_redirects=False).status_code == 200
        assert anon.get(f"/api/sessions/{session_id}?token={share}").status_code == 200
        bearer = {"Authorization": f"Bearer {ADMIN}"}
        assert anon.get("/api/admin/overview", headers=bearer).status_code == 200
        assert anon.get(f"/api/sessions/{session_id}", headers=bearer).status_code == 200
        assert anon.get("/api/admin/sessions", headers=bearer).status_code == 200
        # A wrong token in the URL: the sign-in page says so, no redirect, no cookie.
        r = anon.get("/admin?token=wrong-token-xyz", follow_redirects=False)
        assert r.status_code == 401 and "Wrong token" in r.text and "set-cookie" not in r.headers
        assert anon.get(f"/s/{session_id}?token=wrong", follow_redirects=False).status_code == 404


# --------------------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def gateway_stack(tmp_path_factory):
    from tests.support.stack import Stack

    s = Stack(tmp_path_factory.mktemp("web_stack"), workers=0).start(timeout=60)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def other_origin(tmp_path_factory, gateway_stack):
    """A page on another origin (another port) that frames ours."""
    from launcher.processes import free_port

    root = tmp_path_factory.mktemp("other_origin")
    frames = "".join(f'<iframe src="{gateway_stack.url}{p}" width="300" height="200"></iframe>'
                     for p in ("/turnbased.html", "/admin", "/audio_duplex.html"))
    (root / "frame.html").write_text(f"<!doctype html><title>other site</title>{frames}")
    port = free_port()
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{port}"
    server.shutdown()


def csp_violations(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser")
            if "Content Security Policy" in e["message"] or "Refused to" in e["message"]]


def test_browser_pages_pass_the_csp_and_cannot_be_framed(gateway_stack, other_origin, launch, tmp_path):
    from tests.support.browser import require_browser, silence_wav, wait_until

    require_browser()
    browser = launch(silence_wav(tmp_path / "s.wav", 1))
    url = gateway_stack.url
    for path in ("/", "/turnbased.html", "/audio_duplex.html", "/omni.html", "/static/viewer.html"):
        browser.get(url + path)
        assert wait_until(lambda: browser.execute_script("return document.readyState") == "complete", 10)
        assert wait_until(lambda: browser.execute_script(
            "return !!document.querySelector('nav a.brand') || !!document.querySelector('main h1')"), 10), path
        assert csp_violations(browser) == [], path
    # The chat page's modules ran (the nav and the tool settings they build) and its styles applied.
    browser.get(url + "/turnbased.html")
    assert wait_until(lambda: browser.execute_script("return !!document.getElementById('demo-tools')"), 10)
    # A WebSocket from our page is allowed by connect-src (no worker: it waits in the queue).
    first = browser.execute_async_script(
        "const done = arguments[0]; const ws = new WebSocket(`ws://${location.host}/v1/realtime?extensions=all`);"
        "ws.onmessage = (e) => { done(JSON.parse(e.data).type); ws.close(); };"
        "ws.onerror = () => done('error'); setTimeout(() => done('timeout'), 8000);")
    assert first == "queue.position", first
    assert csp_violations(browser) == []

    # The admin page: ?token= signs in, leaves the address bar, and the page runs under the CSP.
    browser.get(f"{url}/admin?token={gateway_stack.admin_token}")
    assert browser.current_url == f"{url}/admin"
    assert wait_until(lambda: browser.execute_script("return window.admin && window.admin.overview"), 15)
    assert csp_violations(browser) == []
    cookie = browser.get_cookie("omni_admin")
    assert cookie and cookie["value"] != gateway_stack.admin_token and cookie["httpOnly"]
    # Sign out: back to the sign-in form, and the API is closed to this browser.
    browser.find_element("css selector", "form[action='/admin/logout'] button").click()
    assert wait_until(lambda: "needs the operator's token" in browser.execute_script(
        "return document.querySelector('main') ? document.querySelector('main').innerText : ''"), 10)
    assert browser.execute_async_script(
        "fetch('/api/admin/overview').then((r) => arguments[0](r.status))") == 401

    # Another origin frames our pages: the browser refuses every one (frame-ancestors 'self').
    browser.get(f"{other_origin}/frame.html")
    refused = wait_until(lambda: [m for m in browser.get_log("browser") if "frame-ancestors" in m["message"]], 10)
    assert refused and all("blocked" in m["message"] for m in refused), refused
    frames = browser.find_elements("tag name", "iframe")
    assert len(frames) == 3
    for frame in frames:
        browser.switch_to.frame(frame)
        shown = browser.execute_script("return document.title + ' ' + (document.body ? document.body.innerText : '')")
        assert "OmniDuplex" not in shown and "Admin" not in shown, shown
        browser.switch_to.default_content()
