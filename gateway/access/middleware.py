"""The gate in front of ``/v1/*`` HTTP: the API key and the ``api`` app toggle.

ASGI middleware, not a dependency: it answers before routing, with OpenAI-shaped errors, for
every REST route alike (a new endpoint under ``/v1/`` is covered without opting in). On the
routes that take an ephemeral key instead (``EPHEMERAL_KEY_PATHS``: a browser's WebRTC offer), an
``ek_...`` key goes on to the route, which redeems it.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.access.ephemeral_keys import EPHEMERAL_KEY_PATHS, is_ephemeral
from gateway.access.policy import Access, presented_key
from gateway.admin.settings import SettingsStore


def api_access_middleware(access: Access, settings: SettingsStore):
    """ASGI middleware for ``/v1/*`` HTTP: the API key and the ``api`` app toggle (OpenAI-shaped errors)."""

    class ApiAccess:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/v1/"):
                request = Request(scope)
                ok, _ = access.check_key(request)
                if not ok and not (scope["path"].rstrip("/") in EPHEMERAL_KEY_PATHS
                                   and is_ephemeral(presented_key(request))):
                    await _openai_error(401, "invalid_api_key", "a valid API key is required "
                                        "(Authorization: Bearer <key>)")(scope, receive, send)
                    return
                if not settings.enabled("api"):
                    await _openai_error(403, "app_disabled", "the API is disabled by the operator")(
                        scope, receive, send)
                    return
            await self.app(scope, receive, send)

    return ApiAccess


def _openai_error(status: int, code: str, message: str) -> JSONResponse:
    kind = "invalid_request_error" if status != 403 else "permission_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}},
                        status_code=status)
