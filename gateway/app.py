"""The gateway: one public port; queues sessions onto workers and relays them.

This module only assembles the app from its parts, one folder a job: ``realtime/`` (sessions:
transports, admission, queue-and-relay), ``rest/`` (the OpenAI REST API), ``pool/`` (workers,
health, the Redis cluster), ``access/`` (API keys, origins, rate limits), ``admin/`` (the
operator's API and settings), ``recordings/`` (viewer, shares, cleanup) and ``site/`` (the
pages and what they read). It never loads a model (``tests/unit/test_layering.py``); the only
media it touches is a WebRTC call's Opus (``realtime/webrtc/``), coded off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from core import telemetry
from core.config import AppConfig
from core.worker_auth import auth_headers, load_worker_secret
from gateway.access.cors import cors_middleware
from gateway.access.ephemeral_keys import make_ephemeral_keys
from gateway.access.middleware import api_access_middleware
from gateway.access.policy import Access
from gateway.access.rate_limits import SessionLimiter
from gateway.access.web import HostPolicy, web_guard_middleware
from gateway.admin.routes import admin_router
from gateway.admin.sessions import AdminAuth
from gateway.admin.settings import SettingsStore
from gateway.admin.token import load_admin_token
from gateway.live.webrtc import live_calls_router
from gateway.live.websocket import live_attach_route, live_fork_route, live_websocket_route
from gateway.metrics import CONTENT_TYPE_LATEST, GatewayMetrics
from gateway.pool.factory import make_pool
from gateway.pool.health_checker import HealthChecker
from gateway.pool.redis_queue import ClusterUnavailable
from gateway.realtime.admission import Admission
from gateway.realtime.client_secrets import client_secrets_router
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.webrtc.registry import CallRegistry
from gateway.realtime.webrtc.routes import calls_router
from gateway.realtime.webrtc.sideband import CallBridge
from gateway.realtime.resume import ResumableSessions
from gateway.realtime.websocket import realtime_websocket_route
from gateway.recordings.cleanup import cleanup_loop
from gateway.recordings.routes import recordings_router
from gateway.recordings.shares import shares_router
from gateway.rest.routes import openai_router
from gateway.site.apps import apps_router
from gateway.site.headers import SecurityHeaders
from gateway.site.presets import presets_router
from gateway.site.static_pages import install_pages

ROOT = Path(__file__).resolve().parent.parent


def create_app(config: AppConfig) -> FastAPI:
    pool = make_pool(config)
    pool.worker_headers = auth_headers(load_worker_secret(config))  # every call to a worker carries it
    checker = HealthChecker(
        pool, interval_s=config.health.interval_s, timeout_s=config.health.timeout_s, jitter=config.health.jitter
    )

    admin_token = load_admin_token(config)
    settings = SettingsStore(Path(config.data_dir))
    pool.set_eta_session_s(settings.settings.eta_session_s)
    access = Access(config, admin_token)
    limiter = SessionLimiter(config.auth.per_ip, config.auth.per_key)
    ephemeral_keys = make_ephemeral_keys(pool)  # in memory, or in the cluster's Redis
    metrics = GatewayMetrics(pool)
    telemetry.setup(config.telemetry, "gateway")  # off (nothing imported) without an OTLP endpoint
    live: dict[str, RealtimeProxy] = {}  # ticket -> open realtime session (queued or relaying)

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
            await calls.close_all()
            await metrics.stop()
            await checker.stop()
            await pool.close()
            telemetry.shutdown()  # the last spans reach the collector

    app = FastAPI(title="OmniDuplex gateway", lifespan=lifespan)
    app.state.pool = pool
    app.state.config = config
    app.state.live = live
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.access = access
    app.state.limiter = limiter
    app.state.checker = checker
    app.state.ephemeral_keys = ephemeral_keys
    admin_auth = app.state.admin_auth = AdminAuth(admin_token, config.admin.session_hours * 3600,
                                                  secure_cookie=config.admin.secure_cookie,
                                                  trust_forwarded_proto=config.auth.trust_forwarded_for)
    app.add_middleware(api_access_middleware(access, settings))
    app.add_middleware(web_guard_middleware(config, access))  # Host, Origin, REST body types: before all
    app.add_middleware(cors_middleware(access, HostPolicy(config).allows))  # its headers on the guard's refusals too
    app.add_middleware(SecurityHeaders)  # outermost: refusals get the headers too

    @app.exception_handler(ClusterUnavailable)
    async def cluster_unavailable(request, exc: ClusterUnavailable) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.get("/health")
    async def health(request: Request) -> Response:
        """Public: ok or not, and the counts. The details (worker URLs, the upstream LLM's URL and
        error, the cluster's Redis) only with the admin token as ``Authorization: Bearer``."""
        snap = pool.snapshot(with_queue=False)
        cluster = pool.cluster_health()
        status = 200 if cluster is None or cluster["ok"] else 503  # several gateways: 503 without Redis
        body = {
            "status": "ok" if status == 200 else "unavailable",
            "workers_total": len(snap["workers"]),
            "workers_healthy": snap["healthy"],
            "slots_total": snap["slots_total"],
            "slots_busy": snap["busy"],
            "queue_length": snap["queue_length"],
        }
        if admin_auth.is_admin(request)[0]:
            body["workers"] = [
                {**{k: w[k] for k in ("id", "url", "health", "slots", "busy", "capabilities")},
                 **({"upstream": w["last_probe"]["upstream"]} if (w["last_probe"] or {}).get("upstream") else {})}
                for w in snap["workers"]
            ]
            if cluster is not None:
                body["cluster"] = cluster
        return JSONResponse(body, status_code=status)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    admission = app.state.admission = Admission(access, settings, limiter, metrics, ephemeral_keys)
    shared = getattr(pool, "shared", None)  # a cluster: sidebands reach calls on any gateway
    bridge = CallBridge(shared.redis, shared.prefix, shared.gateway_id) if shared is not None else None
    resumes = app.state.resumes = ResumableSessions(pool, config.limits.resume_grace_s)  # issue 72
    calls = app.state.calls = CallRegistry(pool, config, metrics, live, bridge, resumes)  # WebRTC calls, in `live` too
    pool.local_sessions = lambda: [p.info() for p in live.values()] + resumes.held()
    app.router.routes.append(realtime_websocket_route(admission, pool, config, metrics, live, calls, resumes))
    app.router.routes.append(live_websocket_route(admission, pool, config, metrics, live))
    app.router.routes.append(live_attach_route(admission, calls))
    app.router.routes.append(live_fork_route(admission, pool, config, metrics, live))
    app.include_router(calls_router(calls, admission, config))
    app.include_router(live_calls_router(calls, admission, config))

    app.include_router(presets_router(Path(config.data_dir)))
    app.include_router(shares_router(config, access, admin_auth))
    app.include_router(recordings_router(config, admin_auth, ROOT / "static"))
    app.include_router(apps_router(settings, access))
    app.include_router(admin_router(app, admin_token, ROOT / "static"))
    app.include_router(openai_router(pool, access=access, limiter=limiter))  # the sessions' limits
    app.include_router(client_secrets_router(ephemeral_keys, access, config))
    install_pages(app, ROOT / "static")
    return app


def _end_local(live: dict[str, RealtimeProxy], session: str, reason: str) -> bool:
    """Another gateway's operator ended a session that runs here."""
    proxy = next((p for p in live.values() if session in (p.session_id, p.ticket)), None)
    if proxy is None or proxy.state == "ended":
        return False
    proxy.end_by_operator(reason)
    return True
