"""The benchmark tools compute what they claim (timing goals live in bench/, not here)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys

import pytest

from bench.capacity import dispatch_in_process
from bench.serving import continuity
from bench.stats import goal_mark
from tests.support.stack import ROOT


def test_continuity_counts_late_chunks_as_underruns():
    # 100 ms chunks: on time, on time, then one 250 ms late (an audible gap), then on time again.
    arrivals = [(0.0, 0.1), (0.05, 0.1), (0.45, 0.1), (0.5, 0.1)]
    underruns, worst = continuity(arrivals)
    assert underruns == 1 and abs(worst - 250) < 1e-6
    underruns, worst = continuity([(0.0, 0.1), (0.15, 0.1)])
    assert underruns == 0 and abs(worst - 50) < 1e-6  # 50 ms late: no audible gap
    assert continuity([]) == (0, 0.0)


def test_goal_mark_says_met_or_missed():
    assert goal_mark(0.9, 1) == "met" and goal_mark(1.0, 1) == "met" and goal_mark(1.1, 1) == "**missed**"
    assert goal_mark(7.6, 5, "p99 <= 5 ms") == "p99 <= 5 ms: **missed**"
    assert goal_mark(1000, 1000, "all", at_least=True) == "all: met"
    assert goal_mark(999, 1000, at_least=True) == "**missed**"
    assert goal_mark(None, 1) == goal_mark(float("nan"), 1) == "**missed** (not measured)"


def _summary(p50: float, p99: float | None = None, **more) -> dict:
    return {"p50": p50, "p90": p50, "p99": p99 if p99 is not None else p50, "mean": p50, "n": 100, **more}


def _queue(clients: int = 1000, **more) -> dict:
    """A capacity result for one configuration (bench.capacity.hold_queue's keys)."""
    return {"clients": clients, "placed_within_60s": clients, "all_queued_s": 0.8, "gateway_rss_idle_mb": 60.0,
            "gateway_rss_holding_mb": 90.0, "gateway_cpu_holding_pct_of_core": 1.0,
            "position_change_heard_ms": _summary(30, 40, max=50), "told": clients,
            "not_told": {"count": 0, "per_gateway": {}, "sample": []},
            "release_to_assigned_through_gateway_ms": _summary(2, 4), **more}


def _row(table: str, start: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| {start}"))


def test_reports_mark_every_goal_met_or_missed():
    """Synthetic results (no run): each report marks a goal row "met" or "**missed**" from the figures."""
    from bench import capacity, pipeline, recording, relay

    # capacity, one gateway: RSS over 100 MB and one waiter never told its move are missed
    single = {"dispatch_in_process_ms": _summary(0.05, 0.12),
              "queue": _queue(gateway_rss_holding_mb=130.2, told=999)}
    out = capacity.report(single)
    assert _row(out, "gateway RSS").endswith("<= 100 MB: **missed** |")
    assert _row(out, "position change").endswith("<= 100 ms: **missed** |")
    assert _row(out, "all queued").endswith("<= 1 s: met |")
    assert _row(out, "gateway CPU").endswith("<= 5 %: met |")
    assert _row(out, "dispatch").endswith("p99 <= 2 ms: met |")
    assert _row(out, "clients queued").endswith("all: met |")

    # capacity, two gateways through Redis: each column judged; dispatch p99 7.6 ms misses 5 ms
    many = _queue(all_queued_s=1.05, gateways={"g0": {"clients": 500, "rss_idle_mb": 60, "rss_holding_mb": 90,
                                                      "cpu_holding_pct_of_core": 2.6}},
                  release_to_assigned_cross_gateway_ms=_summary(4.5, 57),
                  release_to_assigned_same_gateway_ms=_summary(0, 0))
    cluster = {"gateways": 2, "dispatch_in_process_ms": _summary(0.02, 0.07),
               "dispatch_shared_ms": _summary(4.1, 7.6, max=19, cross_gateway=1000, slots_busy_after=0,
                                              queue_left=0, release_call_ms=_summary(0.1, 0.2)),
               "dispatch_shared_no_places_ms": _summary(0.34, 0.96),
               "queue_single": _queue(), "queue": many,
               "slots_busy_after": {"busy": {"w0": 0}, "queue_length": 0}, "gateway_log_problems": []}
    out = capacity.report(cluster)
    assert _row(out, "all queued").endswith("<= 1 s: 1 gateway met, 2 gateways **missed** |")
    assert _row(out, "dispatch").endswith("p99 <= 5 ms (Redis): **missed** |")
    assert _row(out, "  the same, no waiter").endswith("p99 <= 5 ms: met |")
    assert _row(out, "gateway RSS").endswith("<= 100 MB: 1 gateway met, 2 gateways met |")

    # relay: 0.25 ms added per event misses the 0.2 ms goal; its share of V2V is within 2 %
    probe = {"rtt_direct_p50_ms": 0.7, "rtt_gateway_p50_ms": 1.2, "rtt_direct_p99_ms": 1.2, "rtt_gateway_p99_ms": 1.6,
             "added_per_event_p99_ms": 0.3, "share_of_v2v_pct": 0.066}
    out = relay.report({"v2v_client_ms": 754.0, "probes": 400, "append": probe | {"added_per_event_p50_ms": 0.25},
                        "delta-sized": probe | {"added_per_event_p50_ms": 0.12}})
    assert _row(out, "append").endswith("p50 <= 0.2 ms: **missed**; share <= 2 %: met |")
    assert _row(out, "delta-sized").endswith("p50 <= 0.2 ms: met; share <= 2 %: met |")

    # pipeline: TTFP median 291 ms misses 250 ms; a cold start of 12 s misses 10 s
    result = {key: _summary(v) for key, v in (("ttft_ms", 118), ("ttfp_ms", 291), ("rtf", 0.27), ("e2e_ms", 2680),
                                             ("v2v_ms", 144), ("v2v_from_voice_ms", 754), ("cancel_stop_ms", 1),
                                             ("rss_mb", 1541))}
    out = pipeline.table(result | {"cold_start_s": 12.0})
    assert _row(out, "TTFP").endswith("<= 250 ms: **missed** |")
    assert _row(out, "RTF").endswith("<= 0.3: met |") and _row(out, "RSS").endswith("<= 2 GiB: met |")
    assert _row(out, "cold start").endswith("<= 10 s: **missed** |")

    # recording: client V2V 7.5 % above without misses "within 5 %"
    stats = {k: _summary(v) for k, v in (("off_v2v", 54), ("on_v2v", 57), ("off_client", 660), ("on_client", 709.5))}
    out = recording.report({"stats": stats, "v2v_ratio_on_off": 57 / 54, "v2v_client_ratio_on_off": 709.5 / 660})
    assert _row(out, "client V2V |").endswith("within 5 %: **missed** |")


def test_dispatch_benchmark_hands_every_slot_over_in_order():
    r = asyncio.run(dispatch_in_process(200))
    assert r["n"] == 200 and 0 < r["p50"] <= r["p99"]


def test_throughput_benchmark_relays_every_event(tmp_path):
    """Gateway + synthetic worker (the benchmark's test double): every event arrives, and the
    worker's normal close ends the relay cleanly (this once crashed the relay)."""
    out = subprocess.run([sys.executable, "-m", "bench", "throughput", "--json"], cwd=ROOT, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # A standard client gets no queue.assigned (extension events are opt-in): the same events.
    assert r["through_gateway"]["events"] == r["direct"]["events"] == 20001
    assert r["through_gateway"]["events_per_s"] > 0


def test_every_benchmark_command_answers_help():
    """``python -m bench <what> --help`` works for each command (pipeline's once crashed)."""
    from bench.__main__ import COMMANDS, DELEGATED

    for what in [*COMMANDS, *DELEGATED]:
        out = subprocess.run([sys.executable, "-m", "bench", what, "--help"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0 and "usage" in out.stdout.lower(), (what, out.stderr[-500:])


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian redis-server not installed")
def test_capacity_benchmark_with_two_gateways_reports_cross_gateway_dispatch():
    """``bench capacity --gateways 2`` in miniature: every client queued and told its moves on both
    gateways, every hand-over crossed gateways, nothing left leased or queued in Redis."""
    from bench.capacity import report, run

    r = run(clients=20, hold_s=0.3, gateways=2, iterations=20, e2e_reps=10)
    shared, quiet = r["dispatch_shared_ms"], r["dispatch_shared_no_places_ms"]
    for d in (shared, quiet):
        assert d["n"] == 20 and 0 < d["p50"] <= d["p99"] and d["slots_busy_after"] == 0 and d["queue_left"] == 0
    assert shared["cross_gateway"] == 20
    assert r["dispatch_in_process_ms"]["n"] == 20
    one, many = r["queue_single"], r["queue"]
    assert one["told"] == many["told"] == 20
    assert set(many["gateways"]) == {"g0", "g1"} and all(g["clients"] == 10 for g in many["gateways"].values())
    cross = many["release_to_assigned_cross_gateway_ms"]
    assert cross["n"] == 10 and many["release_to_assigned_same_gateway_ms"]["n"] == 0 and cross["p50"] > 0
    assert many["e2e_not_assigned"] == 0 and many["e2e_out_of_order"] == 0
    assert r["slots_busy_after"] == {"busy": {"w0": 0}, "queue_length": 0}
    assert r["gateway_log_problems"] == []
    assert "2 gateways (Redis)" in report(r)


def test_calls_benchmark_transport_and_load_parts():
    """``bench calls --parts transport load sessions`` in miniature (synthetic worker): one-way probes
    in and out on both transports at once; two WebRTC calls, then two WebSocket sessions, play reply
    audio, the gateway's CPU is split into its event loop and the rest, /health is timed, and the
    report marks its goals. (The V2V and listening parts need the cascade worker: minutes, not run
    here.)"""
    from bench.calls import report

    out = subprocess.run([sys.executable, "-m", "bench", "calls", "--parts", "transport", "load", "sessions",
                          "--seconds", "2", "--calls", "2", "--hold", "1", "--json"], cwd=ROOT, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    tp = r["transport"]["runs"][0]
    for transport, legs in (("websocket", ("in_ms", "out_ms")), ("webrtc", ("in_ms", "out_wire_ms", "out_ms"))):
        for leg in legs:
            assert tp[transport][leg]["n"] >= 3 and tp[transport][leg]["p50"] > 0, (transport, leg, tp)
    # the call's decoded frame comes after its packet, which comes after the worker sent the delta
    assert tp["webrtc"]["out_ms"]["p50"] > tp["webrtc"]["out_wire_ms"]["p50"] > 0
    idle, two = r["load"]["levels"]
    assert idle["calls"] == 0 and two["calls"] == 2
    assert two["playing"] == 2 and two["calls_open_at_gateway"] == 2
    assert two["reply_s"] > 1.0  # both calls' reply audio arrived in the window, told from idle frames
    assert two["gateway_cpu_pct"] > 0 and two["gateway_loop_cpu_pct"] > 0
    assert abs(two["gateway_loop_cpu_pct"] + two["gateway_off_loop_cpu_pct"] - two["gateway_cpu_pct"]) < 0.1
    assert two["health_ms"]["n"] >= 5 and two["per_call_pct"] == round(two["gateway_cpu_pct"] / 2, 2)
    assert {"underruns", "dry_frames", "worst_late_ms"} <= set(two)
    text = report(r)
    assert "| 2 |" in text and "% of a core per call:" in text
    assert "20 calls, 0 underruns: **missed** (not measured)" in text  # fewer than 20 calls: not claimed
    assert "a turn <= +60 ms:" in text
    idle, two = r["sessions"]["levels"]
    assert idle["calls"] == 0 and two["calls"] == 2 and r["sessions"]["transport"] == "websocket"
    assert two["playing"] == 2 and two["calls_open_at_gateway"] == 2
    assert two["reply_s"] > 1.0  # both sessions' deltas arrived in the window
    assert two["gateway_cpu_pct"] > 0 and two["per_call_pct"] == round(two["gateway_cpu_pct"] / 2, 2)
    assert "| sessions | gateway CPU | per session (above idle)" in text


def test_calls_report_marks_goals_from_the_median_of_runs():
    """Synthetic results (no run): V2V judged on the median of the runs' p50 differences, CPU on the
    worst level per call, underruns at 20 calls (a call that never played counts as one)."""
    from bench.calls import goals, report
    from bench.calls.v2v import v2v_summary

    def rows(ws: list[float], rtc: list[float]) -> list[dict]:
        base = {"underruns": 0, "worst_late_ms": 0.0, "speech_stopped_ms": 600.0, "response_created_ms": 601.0}
        return ([{"transport": "websocket", "v2v_ms": v, **base} for v in ws]
                + [{"transport": "webrtc", "v2v_ms": v, "v2v_wire_ms": v - 80, "dry_frames": 0, **base} for v in rtc])

    runs = [v2v_summary(rows([700, 720, 800], [750, 790, 900])),  # +70
            v2v_summary(rows([700, 710, 800], [740, 760, 900])),  # +50
            v2v_summary(rows([690, 700, 800], [730, 740, 900]))]  # +40
    assert [s["diff_p50_ms"] for s in runs] == [70.0, 50.0, 40.0]
    from bench.stats import median_spread

    v2v = {"prompts": 3, "runs": [{"loadavg_start": [1.0, 1.0, 1.0], "summary": s} for s in runs],
           "median": {"diff_p50_ms": median_spread([70.0, 50.0, 40.0]), "diff_wire_p50_ms": median_spread([-10.0]),
                      "underruns": {"websocket": 0, "webrtc": 0}}}
    level = {"loadavg_end": [1.0], "gateway_loop_cpu_pct": 2.0, "gateway_off_loop_cpu_pct": 1.0,
             "health_ms": {"p50": 1, "p99": 2, "max": 3}, "calls_with_underruns": 0, "worst_late_ms": 0.0,
             "dry_frames": 0, "reply_s": 1.0, "bench_cpu_pct": 5, "worker_cpu_pct": 1}
    load = {"hold_s": 10, "levels": [
        {**level, "calls": 0, "gateway_cpu_pct": 1.0, "underruns": 0},
        {**level, "calls": 1, "playing": 1, "gateway_cpu_pct": 4.0, "per_call_pct": 4.0, "per_call_above_idle_pct": 3.0,
         "underruns": 0},
        {**level, "calls": 20, "playing": 19, "gateway_cpu_pct": 110.0, "per_call_pct": 5.5,
         "per_call_above_idle_pct": 5.45, "underruns": 0}]}
    r = {"cpus": 2, "loadavg_start": [1.0], "loadavg_end": [1.0], "v2v": v2v, "load": load}
    r["goals"] = g = goals(r)
    assert g["v2v"]["value"] == 50.0 and g["v2v"]["mark"].endswith(": met")
    assert g["cpu"]["value"] == 5.5 and g["cpu"]["mark"].endswith("**missed**")
    assert g["underruns"]["value"] == 1 and g["underruns"]["mark"].endswith("**missed**")  # one call never played
    text = report(r)
    assert "50 (40.0-70.0) ms" in text and "| 20 (19 playing) |" in text


def test_duplex_benchmark_renders_its_table(tmp_path):
    """``bench duplex`` in miniature (a real gateway + cascade worker, one semantic_vad session per
    trial): one complete question and one interruption over a playing reply give a row of the
    Full-Duplex-Bench-style table, the goals and the anchors, and per-trial rows in the JSON."""
    out = subprocess.run([sys.executable, "-m", "bench", "duplex", "--set", "dev", "--limit", "1", "--runs", "1",
                          "--modes", "semantic_vad", "--kinds", "complete", "interruption", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    table = out.stdout
    assert "| mode | pause takeover | turn latency p50 / p90 ms |" in table
    row = _row(table, "semantic_vad")
    assert row.count("|") == 11 and "| n/a |" in row  # no paused or backchannel trial: n/a, not 0 %
    assert "Goals (median of the runs):" in table and "Moshi 0.985 / 0.265 s / 0.257 s" in table
    r = json.loads((tmp_path / "duplex.json").read_text())
    rows = r["runs"][0]["rows"]
    assert [(x["kind"], x["mode"]) for x in rows] == [("complete", "semantic_vad"), ("interruption", "semantic_vad")]
    assert all("error" not in x for x in rows), rows
    complete, interruption = rows
    assert complete["answered"] and complete["latency_ms"] > 0
    assert interruption["status"] == "ok" and interruption["reply_audio_s"] > 1.0  # the clip came over the reply
    assert interruption["detected"] and interruption["seen_ms"] > 0 and interruption["truncates"]
