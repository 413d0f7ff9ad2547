"""``/v1/live/sessions`` over WebSocket: a Live session through the realtime proxy.

The same admission (keys, ephemeral keys, per-key limits), queue, relay, recording and traces as
``/v1/realtime``; only the dialect differs, and the worker speaks it (``worker/live/``). The
client's ``session.start`` waits with the other early events while the session is queued.
An ephemeral key minted for a Realtime session opens a Live one too; its Realtime session
config does not apply (a Live session is configured by its own ``session.start``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from core.config import AppConfig
from core.transport import WebSocketChannel
from gateway.metrics import GatewayMetrics
from gateway.pool.interface import SessionQueue
from gateway.realtime.admission import Admission, Refusal
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.request import session_request
from gateway.realtime.websocket import run_proxy
from core.live_events import live_error

PATH = "/v1/live/sessions"


def live_websocket_route(admission: Admission, pool: SessionQueue, config: AppConfig, metrics: GatewayMetrics,
                         live: dict[str, RealtimeProxy]) -> WebSocketRoute:
    async def live_session(ws: WebSocket) -> None:
        await ws.accept()
        channel = WebSocketChannel(ws)
        admitted = await admission.admit(ws)
        if isinstance(admitted, Refusal):
            with contextlib.suppress(Exception):
                await channel.send(json.dumps(live_error(admitted.message, admitted.code), separators=(",", ":")))
            await channel.close(admitted.close_code, admitted.message)
            return
        request = session_request(ws, admission.access.client_ip(ws), admitted.grant)
        request = dataclasses.replace(request, live=True, beta=False, initial_session=None)
        await run_proxy(RealtimeProxy(channel, request, pool, config), metrics, live, admitted.close)

    return WebSocketRoute(PATH, live_session)
