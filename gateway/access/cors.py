"""CORS for the routes a page on another origin calls directly, as it calls OpenAI's: minting an
ephemeral key (``/v1/realtime/client_secrets``, beta ``/v1/realtime/sessions``) and WebRTC calls
(``/v1/realtime/calls``, ``/v1/realtime/calls/{id}``, ``.../hangup``), and a Live session's offer and
hangup (``POST /v1/live/sessions``, ``.../{id}/hangup``).

Which origins: the gateway's own and those in ``auth.allowed_origins`` (``"*"`` = any), keys or
not. An open service (no ``auth.api_keys``) is no exception: it is typically a local one, and a
page the local user happens to visit must not drive its models (nor the MCP servers it reaches on
internal addresses). It is ``Access.origin_allowed``, the rule of every route: the web guard
(``gateway/access/web.py``) and every session's admission (``gateway/realtime/admission.py``),
an ephemeral key's included.

A preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is answered
here with 204; from another origin with 403 and no CORS headers (the browser then refuses the
request). Real answers, errors included, carry ``Access-Control-Allow-Origin`` for an allowed
origin, so a page can read why it was refused. No credentials (cookies) are involved: keys travel
in ``Authorization``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.access.policy import Access

CORS_PATHS = re.compile(
    r"^/v1/(realtime/(client_secrets|sessions|calls(/[A-Za-z0-9_.-]{1,128}(/hangup)?)?)"
    r"|live/sessions(/[A-Za-z0-9_.-]{1,128}/hangup)?)/?$")
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
# X-OpenAI-Agents-SDK: the Agents SDK for JavaScript puts it on its WebRTC offer (a browser refuses the
# POST unless the preflight allows it).
ALLOW_HEADERS = ("Authorization", "Content-Type", "OpenAI-Beta", "OpenAI-Organization", "OpenAI-Project",
                 "X-OpenAI-Agents-SDK")
EXPOSE_HEADERS = "Location, x-request-id, X-Resume-Token"  # the last: a resumable call's token (issue 72)
MAX_AGE_S = "600"
_ALLOWED_LOWER = frozenset(h.lower() for h in ALLOW_HEADERS)


def is_cors_path(path: str) -> bool:
    return CORS_PATHS.match(path) is not None


def _allowed_request_headers(requested: str) -> list[str]:
    """The headers a preflight asked for that we take: ours, and the ``openai`` SDKs' own
    ``X-Stainless-*`` (which the JavaScript SDK sends from a browser)."""
    names = [h.strip() for h in requested.split(",") if h.strip()]
    return [h for h in names if h.lower() not in _ALLOWED_LOWER and h.lower().startswith("x-stainless-")]


def cors_middleware(access: Access, host_allowed: Callable[[str | None], bool]):
    """ASGI middleware: preflights answered, ``Access-Control-Allow-Origin`` on the answers.
    ``host_allowed``: the web guard's Host check, so a preflight never answers a foreign Host."""

    class Cors:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or not is_cors_path(scope["path"]):
                await self.app(scope, receive, send)
                return
            conn = HTTPConnection(scope)
            origin = conn.headers.get("origin")
            if origin is None:
                await self.app(scope, receive, send)
                return
            if not host_allowed(conn.headers.get("host")):  # the web guard refuses it (DNS rebinding)
                await self.app(scope, receive, send)
                return
            allowed = access.origin_allowed(conn)
            if scope["method"] == "OPTIONS" and "access-control-request-method" in conn.headers:
                await _preflight(conn, origin, allowed)(scope, receive, send)
                return
            if not allowed:
                await self.app(scope, receive, send)
                return

            async def send_with_cors(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = MutableHeaders(scope=message)
                    headers["Access-Control-Allow-Origin"] = origin
                    headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
                    headers.add_vary_header("Origin")
                await send(message)

            await self.app(scope, receive, send_with_cors)

    return Cors


def _preflight(conn: HTTPConnection, origin: str, allowed: bool) -> Response:
    if not allowed:
        return JSONResponse({"error": {"message": f"origin {origin[:100]!r} may not call this API from a page (the "
                                       "operator can list it in auth.allowed_origins)", "type": "permission_error",
                                       "param": None, "code": "origin_not_allowed"}}, status_code=403)
    extra = _allowed_request_headers(conn.headers.get("access-control-request-headers", ""))
    return Response(status_code=204, headers={
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": ALLOW_METHODS,
        "Access-Control-Allow-Headers": ", ".join((*ALLOW_HEADERS, *extra)),
        "Access-Control-Max-Age": MAX_AGE_S,
        "Vary": "Origin",
    })
