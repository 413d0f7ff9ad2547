"""The worker's door: every HTTP request and WebSocket must carry the deployment's worker secret
(``core/worker_auth.py``). Without it: HTTP 401, or the WebSocket accepted and closed at once with
1008 and the reason, so the caller learns why instead of seeing a bare handshake failure."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from core.worker_auth import is_authorized

REFUSED = "this is an internal OmniDuplex worker: calls need the deployment's worker secret " \
          "(Authorization: Bearer <secret>); clients connect to the gateway"
CLOSE_REASON = "worker secret missing or wrong"  # a close reason is at most 123 bytes


class WorkerSecretMiddleware:
    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app = app
        self.secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        auth = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"), None)
        if is_authorized(auth, self.secret):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            body = json.dumps({"detail": REFUSED}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="omniduplex-worker"')]})
            await send({"type": "http.response.body", "body": body})
            return
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1008, "reason": CLOSE_REASON})
