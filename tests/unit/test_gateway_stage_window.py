"""The gateway's last hour of per-stage turn times (issue 36, gateway/metrics.py): p50/p90 per
stage from the workers' ``session.metrics``, a one-hour window (an injected clock), a cap per
stage, only ``session.metrics`` frames decoded, and ``omniduplex_stage_seconds{stage}``."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import METRICS_PREFIX, STAGE_WINDOW_S, STAGES, GatewayMetrics, StageWindow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def by_stage(window: StageWindow) -> dict[str, dict]:
    return {row["stage"]: row for row in window.summary()}


def stages(eot=None, asr=None, llm=None, tts=None) -> dict:
    return {"end_of_turn_ms": eot, "asr_ms": asr, "llm_ms": llm, "tts_ms": tts}


def test_percentiles_per_stage_in_waterfall_order():
    w = StageWindow(clock=Clock())
    for i in range(1, 11):  # 10..100 ms of ASR, 100..1000 ms of LLM
        w.add(stages(asr=10 * i, llm=100 * i, tts=50))
    w.add(stages(llm=2000, tts=None))  # a typed turn: no end of turn, no ASR, no audio
    rows = w.summary()
    assert [r["stage"] for r in rows] == list(STAGES) == ["end_of_turn", "asr", "llm", "tts"]
    s = by_stage(w)
    assert s["end_of_turn"] == {"stage": "end_of_turn", "p50_ms": None, "p90_ms": None, "count": 0}
    # the admin charts' percentile: the sorted values' index round(q * (n - 1)), round(4.5) == 4
    assert s["asr"] == {"stage": "asr", "p50_ms": 50.0, "p90_ms": 90.0, "count": 10}
    assert s["llm"]["count"] == 11 and s["llm"]["p50_ms"] == 600.0 and s["llm"]["p90_ms"] == 1000.0
    assert s["tts"] == {"stage": "tts", "p50_ms": 50.0, "p90_ms": 50.0, "count": 10}


def test_bad_values_are_ignored():
    w = StageWindow(clock=Clock())
    assert w.add(None) == {} and w.add([1, 2]) == {} and w.add("asr_ms") == {}
    kept = w.add({"asr_ms": -1, "llm_ms": "300", "tts_ms": True, "end_of_turn_ms": float("nan"),
                  "network_ms": 40, "asr": 10})
    assert kept == {}
    assert w.add(stages(eot=0, asr=12.5)) == {"end_of_turn": 0.0, "asr": 12.5}
    assert {r["stage"]: r["count"] for r in w.summary()} == {"end_of_turn": 1, "asr": 1, "llm": 0, "tts": 0}


def test_values_older_than_an_hour_expire():
    clock = Clock()
    w = StageWindow(clock=clock)
    assert w.window_s == STAGE_WINDOW_S == 3600.0
    w.add(stages(llm=900))
    clock.now += 1800
    w.add(stages(llm=100))
    clock.now += 1799.9  # the first is 3599.9 s old: still in
    assert by_stage(w)["llm"]["count"] == 2 and by_stage(w)["llm"]["p90_ms"] == 900.0
    clock.now += 0.2  # 3600.1 s: gone, even with nothing added (summary expires too)
    assert by_stage(w)["llm"] == {"stage": "llm", "p50_ms": 100.0, "p90_ms": 100.0, "count": 1}
    clock.now += 1800.1
    assert by_stage(w)["llm"]["count"] == 0 and by_stage(w)["llm"]["p50_ms"] is None


def test_each_stage_keeps_at_most_cap_values():
    w = StageWindow(cap=100, clock=Clock())
    for i in range(250):
        w.add(stages(asr=i, tts=5))
    s = by_stage(w)
    assert s["asr"]["count"] == 100 and s["tts"]["count"] == 100
    assert s["asr"]["p50_ms"] == 200.0  # the oldest went first: 150..249 remain
    assert all(len(v) <= 100 for v in w._values.values())


class FakePool:
    queue_length = 0

    def workers(self):
        return []

    def cluster_health(self):
        return None

    def local_sessions(self):
        return []


def frame(**metrics) -> str:
    text = json.dumps({"type": "session.metrics", "event_id": "e1", "metrics": metrics}, separators=(",", ":"))
    assert text.startswith(METRICS_PREFIX)
    return text


def histogram(m: GatewayMetrics) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(m.render().decode()):
        if family.name == "omniduplex_stage_seconds":
            for s in family.samples:
                if s.name.endswith(("_count", "_sum")):
                    out[(s.name.rsplit("_", 1)[1], s.labels["stage"])] = s.value
    return out


def test_the_gateway_parse_feeds_the_window_and_the_histogram():
    m = GatewayMetrics(FakePool())
    m.observe_worker_text(frame(response_id="r1", v2v_ms=900, ttfp_ms=400,
                                stages=stages(eot=300, asr=200, llm=250, tts=150)))
    m.observe_worker_text(frame(response_id="r2", ttfp_ms=380, stages=stages(llm=230, tts=150)))  # typed
    m.observe_worker_text(frame(response_id="r3", v2v_ms=800))  # an older worker: no stages
    # Other frames are never decoded, whatever they carry; a broken metrics frame is skipped.
    m.observe_worker_text(json.dumps({"type": "response.done", "metrics": {"stages": stages(asr=1)}}))
    m.observe_worker_text('{"type":"response.output_audio.delta","delta":"' + "A" * 1000 + '"}')
    m.observe_worker_text(METRICS_PREFIX + ',"metrics":{"stages":')
    m.observe_worker_text(METRICS_PREFIX + ',"metrics":[1,2]}')
    s = by_stage(m.stages)
    assert {k: v["count"] for k, v in s.items()} == {"end_of_turn": 1, "asr": 1, "llm": 2, "tts": 2}
    assert s["asr"]["p50_ms"] == 200.0 and s["llm"]["p90_ms"] == 250.0
    h = histogram(m)
    assert h[("count", "end_of_turn")] == 1 and h[("count", "asr")] == 1
    assert h[("count", "llm")] == 2 and h[("count", "tts")] == 2
    assert abs(h[("sum", "llm")] - 0.48) < 1e-9 and abs(h[("sum", "end_of_turn")] - 0.3) < 1e-9
