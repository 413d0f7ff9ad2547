"""Worker metrics for Prometheus (``GET /metrics`` on the worker's own port).

State gauges are read from the worker at scrape time; per-turn latencies and session ends are
counted by the session through two small callbacks. One registry per app.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from core.protocol import TURN_STAGES

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
STATES = ("LOADING", "IDLE", "BUSY_HALF_DUPLEX", "DUPLEX_ACTIVE", "DUPLEX_PAUSED", "ERROR")


class _StateCollector:
    def __init__(self, state) -> None:
        self.state = state

    def collect(self):
        ws = self.state
        s = GaugeMetricFamily("omniduplex_worker_state", "1 for the worker's current state", labels=["state"])
        for name in STATES:
            s.add_metric([name], 1.0 if ws.state == name else 0.0)
        yield s
        loaded = GaugeMetricFamily("omniduplex_worker_model_loaded", "1 once the model is loaded")
        backend = ws.backend
        loaded.add_metric([], 1.0 if backend is not None and backend.loaded and ws.state != "ERROR" else 0.0)
        yield loaded
        progress = GaugeMetricFamily("omniduplex_worker_load_progress", "Model load progress, 0 to 1")
        progress.add_metric([], ws.progress.fraction)
        yield progress
        active = GaugeMetricFamily("omniduplex_worker_sessions_active", "Open realtime sessions")
        active.add_metric([], len(ws.sessions))
        yield active
        slots = GaugeMetricFamily("omniduplex_worker_slots", "Sessions this worker can hold at once")
        slots.add_metric([], ws.slots)
        yield slots


class WorkerMetrics:
    def __init__(self, state) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        r.register(_StateCollector(state))
        self.v2v = Histogram("omniduplex_worker_v2v_seconds", "End of user speech to first reply audio",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.ttfp = Histogram("omniduplex_worker_ttfp_seconds", "Response start to first audio",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("omniduplex_worker_ttft_seconds", "Response start to first text",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.responses = Counter("omniduplex_worker_responses", "Responses by final status", ["status"], registry=r)
        self.sessions = Counter("omniduplex_worker_sessions", "Sessions ended, by end reason", ["end_reason"],
                                registry=r)
        self.stages = Histogram("omniduplex_worker_stage_seconds", "A turn's time by stage: end_of_turn (speech end "
                                "to the turn decided), asr, llm (reply start to first words), tts (first words "
                                "to first audio)", ["stage", "backend"], buckets=LATENCY_BUCKETS, registry=r)
        self.backend_name = lambda: getattr(state.backend, "name", "unknown")
        self.limits = Counter("omniduplex_worker_limit_events", "Inputs refused or sessions ended by a limit",
                              ["code"], registry=r)

    def turn(self, m: dict[str, Any]) -> None:
        """One ``session.metrics`` payload (milliseconds)."""
        for hist, key in ((self.v2v, "v2v_ms"), (self.ttfp, "ttfp_ms"), (self.ttft, "ttft_ms")):
            value = m.get(key)
            if isinstance(value, (int, float)) and value >= 0:
                hist.observe(value / 1000)
        self.responses.labels(str(m.get("status") or "unknown")).inc()
        backend = self.backend_name()
        stages = m.get("stages") or {}
        for stage in TURN_STAGES:
            value = stages.get(f"{stage}_ms")
            if isinstance(value, (int, float)) and value >= 0:
                self.stages.labels(stage, backend).observe(value / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)
