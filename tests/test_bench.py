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
from tests.stack import ROOT


def test_continuity_counts_late_chunks_as_underruns():
    # 100 ms chunks: on time, on time, then one 250 ms late (an audible gap), then on time again.
    arrivals = [(0.0, 0.1), (0.05, 0.1), (0.45, 0.1), (0.5, 0.1)]
    underruns, worst = continuity(arrivals)
    assert underruns == 1 and abs(worst - 250) < 1e-6
    underruns, worst = continuity([(0.0, 0.1), (0.15, 0.1)])
    assert underruns == 0 and abs(worst - 50) < 1e-6  # 50 ms late: no audible gap
    assert continuity([]) == (0, 0.0)


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
