"""What every HTTP request and WebSocket passes before any route: the Host, the Origin of a
state-changing request, and the body type of the REST API.

- **Host** (``gateway.allowed_hosts``): the loopback names (``localhost``, ``127.0.0.1``, ``::1``,
  any port), ``gateway.host`` unless it is a wildcard bind, and what the operator lists
  (``name``, ``name:port``, ``*.domain``, ``*`` = any). With a wildcard bind (``0.0.0.0``/``::``)
  the machine's host name and any IP address literal are accepted too: a DNS-rebinding page
  always sends its own *name*, never one of our addresses. Anything else: 400 (HTTP) or an
  ``error`` event and close 1008 (WebSocket).
- **Origin** on ``POST``/``PUT``/``PATCH``/``DELETE``: a browser sends it on every such request;
  one that is not our own (``Origin`` = ``Host``) nor in ``auth.allowed_origins`` gets 403, so a
  page on another site cannot make a visitor's browser change anything here (or run the model).
  Clients that are not browsers send no Origin and are not affected. An open service is no
  exception, and the routes a page on another origin calls as it calls OpenAI's (ephemeral keys,
  WebRTC calls) follow the same rule (their CORS: ``gateway/access/cors.py``).
- **Content-Type** on ``/v1/*`` bodies: ``application/json``, or ``multipart/form-data`` where
  OpenAI takes uploads, or ``application/sdp`` for a WebRTC offer (``/v1/realtime/calls``);
  anything else (``text/plain``, forms) gets 415 with an OpenAI-shaped error.
  No Content-Type at all is read as JSON (curl, raw clients); browsers cannot send such a request
  cross-site without an Origin, which the check above refuses.
"""

from __future__ import annotations

import ipaddress
import json
import socket

from fastapi.responses import JSONResponse
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from core.config import AppConfig, is_loopback
from core.protocol import error_event
from gateway.access.policy import Access, chosen_subprotocol

WILDCARD_BINDS = ("0.0.0.0", "::", "")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MULTIPART_PATHS = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})
CALLS_PATH = "/v1/realtime/calls"  # a WebRTC offer: application/sdp, or multipart (sdp + session)
CLOSE_POLICY = 1008


def split_host(value: str) -> tuple[str, str | None]:
    """``name[:port]`` (IPv6 in brackets) -> (lowercase name without a trailing dot, port or None)."""
    value = value.strip().lower()
    port: str | None = None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        name, rest = value[1:end], value[end + 1:]
        port = rest[1:] if rest.startswith(":") else None
    elif value.count(":") == 1:
        name, port = value.split(":")
    else:
        name = value
    return name.rstrip("."), port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostPolicy:
    def __init__(self, config: AppConfig) -> None:
        bind = config.gateway.host.strip("[]").lower()
        self.wildcard_bind = bind in WILDCARD_BINDS
        entries = list(config.gateway.allowed_hosts)
        if self.wildcard_bind:
            entries.append(socket.gethostname().lower())
        else:
            entries.append(bind)
        self.any = "*" in entries
        self.entries = [split_host(e) for e in entries if e != "*"]

    def allows(self, host: str | None) -> bool:
        if not host:
            return False
        if self.any:
            return True
        name, port = split_host(host)
        if is_loopback(name) or (self.wildcard_bind and _is_ip(name)):
            return True
        for entry, entry_port in self.entries:
            if entry_port is not None and entry_port != port:
                continue
            if entry.startswith("*.") and name.endswith(entry[1:]):
                return True
            if name == entry:
                return True
        return False


def refusal_message(host: str | None) -> str:
    if not host:
        return "a Host header is required"
    shown = host[:100].encode("ascii", "replace").decode()
    return (f"host {shown!r} is not served here (DNS rebinding protection); the operator can add it to "
            "gateway.allowed_hosts")


def web_guard_middleware(config: AppConfig, access: Access):
    """ASGI middleware: Host for HTTP and WebSocket, Origin on state-changing requests, REST body types."""
    hosts = HostPolicy(config)

    class WebGuard:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] in ("http", "websocket") and await self._refused(scope, receive, send):
                return
            # The checks' objects are gone by now: this frame lives as long as the connection (a
            # thousand queued WebSockets hold a thousand of them).
            await self.app(scope, receive, send)

        async def _refused(self, scope: Scope, receive: Receive, send: Send) -> bool:
            """Answer and return True when the request may not go on."""
            conn = HTTPConnection(scope)
            host = conn.headers.get("host")
            api = scope["path"].startswith("/v1/")
            if not hosts.allows(host):
                if scope["type"] == "websocket":
                    await _refuse_websocket(conn, receive, send, "host_not_allowed", refusal_message(host))
                else:
                    await _error(400, "host_not_allowed", refusal_message(host), api)(scope, receive, send)
                return True
            if scope["type"] == "http" and scope["method"] in STATE_CHANGING:
                if not _origin_ok(access, conn):
                    origin = (conn.headers.get("origin") or "")[:100]
                    await _error(403, "origin_not_allowed", f"origin {origin!r} may not send {scope['method']} "
                                 "requests here (cross-site request refused; the operator can list it in "
                                 "auth.allowed_origins)", api)(scope, receive, send)
                    return True
                if api and scope["method"] != "DELETE":
                    reason = _bad_content_type(scope["path"], conn.headers.get("content-type"))
                    if reason:
                        await _error(415, "unsupported_media_type", reason, api)(scope, receive, send)
                        return True
            return False

    return WebGuard


def _origin_ok(access: Access, conn: HTTPConnection) -> bool:
    """One rule for every path, the CORS routes' included (``Access.origin_allowed``)."""
    return access.origin_allowed(conn) or _same_origin_null(conn)


def _same_origin_null(conn: HTTPConnection) -> bool:
    """``Origin: null`` from our own page: browsers send it on a form post from a page with
    ``Referrer-Policy: no-referrer``; ``Sec-Fetch-Site`` (which no script can set) says it is ours."""
    return conn.headers.get("origin") == "null" and conn.headers.get("sec-fetch-site") == "same-origin"


def _bad_content_type(path: str, content_type: str | None) -> str | None:
    if content_type is None:
        return None  # read as JSON (curl, raw clients); a browser cannot send this cross-site without Origin
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    if path in MULTIPART_PATHS:
        if media == "multipart/form-data":
            return None
        return f"Unsupported Content-Type {media!r}: send multipart/form-data (or application/json)"
    if path.rstrip("/") == CALLS_PATH:
        if media in ("application/sdp", "multipart/form-data"):
            return None
        return (f"Unsupported Content-Type {media!r}: send application/sdp (or multipart/form-data with sdp "
                "and session)")
    return f"Unsupported Content-Type {media!r}: send application/json"


def _error(status: int, code: str, message: str, openai_shaped: bool) -> JSONResponse:
    if openai_shaped:
        kind = "permission_error" if status == 403 else "invalid_request_error"
        return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}},
                            status_code=status)
    return JSONResponse({"detail": message, "code": code}, status_code=status)


async def _refuse_websocket(conn: HTTPConnection, receive: Receive, send: Send, code: str, message: str) -> None:
    """Accept, say why in an ``error`` event, close 1008: a reason the client can read (a handshake
    refused before accepting reaches a browser as a bare failure)."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept", "subprotocol": chosen_subprotocol(conn), "headers": []})
    await send({"type": "websocket.send", "text": json.dumps(error_event(message, code), separators=(",", ":"))})
    await send({"type": "websocket.close", "code": CLOSE_POLICY, "reason": message[:120]})
