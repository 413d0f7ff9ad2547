"""The live calls: each one's proxy runs in a task the registry owns, and ends the call with it.

A call is in the gateway's ``live`` sessions (the same dict the WebSocket route fills), so the
admin page, the operator's end-session, the limits and the metrics see calls as they see any
session. Whatever ends the session (hangup, a closed connection, the worker, the operator, a
refusal from the queue) the task's ``finally`` takes it out of ``live``, closes the admission (its rate-limit slot)
and the peer connection, and forgets the call; the proxy gives its worker lease back itself.

``CallProxy`` tells the offer's handler how queueing went, so a full queue is an HTTP answer
(429) rather than a connection that opens only to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily

from core.config import AppConfig
from gateway.metrics import GatewayMetrics
from gateway.pool.interface import SessionQueue
from gateway.pool.model import Lease, QueueStatus
from gateway.realtime.admission import Admitted
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.request import SessionRequest
from gateway.realtime.resume import Resumable, ResumableSessions

if TYPE_CHECKING:  # aiortc is loaded with the first call (routes._media)
    from gateway.realtime.webrtc.call import Call
    from gateway.realtime.webrtc.sideband import CallBridge
    from gateway.realtime.webrtc.channel import WebRTCChannel

log = logging.getLogger(__name__)

SETTLE_S = 10.0  # the longest an offer's answer waits to know the call got into the queue
HANGUP_WAIT_S = 5.0
# Whether the key of a request may act on a call whose owner (an API key id, None: opened without
# a key) is given: ``Access.owns`` for that request.
MayAct = Callable[[str | None], bool]


class CallProxy(RealtimeProxy):
    """A call's realtime proxy; ``placed`` resolves once the call is queued or assigned (None), or
    with the ``error`` event that refused it."""

    __slots__ = ("call_id", "placed", "_last_error")

    def __init__(self, client: WebRTCChannel, request: SessionRequest, pool: SessionQueue, config: AppConfig,
                 call_id: str, resumes: ResumableSessions | None = None, owner: str | None = None,
                 resume: Resumable | None = None) -> None:
        super().__init__(client, request, pool, config, resumes, owner, resume)
        self.call_id = call_id
        self.placed: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._last_error: dict[str, Any] | None = None

    def settle(self, refusal: dict[str, Any] | None) -> None:
        if not self.placed.done():
            self.placed.set_result(refusal)

    def _on_status(self, s: QueueStatus) -> None:
        self.settle(None)
        super()._on_status(s)

    def _on_assigned(self, lease: Lease) -> None:
        self.settle(None)
        super()._on_assigned(lease)

    async def _send(self, event: dict[str, Any]) -> bool:
        if event.get("type") == "error":
            self._last_error = event
        return await super()._send(event)

    async def _close(self, code: int, reason: str) -> None:
        self.settle(self._last_error or {"error": {"code": "call_ended", "message": reason}})
        await super()._close(code, reason)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "transport": "webrtc", "call_id": self.call_id}


class _CallsCollector:
    def __init__(self, registry: CallRegistry) -> None:
        self.registry = registry

    def collect(self):
        g = GaugeMetricFamily("omniduplex_webrtc_calls", "WebRTC calls open at this gateway (queued or active)")
        g.add_metric([], len(self.registry.calls))
        yield g


class CallRegistry:
    """Call id -> (call, its proxy's task)."""

    def __init__(self, pool: SessionQueue, config: AppConfig, metrics: GatewayMetrics,
                 live: dict[str, RealtimeProxy], bridge: CallBridge | None = None,
                 resumes: ResumableSessions | None = None) -> None:
        self.pool, self.config, self.metrics, self.live = pool, config, metrics, live
        self.resumes = resumes  # a call that asked for a resume token comes back with it (issue 72)
        self.bridge = bridge  # a cluster's gateways take sidebands for each other's calls
        self.calls: dict[str, tuple[Call, asyncio.Task]] = {}
        self.owners: dict[str, str | None] = {}  # call id -> the API key it belongs to (``Admitted.owner``)
        metrics.registry.register(_CallsCollector(self))

    def start(self, call: Call, request: SessionRequest, admitted: Admitted, resume: Resumable | None = None,
              resume_token: str | None = None) -> CallProxy:
        """Run the call's session in a task of its own (it outlives the offer's request).
        ``resume``: the session a dropped call's token brings back; ``resume_token``: the token a
        new call's answer carries."""
        proxy = CallProxy(call.channel, request, self.pool, self.config, call.id, self.resumes, admitted.owner, resume)
        proxy.resume_token = resume_token
        proxy.metrics = self.metrics
        self.live[proxy.ticket] = proxy
        task = asyncio.create_task(self._run(call, proxy, admitted), name=f"webrtc-call-{call.id}")
        self.calls[call.id] = (call, task)
        self.owners[call.id] = admitted.owner
        if self.bridge is not None:
            self.bridge.host(call.id, call.channel, admitted.owner)
        return proxy

    async def _run(self, call: Call, proxy: CallProxy, admitted: Admitted) -> None:
        try:
            await proxy.run()
        except Exception:  # noqa: BLE001 - one call's failure must not outlive it
            log.exception("call %s failed", call.id)
        finally:
            proxy.settle({"error": {"code": "call_ended", "message": "the call ended"}})
            self.live.pop(proxy.ticket, None)
            admitted.close()
            await call.close()
            self.calls.pop(call.id, None)
            self.owners.pop(call.id, None)
            if self.bridge is not None:
                await self.bridge.unhost(call.id)
            log.info("call %s ended", call.id)

    def owned(self, call_id: str, may: MayAct) -> bool:
        """Whether this gateway holds ``call_id`` and ``may`` act on it. Another key's call reads as
        no call at all: its id (on the admin page, in logs, in ``Location``) gives nothing away."""
        return call_id in self.calls and may(self.owners.get(call_id))

    def channel_of(self, call_id: str, may: MayAct) -> WebRTCChannel | None:
        """The channel of a call this gateway holds and ``may`` join (a sideband), else None."""
        entry = self.calls.get(call_id)
        return entry[0].channel if entry is not None and may(self.owners.get(call_id)) else None

    async def finished(self, call_id: str, timeout: float = HANGUP_WAIT_S) -> None:
        entry = self.calls.get(call_id)
        if entry is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(entry[1]), timeout)

    async def hangup(self, call_id: str, code: int = 1000, reason: str = "hangup") -> bool:
        """End a call and wait (briefly) until its worker slot is free; False if there is no such call."""
        entry = self.calls.get(call_id)
        if entry is None:
            return False
        entry[0].channel.peer_gone(code, reason)
        await self.finished(call_id)
        return True

    async def close_all(self) -> None:
        """Gateway shutdown: end every call."""
        ids = list(self.calls)
        await asyncio.gather(*(self.hangup(i, 1001, "the gateway is shutting down") for i in ids),
                             return_exceptions=True)
