"""``/v1/live/sessions`` over WebSocket: a Live session through the realtime proxy.

The same admission (keys, ephemeral keys, per-key limits), queue, relay, recording and traces as
``/v1/realtime``; only the dialect differs, and the worker speaks it (``worker/live/``). The
client's ``session.start`` waits with the other early events while the session is queued.
An ephemeral key is minted for a Realtime session and opens only that: here it is refused
(``ephemeral_key_not_allowed``, close 1008) and stays unused, since a Live session is configured
by its own ``session.start`` and could not be held to the minted config.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from core.config import AppConfig
from core.session_store import read_stored_session
from core.transport import WebSocketChannel
from gateway.metrics import GatewayMetrics
from gateway.pool.interface import SessionQueue
from gateway.access.ephemeral_keys import is_ephemeral
from gateway.access.policy import chosen_subprotocol, presented_key
from gateway.realtime.admission import CLOSE_POLICY, Admission, Refusal
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.request import DEFAULT_MODEL, session_request
from gateway.realtime.webrtc.registry import CallRegistry
from gateway.realtime.webrtc.sideband import serve_sideband
from gateway.realtime.websocket import run_proxy
from core.live_events import live_error

PATH = "/v1/live/sessions"


def live_websocket_route(admission: Admission, pool: SessionQueue, config: AppConfig, metrics: GatewayMetrics,
                         live: dict[str, RealtimeProxy]) -> WebSocketRoute:
    async def live_session(ws: WebSocket) -> None:
        await ws.accept(subprotocol=chosen_subprotocol(ws))  # a browser's key protocol, as /v1/realtime
        channel = WebSocketChannel(ws)
        admitted = await admission.admit(ws, dialect="live")
        if isinstance(admitted, Refusal):
            await _refuse(channel, admitted.message, admitted.code, admitted.close_code)
            return
        request = dataclasses.replace(session_request(ws, admission.access.client_ip(ws)), live=True, beta=False)
        await run_proxy(RealtimeProxy(channel, request, pool, config, owner=admitted.owner), metrics, live,
                        admitted.close)

    return WebSocketRoute(PATH, live_session)


FORK_REFUSALS = {  # why a stored session cannot be forked -> (error code, message)
    "not_found": ("session_not_found", "no stored session with this id was opened with this key"),
    "not_closed": ("session_not_closed", "the session has not closed yet (or its recording is still being "
                   "finished): fork it once session.closed has come"),
    "not_stored": ("session_not_stored", "the session was not stored: start it with store: true to fork it later"),
}


def live_fork_route(admission: Admission, pool: SessionQueue, config: AppConfig, metrics: GatewayMetrics,
                    live: dict[str, RealtimeProxy]) -> WebSocketRoute:
    """``wss /v1/live/sessions/{id}/fork`` (issue 72): a new Live session that starts from a
    stored, closed one: its history, instructions, voice and delegation (``worker/live/fork.py``).
    The client's ``session.start`` holds overrides only; the model is inherited. Only the key that
    opened the stored session forks it (another key's session reads as not found)."""

    async def fork(ws: WebSocket) -> None:
        await ws.accept(subprotocol=chosen_subprotocol(ws))
        channel = WebSocketChannel(ws)
        admitted = await admission.admit(ws, dialect="live")
        if isinstance(admitted, Refusal):
            await _refuse(channel, admitted.message, admitted.code, admitted.close_code)
            return
        session_id = ws.path_params["session_id"]
        found = await asyncio.to_thread(read_stored_session, config.data_dir, session_id, admitted.owner, True, False)
        if isinstance(found, str):
            admitted.close()
            code, message = FORK_REFUSALS[found]
            admission.metrics.rejected.labels(code).inc()
            await _refuse(channel, message, code, CLOSE_POLICY)
            return
        meta, _ = found
        request = dataclasses.replace(session_request(ws, admission.access.client_ip(ws)), live=True, beta=False,
                                      fork_of=session_id, model=str(meta.get("model") or DEFAULT_MODEL))
        await run_proxy(RealtimeProxy(channel, request, pool, config, owner=admitted.owner), metrics, live,
                        admitted.close)

    return WebSocketRoute(PATH + "/{session_id}/fork", fork)


def live_attach_route(admission: Admission, calls: CallRegistry) -> WebSocketRoute:
    """``wss /v1/live/sessions/{id}/attach``: an app server's sideband on a Live WebRTC call. It
    gets the events the call's data channel gets and its events go to the session (no
    ``session.start``: the session has started), as the Realtime sideband does; the service's key
    (or the call's own), never an ephemeral one."""

    async def attach(ws: WebSocket) -> None:
        await ws.accept()
        channel = WebSocketChannel(ws)
        session_id = ws.path_params["session_id"]
        if is_ephemeral(presented_key(ws)):
            message = "a sideband needs the service's API key, not an ephemeral key"
            await _refuse(channel, message, "invalid_api_key", CLOSE_POLICY)
            return
        admitted = await admission.admit(ws, dialect="live")
        if isinstance(admitted, Refusal):
            await _refuse(channel, admitted.message, admitted.code, admitted.close_code)
            return
        may = functools.partial(admission.access.owns, ws)
        try:
            await serve_sideband(channel, session_id, calls.channel_of(session_id, may), calls.bridge, may)
        finally:
            admitted.close()

    return WebSocketRoute(PATH + "/{session_id}/attach", attach)


async def _refuse(channel: WebSocketChannel, message: str, code: str, close_code: int) -> None:
    with contextlib.suppress(Exception):
        await channel.send(json.dumps(live_error(message, code), separators=(",", ":")))
    await channel.close(close_code, message[:120])
