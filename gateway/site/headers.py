"""Security headers on every HTTP response of the gateway.

- Every response: ``X-Content-Type-Options: nosniff`` (a file is only what its type says),
  ``Referrer-Policy: same-origin`` unless the route chose a stricter one (the admin page and the
  viewer send ``no-referrer``), ``X-Frame-Options: SAMEORIGIN`` and ``frame-ancestors 'self'``:
  no other site can frame the microphone pages (a framed page would pass the Origin check).
- HTML: a Content-Security-Policy our own pages pass. Scripts and styles come only from our
  origin (no inline script, style or handler anywhere in ``static/``: an injected one does not
  run); images and media also from ``data:``/``blob:`` (camera frames, picked images);
  ``connect-src`` is our origin (WebSocket included).
- FastAPI's ``/docs`` and ``/redoc`` load Swagger UI / ReDoc from a CDN with an inline bootstrap
  script; they get a policy that allows exactly that.
"""

from __future__ import annotations

import re

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
            "media-src 'self' data: blob:; font-src 'self'; worker-src 'self' blob:; object-src 'none'; "
            "base-uri 'self'; form-action 'self'; frame-ancestors 'self'")
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
            "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
            "font-src 'self' https://fonts.gstatic.com; img-src 'self' data: https://fastapi.tiangolo.com "
            "https://cdn.redoc.ly; worker-src 'self' blob:; object-src 'none'; base-uri 'self'; "
            "frame-ancestors 'self'")
OTHER_CSP = "frame-ancestors 'self'"
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})
_PLAIN_HOST = re.compile(r"^[A-Za-z0-9.\-\[\]:]{1,255}$")


def page_csp(host: str | None) -> str:
    """The page policy; ``connect-src`` names our WebSocket origins too (older engines do not
    count ws: under 'self')."""
    own = f" ws://{host} wss://{host}" if host and _PLAIN_HOST.match(host) else ""
    return PAGE_CSP + f"; connect-src 'self'{own}"


class SecurityHeaders:
    """ASGI middleware; the outermost one, so refusals by the other layers get the headers too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "same-origin")
                headers.setdefault("X-Frame-Options", "SAMEORIGIN")
                if "content-security-policy" not in headers:
                    html = headers.get("content-type", "").startswith("text/html")
                    csp = (DOCS_CSP if path in DOCS_PATHS else page_csp(host)) if html else OTHER_CSP
                    headers["Content-Security-Policy"] = csp
            await send(message)

        await self.app(scope, receive, with_headers)
