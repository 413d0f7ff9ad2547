"""The gateway: one public port; queues sessions onto workers and relays them.

It never loads a model and never decodes media. Every session's slot is taken by
``WorkerPool.acquire`` and given back in ``finally``, on every path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import websockets
from fastapi import FastAPI, Response, WebSocket
from fastapi.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocketState

from core import logctx
from core.config import AppConfig
from core.ids import new_id
from core.protocol import EXTENSION_EVENTS, error_event, parse_extensions, server_event, unknown_extensions_error
from core.session_store import new_session_id, new_share_token, token_hash
from gateway.access import Access, chosen_subprotocol
from gateway.admin import admin_router, api_access_middleware, public_router
from gateway.apps import SettingsStore, app_of
from gateway.auth import load_admin_token
from gateway.cleanup import cleanup_loop
from gateway.cluster.redis_queue import ClusterUnavailable
from gateway.health import HealthChecker
from gateway.metrics import CONTENT_TYPE_LATEST, METRICS_PREFIX, GatewayMetrics
from gateway.openai_rest import openai_router
from gateway.pages import install_pages
from gateway.presets import presets_router
from gateway.ratelimit import RateLimited, SessionLimiter, Slot
from gateway.recordings import recordings_router
from gateway.relay import RelayResult, relay
from gateway.shares import shares_router
from gateway.worker_pool import (
    Lease,
    NoCapableWorkerError,
    QueueCancelledError,
    QueueFullError,
    QueueStatus,
    QueueTimeoutError,
    WorkerPool,
)

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
MAX_EARLY_MESSAGES = 256  # client events sent while queued, forwarded once assigned
CLOSE_TRY_AGAIN = 1013
CLOSE_POLICY = 1008  # auth, origin, disabled app: do not retry
CLOSE_OPERATOR = 4004  # ended or removed from the queue by the operator
CLOSE_RATE_LIMITED = 4029  # per-IP / per-key limits; retry after the time in the message


def make_pool(config: AppConfig) -> WorkerPool:
    """The in-process pool, or with ``cluster.redis_url`` the one shared through Redis."""
    settings = {"capacity": config.queue.capacity, "max_wait_s": config.queue.max_wait_s,
                "default_session_s": config.queue.default_session_s,
                "healthy_after": config.health.healthy_after, "unhealthy_after": config.health.unhealthy_after}
    url = config.cluster.resolved_url()
    if url is None:
        pool = WorkerPool(**settings)
        for worker_url in config.worker_urls():
            pool.add_worker(worker_url, slots=config.workers.slots)
        return pool
    from gateway.cluster.shared_pool import SharedPool

    gateway_id = config.cluster.gateway_id or f"{socket.gethostname()}-{config.gateway.port}"
    pool = SharedPool(url, prefix=config.cluster.prefix, lease_ttl_s=config.cluster.lease_ttl_s,
                      gateway_id=gateway_id.replace(" ", "_")[:40], **settings)
    pool.configure_workers(config.worker_urls(), config.workers.slots)
    return pool


def create_app(config: AppConfig) -> FastAPI:
    pool = make_pool(config)
    checker = HealthChecker(
        pool, interval_s=config.health.interval_s, timeout_s=config.health.timeout_s, jitter=config.health.jitter
    )

    admin_token = load_admin_token(config)
    settings = SettingsStore(Path(config.data_dir))
    pool.set_eta_session_s(settings.settings.eta_session_s)
    access = Access(config, admin_token)
    limiter = SessionLimiter(config.auth.per_ip, config.auth.per_key)
    metrics = GatewayMetrics(pool)
    live: dict[str, RealtimeProxy] = {}  # ticket -> open realtime session (queued or relaying)

    pool.local_sessions = lambda: [p.info() for p in live.values()]
    pool.end_local = lambda ticket, reason: _end_local(live, ticket, reason)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await pool.start()
        await checker.start()
        await metrics.start()
        cleaner = asyncio.create_task(cleanup_loop(config))
        try:
            yield
        finally:
            cleaner.cancel()
            await metrics.stop()
            await checker.stop()
            await pool.close()

    app = FastAPI(title="OmniDuplex gateway", lifespan=lifespan)
    app.state.pool = pool
    app.state.config = config
    app.state.live = live
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.access = access
    app.state.limiter = limiter
    app.state.checker = checker
    app.add_middleware(api_access_middleware(access, settings))

    @app.exception_handler(ClusterUnavailable)
    async def cluster_unavailable(request, exc: ClusterUnavailable) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.get("/health")
    async def health() -> Response:
        snap = pool.snapshot(with_queue=False)
        cluster = pool.cluster_health()
        body = {
            "status": "ok" if cluster is None or cluster["ok"] else "unavailable",
            "workers_total": len(snap["workers"]),
            "workers_healthy": snap["healthy"],
            "slots_total": snap["slots_total"],
            "slots_busy": snap["busy"],
            "queue_length": snap["queue_length"],
            "workers": [
                {**{k: w[k] for k in ("id", "url", "health", "slots", "busy", "capabilities")},
                 **({"upstream": w["last_probe"]["upstream"]} if (w["last_probe"] or {}).get("upstream") else {})}
                for w in snap["workers"]
            ],
        }
        if cluster is not None:  # several gateways: 503 while the shared state is out of reach
            body["cluster"] = cluster
            return JSONResponse(body, status_code=200 if cluster["ok"] else 503)
        return JSONResponse(body)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def realtime(ws: WebSocket) -> None:
        await ws.accept(subprotocol=chosen_subprotocol(ws))
        slot = await admit(ws)
        if slot is None:
            return
        proxy = RealtimeProxy(ws, pool, config)
        proxy.metrics = metrics
        proxy.client_ip = access.client_ip(ws)
        live[proxy.ticket] = proxy
        try:
            await proxy.run()
        finally:
            live.pop(proxy.ticket, None)
            slot.close()

    # A plain Starlette route, not FastAPI's: no dependency-injection scaffolding per connection
    # (a few KB each, which adds up with a thousand clients waiting in the queue).
    app.router.routes.append(WebSocketRoute("/v1/realtime", realtime))

    async def admit(ws: WebSocket) -> Slot | None:
        """Origin, API key, app toggle and rate limits, before the queue; refusals get an error event."""
        async def refuse(code: str, message: str, close: int) -> None:
            metrics.rejected.labels(code).inc()
            log.info("refused realtime session from %s: %s", access.client_ip(ws), code)
            with contextlib.suppress(Exception):
                await ws.send_text(json.dumps(error_event(message, code), separators=(",", ":")))
                await ws.close(close, message[:120])

        if not access.origin_allowed(ws):
            await refuse("origin_not_allowed", f"origin {ws.headers.get('origin')} may not open sessions here",
                         CLOSE_POLICY)
            return None
        ok, key = access.check_key(ws)
        if not ok:
            await refuse("invalid_api_key", "a valid API key is required (Authorization: Bearer <key> or the "
                         "subprotocol openai-insecure-api-key.<key>)", CLOSE_POLICY)
            return None
        app_id = app_of(ws.query_params.get("app"))
        if not settings.enabled(app_id):
            await refuse("app_disabled", f"the {app_id} app is disabled by the operator", CLOSE_POLICY)
            return None
        try:
            return limiter.try_open(access.client_ip(ws), key)
        except RateLimited as exc:
            await refuse(exc.code, exc.message, CLOSE_RATE_LIMITED)
            return None

    app.include_router(presets_router(Path(config.data_dir)))
    app.include_router(shares_router(Path(config.data_dir)))
    app.include_router(recordings_router(config, admin_token, ROOT / "static"))
    app.include_router(public_router(settings, access))
    app.include_router(admin_router(app, admin_token, ROOT / "static"))
    app.include_router(openai_router(pool))
    install_pages(app, ROOT / "static")
    return app


def _end_local(live: dict[str, RealtimeProxy], session: str, reason: str) -> bool:
    """Another gateway's operator ended a session that runs here."""
    proxy = next((p for p in live.values() if session in (p.session_id, p.ticket)), None)
    if proxy is None or proxy.state == "ended":
        return False
    proxy.end_by_operator(reason)
    return True


class RealtimeProxy:
    """One client connection: queue, assignment, relay, release."""

    def __init__(self, ws: WebSocket, pool: WorkerPool, config: AppConfig) -> None:
        self.ws = ws
        self.pool = pool
        self.config = config
        self.ticket = new_id("ticket")
        self.beta = "realtime=v1" in ws.headers.get("openai-beta", "")
        self.model = ws.query_params.get("model") or "omniduplex-cascade"
        self.app_name = (ws.query_params.get("app") or "api")[:40]
        # Recording: on when the service records, unless this client said record=false.
        self.record = config.recording.enabled and ws.query_params.get("record", "true").lower() not in (
            "false", "0", "off")
        caps = ws.query_params.get("capabilities") or ""
        self.requirements = frozenset(c for c in caps.split(",") if c)
        # Extension events (queue.*, session.recording, session.metrics, ...) only on request:
        # standard clients validate every event against OpenAI's types.
        self.extensions, self.unknown_extensions = parse_extensions(ws.query_params.get("extensions"))
        self.intent = ws.query_params.get("intent") or ""
        # Queue messages go out through one ordered outbox drained by a short-lived task, not a
        # task per waiting client: a thousand waiters then cost two tasks each, not three.
        self._outbox: collections.deque[dict[str, Any]] = collections.deque()
        self._sender: asyncio.Task | None = None
        self._assigned_sent = False
        self.early: list[str] = []
        # What the admin page shows; set as the session moves on.
        self.metrics: GatewayMetrics | None = None
        self.client_ip = ws.client.host if ws.client else "unknown"
        self.created_at = time.time()
        self.state = "queued"
        self.session_id: str | None = None
        self.worker_id: str | None = None
        self.assigned_at: float | None = None
        self._stop = asyncio.Event()
        self._stop_reason = ""

    def end_by_operator(self, reason: str = "ended by the operator") -> None:
        """Admin: end this session now (it gets ``session_ended_by_operator`` and close 4004)."""
        self._stop_reason = reason
        if self.state == "queued" and self.pool.cancel(self.ticket, reason):
            return
        self._stop.set()

    def info(self) -> dict[str, Any]:
        return {"ticket": self.ticket, "session_id": self.session_id, "state": self.state, "app": self.app_name,
                "worker_id": self.worker_id, "client": self.client_ip, "created_at": self.created_at,
                "assigned_at": self.assigned_at, "record": self.record}

    async def _send(self, event: dict[str, Any]) -> bool:
        try:
            await self.ws.send_text(json.dumps(event, separators=(",", ":")))
            return True
        except Exception:  # noqa: BLE001 - client already gone
            return False

    def _post(self, event: dict[str, Any]) -> None:
        if event["type"] in EXTENSION_EVENTS and event["type"] not in self.extensions:
            return
        self._outbox.append(event)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._outbox:
            await self._send(self._outbox.popleft())

    async def _flush(self) -> None:
        if self._sender is not None:
            with contextlib.suppress(Exception):
                await self._sender

    def _on_status(self, s: QueueStatus) -> None:
        self._post(server_event("queue.position", ticket=s.ticket, position=s.position, queue_length=s.queue_length,
                                eta_s=round(s.eta_s, 1)))

    def _on_assigned(self, lease: Lease) -> None:
        # Called inside the pool's dispatch, before the other waiters' position updates.
        self._assigned_sent = True
        self._post(server_event("queue.assigned", ticket=self.ticket, worker_id=lease.worker.id,
                                queued_s=round(lease.queued_s, 3)))

    async def _close(self, code: int, reason: str) -> None:
        if self.ws.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason[:120])

    async def run(self) -> None:
        lease: Lease | None = None
        logctx.bind(session=self.ticket)
        if self.unknown_extensions:
            await self._send(unknown_extensions_error(self.unknown_extensions))
        try:
            lease = await self._wait_for_worker()
            if lease is None:
                return
            if self.metrics is not None:
                self.metrics.queue_wait.observe(lease.queued_s)
            await self._serve(lease)
        finally:
            self.state = "ended"
            if lease is not None:
                self.pool.release(lease)

    async def _wait_for_worker(self) -> Lease | None:
        """Queue until a worker is assigned; a client that leaves is dropped at once."""
        acquire = asyncio.create_task(self.pool.acquire(self.requirements, self.ticket, self._on_status,
                                                        self._on_assigned))
        receive = asyncio.create_task(self.ws.receive())
        try:
            while True:
                done, _ = await asyncio.wait({acquire, receive}, return_when=asyncio.FIRST_COMPLETED)
                if receive in done:
                    message = receive.result()
                    if message["type"] == "websocket.disconnect":
                        acquire.cancel()
                        lease = None
                        with contextlib.suppress(BaseException):
                            lease = await acquire
                        if lease is not None:
                            # Assigned in the same instant the client left: give the slot back.
                            self.pool.release(lease, record=False)
                        return None
                    if message.get("text") is not None:
                        if len(self.early) >= MAX_EARLY_MESSAGES:
                            await self._send(error_event("too many events sent while queued", "queue_overflow"))
                        else:
                            self.early.append(message["text"])
                    receive = asyncio.create_task(self.ws.receive())
                if acquire in done:
                    try:
                        return acquire.result()
                    except QueueCancelledError as exc:
                        await self._send(error_event(str(exc), "queue_cancelled"))
                        await self._close(CLOSE_OPERATOR, "removed from the queue by the operator")
                    except QueueFullError as exc:
                        await self._send(error_event(str(exc), "queue_full", kind="server_error"))
                        await self._close(CLOSE_TRY_AGAIN, f"queue full: {exc}")
                    except QueueTimeoutError as exc:
                        await self._send(error_event(str(exc), "queue_timeout", kind="server_error"))
                        await self._close(CLOSE_TRY_AGAIN, "queue wait exceeded")
                    except NoCapableWorkerError as exc:
                        await self._send(error_event(str(exc), "no_capable_worker"))
                        await self._close(1008, str(exc))
                    except ClusterUnavailable as exc:
                        await self._send(error_event(f"no session can start now: {exc}", "cluster_unavailable",
                                                     kind="server_error"))
                        await self._close(CLOSE_TRY_AGAIN, "the shared queue is unreachable; try again")
                    return None
        finally:
            receive.cancel()
            if not acquire.done():
                acquire.cancel()

    async def _serve(self, lease: Lease) -> None:
        worker = lease.worker
        if not self._assigned_sent:  # assigned at once, without queueing
            self._on_assigned(lease)
        await self._flush()  # queue.* before anything from the worker
        session_id = new_session_id()
        self.session_id, self.worker_id, self.assigned_at = session_id, worker.id, time.time()
        self.state = "connecting"
        logctx.bind(session=session_id, worker=worker.id)
        params = {"dialect": "beta" if self.beta else "ga", "session_id": session_id, "model": self.model,
                  "app": self.app_name, "record": "true" if self.record else "false",
                  # session.metrics always: the gateway's own latency figures come from it
                  "extensions": ",".join(sorted(self.extensions | {"session.metrics"}))}
        if self.intent:
            params["intent"] = self.intent
        if self.record:
            # Only the hash reaches the worker and the disk; the link goes to this client alone.
            token = new_share_token()
            params["share_hash"] = token_hash(token)
            self._post(server_event("session.recording", session_id=session_id,
                                    share_url=f"/s/{session_id}?token={token}"))
            await self._flush()
        url = (
            worker.url.replace("http://", "ws://").replace("https://", "wss://").rstrip("/")
            + "/ws/realtime?" + urlencode(params)
        )
        wcfg = self.config.workers
        try:
            conn = await websockets.connect(
                # Server events from our own worker: not bounded by the client message limit (a
                # spoken reply's audio delta can be larger than what a client may send).
                url, open_timeout=wcfg.connect_timeout_s,
                max_size=max(self.config.limits.transport_max_bytes, 16 * 2**20),
                ping_interval=wcfg.ping_interval_s, ping_timeout=wcfg.ping_interval_s, compression=None,
                # a hung worker never completes a close handshake: give up on it after 2 s
                close_timeout=2,
            )
        except (TimeoutError, OSError, websockets.WebSocketException) as exc:
            await self._worker_unavailable(worker.id, f"connect failed: {exc!r}")
            return
        # A worker that accepts the socket but never speaks (hung) must not hold the slot forever.
        first: str | bytes | None = None
        try:
            first = await asyncio.wait_for(conn.recv(), wcfg.connect_timeout_s)
        except TimeoutError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 1)
            await self._worker_unavailable(worker.id, f"no session.created within {wcfg.connect_timeout_s:g} s")
            return
        except websockets.ConnectionClosed:
            pass  # the relay reads the close and reports it
        if isinstance(first, str):
            if self.metrics is not None:
                self.metrics.observe_worker_text(first)
            with contextlib.suppress(Exception):
                await self.ws.send_text(first)
        started = time.monotonic()
        self.state = "active"
        try:
            result = await self._relay_until_stopped(conn)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 2)
        log.info("session %s on %s ended by %s (%s) after %.1fs", self.ticket, worker.id, result.ended_by,
                 result.code, time.monotonic() - started)
        if self.metrics is not None:
            self.metrics.sessions_ended.labels(result.ended_by).inc()
        if result.ended_by == "operator":
            await self._send(error_event(f"the session was {result.reason}", "session_ended_by_operator",
                                         kind="server_error"))
            await self._close(CLOSE_OPERATOR, result.reason)
        elif result.ended_by == "worker_failed":
            self.pool.report_failure(worker.id, result.reason)
            await self._send(error_event("the model worker failed during the session; please reconnect",
                                         "worker_failed", kind="server_error"))
            await self._close(1011, "worker failed")
        elif result.ended_by == "client" and result.code == 1008:  # stopped reading: close, briefly
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._close(1008, result.reason), 2)
        elif result.ended_by == "worker":
            await self._close(result.code if result.code >= 1000 else 1011, result.reason)

    async def _worker_unavailable(self, worker_id: str, why: str) -> None:
        log.warning("worker %s unavailable for %s: %s", worker_id, self.ticket, why)
        self.pool.report_failure(worker_id, why)
        await self._send(error_event("the assigned worker could not be reached; please reconnect",
                                     "worker_unavailable", kind="server_error"))
        await self._close(1011, "worker unavailable")

    async def _relay_until_stopped(self, conn) -> RelayResult:
        """The relay, unless the operator ends the session first."""
        observe = self.metrics.observe_worker_text if self.metrics is not None else None
        drop = None if "session.metrics" in self.extensions else METRICS_PREFIX
        relaying = asyncio.create_task(relay(self.ws, conn, self.early, on_worker_text=observe, drop_prefix=drop))
        stopping = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({relaying, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if relaying.done():
            return relaying.result()
        relaying.cancel()
        with contextlib.suppress(BaseException):
            await relaying
        return RelayResult("operator", CLOSE_OPERATOR, self._stop_reason or "ended by the operator")
