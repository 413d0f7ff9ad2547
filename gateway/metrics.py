"""Gateway metrics: Prometheus ``/metrics`` and the short history behind the admin page's charts.

Pool state (queue length, sessions by state, worker health) is read from the pool at scrape
time by a collector, so it can never drift from the truth. Queue waits are observed when a
lease is handed out; V2V and TTFP come from the worker's ``session.metrics`` events, which
the relay shows us cheaply: only text frames that *start* with that event type are parsed, so
audio frames are never decoded. The same parse feeds each turn's stage times (issue 36: end of
turn, ASR, LLM, TTS) into ``omniduplex_stage_seconds{stage}`` and into :class:`StageWindow`, the
last hour's values behind the admin page's "Where turns' time goes" table (p50/p90 per stage).

Each app has its own registry (several gateways can live in one test process).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from core.protocol import TURN_STAGES
from gateway.pool.interface import SessionQueue
from gateway.pool.model import Health

log = logging.getLogger(__name__)

METRICS_PREFIX = '{"type":"session.metrics"'
LATENCY_BUCKETS = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SERIES_STEP_S = 2.0
SERIES_POINTS = 300  # 10 minutes at 2 s
PERCENTILE_WINDOW_S = 60.0
STAGES = TURN_STAGES  # the waterfall's order (core/protocol.py)
STAGE_WINDOW_S = 3600.0
STAGE_WINDOW_CAP = 10_000  # values kept per stage: bounded memory however busy the hour

__all__ = ["CONTENT_TYPE_LATEST", "STAGES", "GatewayMetrics", "StageWindow"]


class StageWindow:
    """Each stage's recent values (ms) for ``window_s``, at most ``cap`` per stage (the oldest go
    first), and their p50/p90. ``clock`` is monotonic seconds (a test passes its own)."""

    def __init__(self, window_s: float = STAGE_WINDOW_S, cap: int = STAGE_WINDOW_CAP,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self.clock = window_s, clock
        self._values: dict[str, deque[tuple[float, float]]] = {s: deque(maxlen=cap) for s in STAGES}

    def add(self, stages: Any) -> dict[str, float]:
        """One turn's ``stages`` (``{"asr_ms": 312.5, "llm_ms": None, ...}``): keeps the known
        stages' non-negative numbers, ignores anything else; returns what it kept (ms by stage)."""
        if not isinstance(stages, dict):
            return {}
        now = self.clock()
        kept = {}
        for stage in STAGES:
            value = stages.get(f"{stage}_ms")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf"):
                self._values[stage].append((now, float(value)))
                kept[stage] = float(value)
        self._expire(now)
        return kept

    def _expire(self, now: float) -> None:
        oldest = now - self.window_s
        for values in self._values.values():
            while values and values[0][0] < oldest:
                values.popleft()

    def summary(self) -> list[dict[str, Any]]:
        """``[{"stage", "p50_ms", "p90_ms", "count"}]`` in waterfall order (None with no values)."""
        self._expire(self.clock())
        out = []
        for stage in STAGES:
            ms = sorted(v for _, v in self._values[stage])
            out.append({"stage": stage, "p50_ms": _percentile(ms, 0.5), "p90_ms": _percentile(ms, 0.9),
                        "count": len(ms)})
        return out


class _PoolCollector:
    def __init__(self, pool: SessionQueue) -> None:
        self.pool = pool

    def collect(self):
        pool = self.pool
        workers = pool.workers()
        q = GaugeMetricFamily("omniduplex_queue_length", "Clients waiting in the queue")
        q.add_metric([], pool.queue_length)
        yield q
        s = GaugeMetricFamily("omniduplex_sessions", "Sessions (realtime and REST leases) by state",
                              labels=["state"])
        s.add_metric(["queued"], pool.queue_length)
        s.add_metric(["active"], sum(w.busy for w in workers))
        yield s
        h = GaugeMetricFamily("omniduplex_worker_health", "1 for each worker's current health state",
                              labels=["worker", "health"])
        busy = GaugeMetricFamily("omniduplex_worker_busy_slots", "Slots in use per worker", labels=["worker"])
        slots = GaugeMetricFamily("omniduplex_worker_slots", "Slots per worker", labels=["worker"])
        fails = GaugeMetricFamily("omniduplex_worker_failures", "Failed probes and sessions per worker",
                                  labels=["worker"])
        for w in workers:
            for state in Health:
                h.add_metric([w.id, state.value], 1.0 if w.health == state else 0.0)
            busy.add_metric([w.id], w.busy)
            slots.add_metric([w.id], w.slots)
            fails.add_metric([w.id], w.failures_total)
        yield h
        yield busy
        yield slots
        yield fails
        counts = GaugeMetricFamily("omniduplex_workers", "Workers by health state", labels=["health"])
        for state in Health:
            counts.add_metric([state.value], sum(1 for w in workers if w.health == state))
        yield counts
        cluster = pool.cluster_health()
        if cluster is not None:  # several gateways: queue and workers above are cluster-wide
            info = GaugeMetricFamily("omniduplex_gateway_info", "This gateway in the shared cluster",
                                     labels=["gateway", "prober"])
            info.add_metric([cluster["gateway_id"], str(cluster["prober"]).lower()], 1.0)
            yield info
            up = GaugeMetricFamily("omniduplex_cluster_up", "1 while the shared queue's Redis is reachable")
            up.add_metric([], 1.0 if cluster["ok"] else 0.0)
            yield up
            mine = GaugeMetricFamily("omniduplex_gateway_sessions", "Realtime sessions on this gateway by state",
                                     labels=["state"])
            states: dict[str, int] = {}
            for session in pool.local_sessions():
                states[session["state"]] = states.get(session["state"], 0) + 1
            for state in ("queued", "connecting", "active", "held"):
                mine.add_metric([state], states.get(state, 0))
            yield mine


class GatewayMetrics:
    def __init__(self, pool: SessionQueue) -> None:
        self.pool = pool
        self.registry = CollectorRegistry()
        self.registry.register(_PoolCollector(pool))
        r = self.registry
        self.queue_wait = Histogram("omniduplex_queue_wait_seconds", "Time from queueing to assignment",
                                    buckets=WAIT_BUCKETS, registry=r)
        self.v2v = Histogram("omniduplex_v2v_seconds", "Voice to voice: end of user speech to first reply audio",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.ttfp = Histogram("omniduplex_ttfp_seconds", "Response start to first audio packet",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.sessions_ended = Counter("omniduplex_realtime_sessions", "Realtime sessions ended, by how",
                                      ["ended_by"], registry=r)
        self.stage = Histogram("omniduplex_stage_seconds", "A turn's time by stage, from the worker's "
                               "session.metrics: end_of_turn (voice end to the turn decided), asr, llm (reply "
                               "start to first words), tts (first words to first audio)", ["stage"],
                               buckets=LATENCY_BUCKETS, registry=r)
        self.stages = StageWindow()
        self.rejected = Counter("omniduplex_rejected_sessions", "Realtime sessions refused, by error code",
                                ["reason"], registry=r)
        self._v2v_recent: deque[tuple[float, float]] = deque(maxlen=5000)  # (monotonic, ms)
        self.series: deque[dict[str, Any]] = deque(maxlen=SERIES_POINTS)
        self._sampler: asyncio.Task | None = None

    # ------------------------------------------------------------------ observations

    def observe_worker_text(self, text: str) -> None:
        """Called for each worker->client text frame; parses only ``session.metrics``."""
        if not text.startswith(METRICS_PREFIX):
            return
        try:
            m = json.loads(text).get("metrics") or {}
        except (ValueError, AttributeError):
            return
        if not isinstance(m, dict):
            return
        v2v, ttfp = m.get("v2v_ms"), m.get("ttfp_ms")
        if isinstance(v2v, (int, float)) and v2v >= 0:
            self.v2v.observe(v2v / 1000)
            self._v2v_recent.append((time.monotonic(), float(v2v)))
        if isinstance(ttfp, (int, float)) and ttfp >= 0:
            self.ttfp.observe(ttfp / 1000)
        for stage, ms in self.stages.add(m.get("stages")).items():
            self.stage.labels(stage).observe(ms / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------------ admin charts

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        recent = sorted(v for t, v in self._v2v_recent if now - t <= PERCENTILE_WINDOW_S)
        point = {
            "t": round(time.time(), 1),
            "queue": self.pool.queue_length,
            "active": sum(w.busy for w in self.pool.workers()),
            "v2v_p50": _percentile(recent, 0.5),
            "v2v_p90": _percentile(recent, 0.9),
            "v2v_n": len(recent),
        }
        self.series.append(point)
        return point

    async def start(self) -> None:
        if self._sampler is None:
            self._sampler = asyncio.create_task(self._sample_loop(), name="metrics-sampler")

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
            self._sampler = None

    async def _sample_loop(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a chart point is never worth a dead loop
                log.exception("metrics sample failed")
            await asyncio.sleep(SERIES_STEP_S)


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return round(sorted_values[i], 1)
