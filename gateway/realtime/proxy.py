"""One realtime session at the gateway: queue, assignment, relay to the worker, release.

Transport-neutral: the client is an ``EventChannel`` (``core/transport.py``) and what it asked
for at connect time a ``SessionRequest``, so a WebSocket (``websocket.py``) and, next, a WebRTC
call reach the same queueing, relaying, limits and recording. The slot is taken by
``SessionQueue.acquire`` and given back in ``finally``, on every path.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import collections
import contextlib
import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import websockets

from core import logctx, telemetry
from core.audio_frames import MEDIA_FRAMES, MEDIA_PARAM
from core.config import AppConfig
from core.ids import new_id
from core.protocol import EXTENSION_EVENTS, error_event, server_event, unknown_extensions_error
from core.resume import CLOSE_CLIENT_LOST, CLOSE_TAKEN_OVER
from core.session_store import new_session_id, new_share_token, token_hash
from core.transport import ChannelClosed, EventChannel
from gateway.metrics import METRICS_PREFIX, GatewayMetrics
from gateway.pool.interface import SessionQueue
from gateway.pool.model import (
    Lease,
    NoCapableWorkerError,
    QueueCancelledError,
    QueueFullError,
    QueueStatus,
    QueueTimeoutError,
)
from gateway.pool.redis_queue import ClusterUnavailable
from gateway.realtime.budget import CLOSE_POLICY, InboundBudget
from gateway.realtime.initial_session import start_with_session
from gateway.realtime.relay import RelayResult, relay
from gateway.realtime.request import SessionRequest
from gateway.realtime.resume import Resumable, ResumableSessions

log = logging.getLogger(__name__)

MAX_EARLY_MESSAGES = 256  # client events sent while queued, forwarded once assigned
_APPEND = '"input_audio_buffer.append"'
CLOSE_TRY_AGAIN = 1013
CLOSE_OPERATOR = 4004  # ended or removed from the queue by the operator
CLOSE_RESUME_EXPIRED = 4010  # a resume token whose session is gone
# A client's close that ends its session: normal, going away, no code, not reading. Any other (1006:
# the connection dropped) keeps a resumable session for its token.
DELIBERATE_CLOSES = frozenset({1000, 1001, 1005, 1008})


class RealtimeProxy:
    """One client session, whatever its transport: queue, assignment, relay, release.

    Slotted, and its outbox and stop event made only when needed: a thousand of these wait in the
    queue at once, and each ``__dict__``, deque and ``Event`` costs about a kilobyte."""

    __slots__ = ("client", "pool", "config", "ticket", "beta", "live", "model", "app_name", "record", "requirements",
                 "extensions", "unknown_extensions", "intent", "_outbox", "_sender", "_assigned_sent", "early",
                 "metrics", "client_ip", "created_at", "state", "session_id", "worker_id", "assigned_at",
                 "_stop", "_stop_reason", "initial_session", "_minted_session_id", "_span", "budget",
                 "echo_cancelled", "resumes", "owner", "resumable", "_attachment", "_lease_kept", "fork_of",
                 "resume_token")

    def __init__(self, client: EventChannel, request: SessionRequest, pool: SessionQueue, config: AppConfig,
                 resumes: ResumableSessions | None = None, owner: str | None = None,
                 resume: Resumable | None = None) -> None:
        self.client = client
        self.pool = pool
        self.config = config
        self.ticket = new_id("ticket")
        self.beta = request.beta
        self.live = request.live
        self.model = request.model
        self.app_name = request.app
        # Recording: on when the service records, unless this client said record=false.
        self.record = config.recording.enabled and request.record
        self.requirements = request.requirements
        # Extension events (queue.*, session.recording, session.metrics, ...) only on request:
        # standard clients validate every event against OpenAI's types.
        self.extensions, self.unknown_extensions = request.extensions, request.unknown_extensions
        self.intent = request.intent
        self.echo_cancelled = request.echo_cancelled
        self.fork_of = request.fork_of
        # An ephemeral key's session config (a session.update), and the session id its mint announced.
        self.initial_session = request.initial_session
        self._minted_session_id = request.session_id
        # Queue messages go out through one ordered outbox drained by a short-lived task, not a
        # task per waiting client: a thousand waiters then cost two tasks each, not three.
        self._outbox: collections.deque[dict[str, Any]] | None = None
        self._sender: asyncio.Task | None = None
        self._assigned_sent = False
        self.early: list[str] = []
        # What the client sent and the worker has not taken, in bytes: the channel's budget where it
        # keeps one (a call's inbox counts against the same), else this session's own.
        self.budget: InboundBudget = getattr(client, "budget", None) or InboundBudget(config.limits.queued_bytes)
        # What the admin page shows; set as the session moves on.
        self.metrics: GatewayMetrics | None = None
        self.client_ip = request.client_ip
        self.created_at = time.time()
        self.state = "queued"
        self.session_id: str | None = None
        self.worker_id: str | None = None
        self.assigned_at: float | None = None
        self._stop: asyncio.Event | None = None  # made when the relay starts, or when ended before
        self._stop_reason = ""
        self._span = None  # the session's trace span (core/telemetry.py), while tracing is on
        # Resume (issue 72): the gateway's tokens, the key that opened the session, and the session
        # this connection brings back (or, once issued, the one it may bring back later).
        self.resumes = resumes
        self.owner = owner
        self.resumable: Resumable | None = resume
        self._attachment = resume.connections if resume is not None else 1  # which of its connections this is
        self._lease_kept = False  # the slot stays taken after this connection: held, or taken over
        # A call's token, made when its offer is answered (the answer's header carries it); else
        # one is made when the session starts.
        self.resume_token: str | None = None

    def end_by_operator(self, reason: str = "ended by the operator") -> None:
        """Admin: end this session now (it gets ``session_ended_by_operator`` and close 4004)."""
        self._stop_reason = reason
        if self.state == "queued" and self.pool.cancel(self.ticket, reason):
            return
        self._stop_event().set()

    def _stop_event(self) -> asyncio.Event:
        if self._stop is None:
            self._stop = asyncio.Event()
        return self._stop

    def info(self) -> dict[str, Any]:
        return {"ticket": self.ticket, "session_id": self.session_id, "state": self.state, "app": self.app_name,
                "worker_id": self.worker_id, "client": self.client_ip, "created_at": self.created_at,
                "assigned_at": self.assigned_at, "record": self.record}

    async def _send(self, event: dict[str, Any]) -> bool:
        try:
            await self.client.send(json.dumps(event, separators=(",", ":")))
            return True
        except ChannelClosed:  # client already gone
            return False

    def _post(self, event: dict[str, Any]) -> None:
        if event["type"] in EXTENSION_EVENTS and event["type"] not in self.extensions:
            return
        if self._outbox is None:
            self._outbox = collections.deque()
        self._outbox.append(event)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._outbox:
            await self._send(self._outbox.popleft())
        self._outbox = None

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
        await self.client.close(code, reason)

    async def run(self) -> None:
        lease: Lease | None = None
        logctx.bind(session=self.ticket)
        if telemetry.enabled():
            self._span = telemetry.start_span("realtime.session", server=True, attributes={
                "gen_ai.system": telemetry.GEN_AI_SYSTEM, "gen_ai.operation.name": "realtime",
                "gen_ai.request.model": self.model, "omniduplex.ticket": self.ticket,
                "omniduplex.transport": self.client.transport,
                "omniduplex.app": self.app_name,
                "omniduplex.dialect": "live" if self.live else "beta" if self.beta else "ga"})
        if self.unknown_extensions:
            await self._send(unknown_extensions_error(list(self.unknown_extensions)))
        try:
            lease = self.resumable.lease if self.resumable is not None else await self._wait_for_worker()
            if lease is None:
                return
            if self.metrics is not None and self.resumable is None:  # a session brought back did not queue
                self.metrics.queue_wait.observe(lease.queued_s)
            await self._serve(lease)
        finally:
            self.state = "ended"
            if lease is not None and not self._lease_kept and self._latest():
                if self.resumable is not None and self.resumes is not None:
                    self.resumes.end(self.resumable)
                self.pool.release(lease)
            if self._span is not None:
                self._trace_end("cancelled")

    def _trace_end(self, reason: str, error: str | None = None) -> None:
        """End the session's span once, with why the session ended."""
        span, self._span = self._span, None
        telemetry.end_span(span, {"omniduplex.end_reason": reason, "omniduplex.session_id": self.session_id},
                           error=error)

    async def _wait_for_worker(self) -> Lease | None:
        """Queue until a worker is assigned; a client that leaves is dropped at once."""
        acquire = asyncio.create_task(self.pool.acquire(self.requirements, self.ticket, self._on_status,
                                                        self._on_assigned))
        receive = asyncio.create_task(self.client.receive())
        try:
            while True:
                done, _ = await asyncio.wait({acquire, receive}, return_when=asyncio.FIRST_COMPLETED)
                if receive in done:
                    try:
                        message = receive.result()
                    except ChannelClosed:
                        await self._leave_queue(acquire)
                        if self._span is not None:
                            self._trace_end("client_left_queue")
                        return None
                    if isinstance(message, str) and not self._hold_early(message):
                        await self._leave_queue(acquire)
                        self._hand_over_early()  # to no one: the session ends here
                        reason = (f"the client sent more than {MAX_EARLY_MESSAGES} events while queued"
                                  if len(self.early) >= MAX_EARLY_MESSAGES else self.budget.overflow_reason("while queued"))
                        if self._span is not None:
                            self._trace_end("queue_overflow", error="queue_overflow")
                        await self._send(error_event(reason, "queue_overflow"))
                        await self._close(CLOSE_POLICY, reason)
                        return None
                    receive = asyncio.create_task(self.client.receive())
                if acquire in done:
                    if self._span is not None and not acquire.cancelled() and acquire.exception() is not None:
                        self._trace_end("queue_refused", error=type(acquire.exception()).__name__)
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

    async def _leave_queue(self, acquire: asyncio.Task) -> None:
        acquire.cancel()
        lease = None
        with contextlib.suppress(BaseException):
            lease = await acquire
        if lease is not None:
            # Assigned in the same instant the client left: give the slot back.
            self.pool.release(lease, record=False)

    def _hold_early(self, message: str) -> bool:
        """Keep an event sent while queued, for the worker; False when it cannot be kept.

        Within ``MAX_EARLY_MESSAGES`` and the byte budget; past either, the oldest audio appends
        make room (a client streaming its microphone while it waits keeps its latest seconds, as a
        call does), and what still does not fit closes the session."""
        while len(self.early) >= MAX_EARLY_MESSAGES or not self.budget.take(message):
            oldest_audio = next((i for i, m in enumerate(self.early) if isinstance(m, str) and _APPEND in m[:100]),
                                None)
            if oldest_audio is None:
                return False
            self.budget.give(self.early.pop(oldest_audio))
        self.early.append(message)
        return True

    def _hand_over_early(self) -> list[str]:
        """The events kept while queued, out of the budget: the relay sends them first."""
        early, self.early = self.early, []
        for message in early:
            self.budget.give(message)
        return early

    async def _serve(self, lease: Lease) -> None:
        worker = lease.worker
        if not self._assigned_sent:  # assigned at once, without queueing
            self._on_assigned(lease)
        await self._flush()  # queue.* before anything from the worker
        back = self.resumable  # this connection brings back a session whose connection dropped
        session_id = back.session_id if back is not None else self._minted_session_id or new_session_id()
        self.session_id, self.worker_id, self.assigned_at = session_id, worker.id, time.time()
        self.state = "connecting"
        logctx.bind(session=session_id, worker=worker.id)
        headers = self.pool.worker_headers
        if self._span is not None:
            telemetry.set_attributes(self._span, {
                "omniduplex.queue_wait_ms": round(lease.queued_s * 1000, 1), "omniduplex.worker.id": worker.id,
                "omniduplex.worker.url": worker.url, "omniduplex.session_id": session_id})
            headers = {**headers, **telemetry.trace_headers(self._span)}  # the worker's span is its child
        params = {"dialect": "live" if self.live else "beta" if self.beta else "ga", "session_id": session_id, "model": self.model,
                  "app": self.app_name, "record": "true" if self.record else "false",
                  # session.metrics always: the gateway's own latency figures come from it
                  "extensions": ",".join(sorted(self.extensions | {"session.metrics"}))}
        if self.intent:
            params["intent"] = self.intent
        if self.client.binary_audio:  # a call: its audio crosses to the worker as binary frames
            params[MEDIA_PARAM] = MEDIA_FRAMES
        if self.echo_cancelled:  # the worker's own canceller starts off (the session can turn it on)
            params["input"] = "echo_cancelled"
        if self.owner is not None:  # recorded with the session: only this key forks it
            params["owner"] = self.owner
        if self.fork_of is not None:
            params["fork"] = self.fork_of
        if back is not None:
            params = {"resume": session_id, "resume_hash": back.token_hash}
        elif self._wants_resume():
            token, self.resumable = await self.resumes.issue(session_id, self.owner, lease, self.resume_token)
            params.update(resume_hash=self.resumable.token_hash, grace_s=f"{self.resumes.grace_s:g}")
            if self.pool.gateway_id is not None:  # other gateways can bring it back if this one dies
                params["gateway_loss"] = "hold"
            self._post(server_event("session.resume_token", session_id=session_id, resume_token=token,
                                    grace_s=self.resumes.grace_s))
        if self.record and back is None:
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
                url, open_timeout=wcfg.connect_timeout_s, additional_headers=headers,
                max_size=max(self.config.limits.transport_max_bytes, 16 * 2**20),
                ping_interval=wcfg.ping_interval_s, ping_timeout=wcfg.ping_interval_s, compression=None,
                # a hung worker never completes a close handshake: give up on it after 2 s
                close_timeout=2,
            )
        except (TimeoutError, OSError, websockets.WebSocketException) as exc:
            await self._worker_unavailable(worker.id, f"connect failed: {exc!r}")
            return
        # A worker that accepts the socket but never speaks (hung) must not hold the slot forever.
        # A Live session's worker speaks first only after the client's session.start (held with
        # the early events): its relay's pings watch it instead.
        first: str | bytes | None = None
        try:
            if not self.live:
                first = await asyncio.wait_for(conn.recv(), wcfg.connect_timeout_s)
        except TimeoutError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 1)
            await self._worker_unavailable(worker.id, f"no session.created within {wcfg.connect_timeout_s:g} s")
            return
        except websockets.ConnectionClosed:
            pass  # the relay reads the close and reports it
        if back is not None and first is None:
            await self._not_resumed(conn)
            return
        if isinstance(first, str):
            opening: list[str | bytes] = [first]
            if self.initial_session is not None and back is None:
                opening = await start_with_session(conn, first, self.initial_session, wcfg.connect_timeout_s)
            for message in opening:
                if self.metrics is not None and isinstance(message, str):
                    self.metrics.observe_worker_text(message)
                with contextlib.suppress(ChannelClosed):
                    await self.client.send(message)
        started = time.monotonic()
        self.state = "active"
        result: RelayResult | None = None
        hold = False
        try:
            result = await self._relay_until_stopped(conn)
            hold = self._dropped(result)
        finally:
            # A reset would read as a lost gateway to a worker told to hold for one (a resumable
            # session of a cluster): that one is closed, not reset, when its client leaves.
            resets_hold = self.resumable is not None and self.pool.gateway_id is not None
            await close_worker(conn, abandon=result is not None and result.ended_by == "client" and not hold
                               and not resets_hold, hold=hold)
        if hold or (result.ended_by == "worker" and result.code == CLOSE_TAKEN_OVER):
            # Its slot stays taken: held for the token, or carried on by the newer connection.
            self._lease_kept = True
            if hold and self._latest():
                self.resumes.hold(self.resumable)
        log.info("session %s on %s ended by %s (%s) after %.1fs", self.ticket, worker.id, result.ended_by,
                 result.code, time.monotonic() - started)
        if self._span is not None:
            telemetry.set_attributes(self._span, {"omniduplex.close_code": result.code})
            self._trace_end(result.ended_by, error="worker_failed" if result.ended_by == "worker_failed" else None)
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

    def _wants_resume(self) -> bool:
        """The client asked for a resume token and this gateway keeps sessions for one."""
        return self.resumes is not None and self.resumes.wanted(self.extensions, self.live)

    def _latest(self) -> bool:
        """No newer connection brought this session back (that one owns its slot now)."""
        return self.resumable is None or self.resumable.connections == self._attachment

    def _dropped(self, result: RelayResult) -> bool:
        """The client's connection dropped (no deliberate close) and its session can be resumed."""
        return (self.resumable is not None and result.ended_by == "client"
                and result.code not in DELIBERATE_CLOSES and self.resumes is not None)

    async def _not_resumed(self, conn) -> None:
        """The worker no longer holds the session (its grace passed, or it ended meanwhile)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(), 1)
        if self._span is not None:
            self._trace_end("resume_expired", error="resume_token_expired")
        await self._send(error_event("the session of this resume token has ended, or nobody came back within "
                                     "its grace period", "resume_token_expired"))
        await self._close(CLOSE_RESUME_EXPIRED, "the session can no longer be resumed")

    async def _worker_unavailable(self, worker_id: str, why: str) -> None:
        log.warning("worker %s unavailable for %s: %s", worker_id, self.ticket, why)
        if self._span is not None:
            self._trace_end("worker_unavailable", error="worker_unavailable")
        self.pool.report_failure(worker_id, why)
        await self._send(error_event("the assigned worker could not be reached; please reconnect",
                                     "worker_unavailable", kind="server_error"))
        await self._close(1011, "worker unavailable")

    async def _relay_until_stopped(self, conn) -> RelayResult:
        """The relay, unless the operator ends the session first."""
        observe = self.metrics.observe_worker_text if self.metrics is not None else None
        drop = None if "session.metrics" in self.extensions else METRICS_PREFIX
        relaying = asyncio.create_task(relay(self.client, conn, self._hand_over_early(), on_worker_text=observe,
                                             drop_prefix=drop))
        stopping = asyncio.create_task(self._stop_event().wait())
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


async def close_worker(conn, timeout: float = 2.0, abandon: bool = False, hold: bool = False) -> None:
    """Close the worker's socket, reading and dropping what it still sends meanwhile.

    Once the relay has stopped nobody reads ``conn``: past a few unread events the socket stops
    reading, the worker's close frame waits behind them, and the close handshake ran out its
    ``timeout`` while the slot stayed held (issue 68's fuzz: 2 s after a client that flooded the
    session left). ``timeout`` still bounds a worker that never answers.

    ``abandon``: the client left, so nothing it sent is for the worker any more: the socket is
    reset (no lingering), dropping what still waits in its buffers instead of delivering it
    before the close, and the worker learns at once that its client is gone (a resumable
    session is not held for a reset: its worker holds only for ``CLOSE_CLIENT_LOST``).

    ``hold``: the client dropped and may come back with its resume token: closed with
    ``CLOSE_CLIENT_LOST``, and the worker holds the session."""

    async def discard() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for _ in conn:
                pass

    if abandon:
        sock = conn.transport.get_extra_info("socket")
        if sock is not None:
            # The worker may have closed it already (its fd is gone): there is nothing to reset then.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.transport.abort()
        return
    draining = asyncio.create_task(discard())
    try:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(CLOSE_CLIENT_LOST, "client lost") if hold else conn.close(), timeout)
    finally:
        draining.cancel()
        with contextlib.suppress(BaseException):
            await draining
