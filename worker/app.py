"""The worker's FastAPI app: loads its backend in the lifespan (in a thread), reports health
and load progress, and runs realtime sessions on its internal WebSocket.

States: LOADING -> IDLE <-> BUSY_HALF_DUPLEX / DUPLEX_ACTIVE <-> DUPLEX_PAUSED; any -> ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Response, WebSocket
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from core import logctx, telemetry
from core.audio_frames import MEDIA_FRAMES, MEDIA_PARAM
from core.config import AppConfig
from core.processors import ModelThreads, create_backend
from core.processors.base import LoadProgress
from core.protocol import Dialect, parse_extensions
from core.session_store import SESSION_ID, new_session_id
from core.transport import ChannelClosed, EventChannel, WebSocketChannel
from core.worker_auth import INSTANCE_ENV, load_worker_secret
from worker.auth import WorkerSecretMiddleware
from worker.live.channel import LiveChannel
from worker.live.fork import STORED, read_stored
from worker.metrics import WorkerMetrics
from worker.read_ahead import ReadAhead
from worker.reattachable import CLOSE_NO_SESSION, MAX_GRACE_S, Reattachable
from worker.recorder import RecorderPool
from worker.rest import rest_router
from worker.session import RealtimeSession
from worker.state import WorkerState
from worker.tracing import RestSpans, SessionTrace

log = logging.getLogger(__name__)


def create_app(config: AppConfig, index: int = 0) -> FastAPI:
    ws_state = WorkerState(f"w{index}", config.workers.slots)
    metrics = WorkerMetrics(ws_state)
    tracing = telemetry.setup(config.telemetry, f"w{index}")  # off (nothing imported) without an OTLP endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        threads = ModelThreads()  # the backend's threads: this runtime's, closed after the backend
        backend = create_backend(config.backend.name, config.backend_options(), threads)
        ws_state.backend = backend

        def progress(p: LoadProgress) -> None:
            ws_state.progress = p

        async def load() -> None:
            try:
                await asyncio.to_thread(backend.load, progress)
                ws_state.state = "IDLE"
                log.info("worker %s ready", ws_state.worker_id)
            except Exception as exc:  # reported on /health as state ERROR
                log.exception("model load failed")
                ws_state.state = "ERROR"
                ws_state.error = f"model load failed: {exc}"

        loader = asyncio.create_task(load())
        ws_state.recorders = RecorderPool(config.data_dir) if config.recording.enabled else None
        try:
            yield
        finally:
            loader.cancel()
            if ws_state.recorders is not None:
                # Sessions still open are finished as "worker_shutdown", and their files land.
                ws_state.recorders.finish_all()
                await asyncio.to_thread(ws_state.recorders.shutdown)
            backend.close()
            threads.close()
            telemetry.shutdown()  # the last spans reach the collector

    app = FastAPI(title=f"OmniDuplex worker {index}", lifespan=lifespan)
    # Only the gateway (and the launcher) may call: they hold the deployment's worker secret.
    app.add_middleware(WorkerSecretMiddleware, secret=load_worker_secret(config))
    if tracing:
        app.add_middleware(RestSpans)  # a span per REST job, the child of the gateway's
    # Which start of which process answers on this port: the launcher checks it is the one it started.
    instance = {"instance": os.environ.get(INSTANCE_ENV) or None, "pid": os.getpid()}
    app.state.worker = ws_state
    app.state.metrics = metrics

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {**ws_state.health(), **instance}

    app.include_router(rest_router(ws_state))  # internal REST jobs for the gateway's OpenAI API

    @app.websocket("/ws/realtime")
    async def realtime(ws: WebSocket) -> None:
        await ws.accept()
        backend = ws_state.backend
        if ws_state.state == "ERROR" or backend is None or not backend.loaded:
            await ws.close(1013, "model is not loaded yet" if ws_state.state != "ERROR" else "worker failed")
            return
        q = ws.query_params
        if q.get("resume"):  # a gateway brings back the client of a held session (issue 72)
            await _reattach(ws, ws_state, q.get("resume") or "", q.get("resume_hash") or "")
            return
        # The gateway frees a slot as soon as its relay ends; the previous session may still be
        # tearing down here for a few milliseconds, so wait briefly before refusing.
        for _ in range(40):
            if len(ws_state.sessions) < ws_state.slots:
                break
            await asyncio.sleep(0.05)
        else:
            await ws.close(1013, "worker has no free slot")
            return
        live = q.get("dialect") == "live"  # OpenAI's Live dialect, translated by worker/live/
        beta = q.get("dialect") == "beta" or "realtime=v1" in ws.headers.get("openai-beta", "")
        session_id = q.get("session_id") or ""
        if not SESSION_ID.match(session_id):
            session_id = new_session_id()
        model = q.get("model") or "omniduplex-cascade"
        fork_of = q.get("fork") if live and SESSION_ID.match(q.get("fork") or "") else None
        stored = await asyncio.to_thread(read_stored, config.data_dir, fork_of) if fork_of else None
        if fork_of and stored is None:  # the gateway checked it; gone since (the cleanup ran)
            await ws.close(CLOSE_NO_SESSION, "the stored session to fork is gone")
            return
        recorder = None
        if ws_state.recorders is not None and q.get("record", "true").lower() not in ("false", "0", "off"):
            recorder = ws_state.recorders.open(session_id, {
                "app": (q.get("app") or "api")[:40], "model": model, "dialect": "live" if live else "beta" if beta else "ga",
                "worker_id": ws_state.worker_id, "share_token_sha256": q.get("share_hash") or None,
                # the key that opened it (a non-secret name; None on an open service): only that key forks it
                "owner": (q.get("owner") or "")[:64] or None, **({"forked_from": fork_of} if fork_of else {}),
            })
        # Extension events only for a client that asked (the gateway asks for what its client
        # asked, plus session.metrics for its own figures); unknown names were reported there.
        extensions, _ = parse_extensions(q.get("extensions"))
        frames = q.get(MEDIA_PARAM) == MEDIA_FRAMES  # a call's gateway sends its microphone as binary frames
        connection: EventChannel = WebSocketChannel(ws)
        link: Reattachable | None = None
        if q.get("resume_hash") and not live:  # resumable: held for its token when its connection drops
            grace = min(float(q.get("grace_s") or 0), MAX_GRACE_S)
            connection = link = Reattachable(connection, grace, q.get("resume_hash") or "",
                                             gateway_loss_holds=q.get("gateway_loss") == "hold")
        client = ReadAhead(connection, config.limits.read_ahead_bytes)
        channel: EventChannel = client
        if live:
            # The channel reads the resumes itself (a resumed reply's transcript); it passes on
            # only the extension events asked for.
            channel = LiveChannel(channel, session_id, model, config.limits.max_session_s, client_extensions=extensions,
                                  turn_types=backend.capabilities.turn_detection_types,
                                  max_message_bytes=config.limits.max_message_bytes, client_left=client.left,
                                  binary_audio=frames, fork=stored)
            extensions = extensions | {"response.resumed"}
        session = RealtimeSession(channel, backend, Dialect(beta), config.limits, model=model, session_id=session_id,
                                  recorder=recorder, extensions=extensions,
                                  transcription=q.get("intent") == "transcription", mcp_config=config.tools.mcp,
                                  echo_cancelled=q.get("input") == "echo_cancelled", binary_audio=frames,
                                  binary_reply=frames and not live)  # Live: its channel frames the reply

        if isinstance(channel, LiveChannel) and recorder is not None:  # a stored Live session can be forked
            recorder.keep_at_end = lambda live_channel=channel: (
                None if (doc := live_channel.stored(session.conv.items)) is None else (STORED, doc))
        if link is not None:
            link.on_detached, link.on_attached = session.client_lost, session.client_back
            ws_state.resumable[session_id] = (link, session)

        def on_state(state: str) -> None:
            ws_state.sessions[session.session_id] = state
            ws_state.refresh()

        session.on_state = on_state
        session.on_turn_metrics = metrics.turn
        trace: SessionTrace | None = None
        if telemetry.enabled():  # off: no hook, no span
            trace = SessionTrace(ws.headers, config.backend.name, model, session.session_id, ws_state.worker_id)
            session.on_turn_metrics = _chain(session.on_turn_metrics, trace.turn)
        session.on_limit = lambda code: metrics.limits.labels(code).inc()
        if isinstance(channel, LiveChannel):  # it refuses the Live client's oversized or nested messages itself
            channel.on_limit = session.on_limit
        logctx.bind(session=session.session_id, worker=ws_state.worker_id)
        on_state("DUPLEX_ACTIVE")  # a new session starts with server_vad on, as in the API
        try:
            await session.run()
        finally:
            if trace is not None:
                trace.end(session.end_reason, session.close_code)
            metrics.sessions.labels(session.end_reason).inc()
            log.info("session ended: %s (close %s)", session.end_reason, session.close_code)
            ws_state.sessions.pop(session.session_id, None)
            ws_state.resumable.pop(session.session_id, None)
            ws_state.refresh()

    return app


async def _reattach(ws: WebSocket, state: WorkerState, session_id: str, token_hash: str) -> None:
    """Attach this connection to a held (or still attached) resumable session whose token the
    gateway checked (its hash must match too), and keep it open while it is attached."""
    held = state.resumable.get(session_id)
    if held is None or not held[0].matches(token_hash):
        # Unknown, ended, or held past its grace: the gateway tells its client the token expired.
        await ws.close(CLOSE_NO_SESSION, "no such session to resume: it ended or its grace period passed")
        return
    link, session = held
    away = time.monotonic() - link.detached_at if link.detached_at is not None else 0.0
    connection = WebSocketChannel(ws)
    try:
        ended = await link.attach(connection, session.reattach_opening(away))
    except ChannelClosed:
        await connection.close(CLOSE_NO_SESSION, "the session ended")
        return
    logctx.bind(session=session_id, worker=state.worker_id)
    await ended.wait()


def _chain(first: Callable[[dict[str, Any]], None] | None,
           then: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """A turn-metrics hook that runs ``first`` (the Prometheus figures) and then ``then``."""
    def hook(m: dict[str, Any]) -> None:
        if first is not None:
            first(m)
        try:
            then(m)
        except Exception:  # noqa: BLE001 - tracing never breaks a session
            log.warning("tracing a turn failed", exc_info=True)
    return hook
