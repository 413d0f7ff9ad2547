"""``/v1/realtime`` over WebSocket: the first transport into the realtime proxy.

Accepts the socket (with the subprotocol a browser offered), admits it, and runs a
``RealtimeProxy`` on a ``WebSocketChannel``. A plain Starlette route, not FastAPI's: no
dependency-injection scaffolding per connection (a few KB each, which adds up with a thousand
clients waiting in the queue).
"""

from __future__ import annotations

import contextlib
import json

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from core.config import AppConfig
from core.protocol import error_event
from core.transport import WebSocketChannel
from gateway.access.policy import chosen_subprotocol
from gateway.metrics import GatewayMetrics
from gateway.pool.worker_pool import WorkerPool
from gateway.realtime.admission import Admission, Refusal
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.request import session_request

PATH = "/v1/realtime"


def realtime_websocket_route(admission: Admission, pool: WorkerPool, config: AppConfig, metrics: GatewayMetrics,
                             live: dict[str, RealtimeProxy]) -> WebSocketRoute:
    access = admission.access

    async def realtime(ws: WebSocket) -> None:
        await ws.accept(subprotocol=chosen_subprotocol(ws))
        channel = WebSocketChannel(ws)
        admitted = await admission.admit(ws)
        if isinstance(admitted, Refusal):
            with contextlib.suppress(Exception):
                await channel.send(json.dumps(error_event(admitted.message, admitted.code), separators=(",", ":")))
            await channel.close(admitted.close_code, admitted.message)
            return
        proxy = RealtimeProxy(channel, session_request(ws, access.client_ip(ws), admitted.grant), pool, config)
        proxy.metrics = metrics
        live[proxy.ticket] = proxy
        try:
            await proxy.run()
        finally:
            live.pop(proxy.ticket, None)
            admitted.close()

    return WebSocketRoute(PATH, realtime)
