"""``/v1/realtime`` over WebSocket: the first transport into the realtime proxy.

Accepts the socket (with the subprotocol a browser offered), admits it, and runs a
``RealtimeProxy`` on a ``WebSocketChannel``; with ``?call_id=`` it is a sideband that joins a
running WebRTC call's session instead (``webrtc/sideband.py``). A plain Starlette route, not FastAPI's: no
dependency-injection scaffolding per connection (a few KB each, which adds up with a thousand
clients waiting in the queue).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from core.config import AppConfig
from core.protocol import error_event
from core.transport import WebSocketChannel
from gateway.access.ephemeral_keys import is_ephemeral
from gateway.access.policy import chosen_subprotocol, presented_key
from gateway.metrics import GatewayMetrics
from gateway.pool.interface import SessionQueue
from gateway.realtime.admission import CLOSE_POLICY, CLOSE_TRY_AGAIN, Admission, Refusal
from gateway.realtime.proxy import CLOSE_RESUME_EXPIRED, RealtimeProxy
from gateway.realtime.request import session_request
from gateway.realtime.resume import INVALID, ResumableSessions, ResumeRefusal
from gateway.realtime.webrtc.registry import CallRegistry
from gateway.realtime.webrtc.sideband import serve_sideband

PATH = "/v1/realtime"


def realtime_websocket_route(admission: Admission, pool: SessionQueue, config: AppConfig, metrics: GatewayMetrics,
                             live: dict[str, RealtimeProxy], calls: CallRegistry | None = None,
                             resumes: ResumableSessions | None = None) -> WebSocketRoute:
    access = admission.access

    async def realtime(ws: WebSocket) -> None:
        await ws.accept(subprotocol=chosen_subprotocol(ws))
        channel = WebSocketChannel(ws)
        call_id = ws.query_params.get("call_id")
        if call_id is not None and is_ephemeral(presented_key(ws)):
            message = "a sideband connection (call_id) needs the service's API key, not an ephemeral key"
            with contextlib.suppress(Exception):
                await channel.send(json.dumps(error_event(message, "invalid_api_key"), separators=(",", ":")))
            await channel.close(CLOSE_POLICY, message)
            return
        admitted = await admission.admit(ws)
        if isinstance(admitted, Refusal):
            with contextlib.suppress(Exception):
                await channel.send(json.dumps(error_event(admitted.message, admitted.code), separators=(",", ":")))
            await channel.close(admitted.close_code, admitted.message)
            return
        if call_id is not None and calls is not None:
            may = functools.partial(access.owns, ws)  # only the call's own key (or the admin token) joins it
            try:
                await serve_sideband(channel, call_id, calls.channel_of(call_id, may), calls.bridge, may)
            finally:
                admitted.close()
            return
        request = session_request(ws, access.client_ip(ws), admitted.grant)
        resume = None
        token = ws.query_params.get("resume_token")
        if token is not None:  # a session whose connection dropped, brought back (issue 72)
            resume = await resumes.claim(token, admitted.owner) if resumes is not None else INVALID
            if isinstance(resume, ResumeRefusal):
                admission.metrics.rejected.labels(resume.code).inc()
                admitted.close()
                with contextlib.suppress(Exception):
                    await channel.send(json.dumps(error_event(resume.message, resume.code, "resume_token"),
                                                  separators=(",", ":")))
                await channel.close(CLOSE_POLICY if resume is INVALID else CLOSE_TRY_AGAIN if resume.http_status == 503
                                    else CLOSE_RESUME_EXPIRED, resume.message)
                return
        proxy = RealtimeProxy(channel, request, pool, config, resumes, admitted.owner, resume)
        await run_proxy(proxy, metrics, live, admitted.close)

    return WebSocketRoute(PATH, realtime)


async def run_proxy(proxy: RealtimeProxy, metrics: GatewayMetrics, live: dict[str, RealtimeProxy],
                    release: Callable[[], None]) -> None:
    """Run an admitted session's proxy, listed for the admin page while it runs."""
    proxy.metrics = metrics
    live[proxy.ticket] = proxy
    try:
        await proxy.run()
    finally:
        live.pop(proxy.ticket, None)
        release()
