"""The load part: K calls at once against ``bench/synthetic_worker.py --paced``; the gateway's CPU
per call, its loop's responsiveness (``GET /health`` from another process) and underruns. The
sessions part: the same with K WebSocket sessions (``socket_client.py``) in place of the calls."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from bench.calls.client import BenchCall, make_tracks, opus_packets
from bench.calls.common import FRAME_S, PROBE, PROBE_EVERY_S, loadavg, process_cpu
from bench.calls.socket_client import BenchSocket, appends
from bench.launch import Launched
from bench.stats import summary


def sessions_open(url: str) -> float:
    """Sessions queued or holding a worker's slot (calls among them)."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith("omniduplex_sessions{"))


async def load_level(launched: Launched, k: int, hold: float, make_client, procs: dict[str, psutil.Process],
                     log, noun: str = "calls") -> dict[str, Any]:
    calls = [make_client() for _ in range(k)]
    out: dict[str, Any] = {"calls": k, "loadavg_start": loadavg()}
    try:
        gate = asyncio.Semaphore(5)

        async def up(call: BenchCall | BenchSocket) -> None:
            async with gate:
                await call.connect()
            await call.until("session.created", timeout=60)

        await asyncio.gather(*(up(c) for c in calls))
        deadline = time.monotonic() + 10
        while not all(c.first_reply_frame() for c in calls) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        out["playing"] = sum(bool(c.first_reply_frame()) for c in calls)
        out["connect_ms"] = summary([c.connect_ms for c in calls]) if calls else None
        await asyncio.sleep(2.0 if k else 0.5)  # settle: the connects' CPU out of the window
        out["calls_open_at_gateway"] = await asyncio.to_thread(sessions_open, launched.url)
        probe = subprocess.Popen([sys.executable, "-c", PROBE, f"{launched.url}/health", str(hold), str(PROBE_EVERY_S)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            await asyncio.to_thread(probe.stdout.readline)  # "ready"
            before = {name: process_cpu(p) for name, p in procs.items()}
            t0 = time.monotonic()
            probe.stdin.write("go\n")
            probe.stdin.flush()
            await asyncio.sleep(hold)
            after = {name: process_cpu(p) for name, p in procs.items()}
            t1 = time.monotonic()
            health = json.loads((await asyncio.to_thread(probe.communicate, None, hold + 30))[0].strip().splitlines()[-1])
        finally:
            if probe.poll() is None:
                probe.kill()
        span = t1 - t0
        for name in procs:
            total = (after[name][0] - before[name][0]) / span * 100
            out[f"{name}_cpu_pct"] = round(total, 2)
            if name == "gateway":
                loop = (after[name][1] - before[name][1]) / span * 100
                out["gateway_loop_cpu_pct"] = round(loop, 2)
                out["gateway_off_loop_cpu_pct"] = round(total - loop, 2)
        h = np.asarray(health)
        out["health_ms"] = {"p50": round(float(np.percentile(h, 50)), 2), "p99": round(float(np.percentile(h, 99)), 2),
                            "max": round(float(h.max()), 2), "n": int(h.size)}
        plays = [c.playout(t0, t1) for c in calls]  # steady state: the window, not the connects before it
        out["underruns"] = sum(p["underruns"] for p in plays)
        out["calls_with_underruns"] = sum(p["underruns"] > 0 for p in plays)
        out["worst_late_ms"] = max((p["worst_late_ms"] for p in plays), default=0.0)
        out["dry_frames"] = sum(p["dry_frames"] for p in plays)
        out["wire_underruns"] = sum(p["wire_underruns"] for p in plays)
        out["late_at_s"] = sorted(round(t - t0, 2) for p in plays for t in p["late_at"])
        out["wire_worst_late_ms"] = max((p["wire_worst_late_ms"] for p in plays), default=0.0)
        out["reply_s"] = round(sum(p["reply_frames"] for p in plays) * FRAME_S, 1)
        out["window_s"] = round(span, 2)
    finally:
        await asyncio.gather(*(c.hangup() for c in calls), return_exceptions=True)
        await asyncio.gather(*(c.close() for c in calls), return_exceptions=True)
    out["loadavg_end"] = loadavg()
    deadline = time.monotonic() + 15
    while await asyncio.to_thread(sessions_open, launched.url) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    log(f"  {k:3d} {noun}: gateway {out['gateway_cpu_pct']:.1f} % of a core (loop {out['gateway_loop_cpu_pct']:.1f}), "
        f"/health p50 {out['health_ms']['p50']} p99 {out['health_ms']['p99']} ms, underruns {out['underruns']}, "
        f"dry frames {out['dry_frames']}, clients {out['bench_cpu_pct']:.0f} %, load {out['loadavg_end']}")
    return out


def part_load(levels: list[int], hold: float, log, transport: str = "webrtc") -> dict[str, Any]:
    """``transport`` "webrtc": K calls (the load part); "websocket": K sessions (the sessions part)."""
    from bench.synthetic_worker import voiced_deltas
    from launcher.processes import free_port, spawn_module, stop

    top = max(levels)
    mic_pcm = b"".join(base64.b64decode(d) for d in voiced_deltas(2))
    if transport == "webrtc":
        _, PacketMic = make_tracks()
        packets = {ms: opus_packets(mic_pcm, ms=ms) for ms in (20, 40)}
    else:
        events = appends(mic_pcm)
    port = free_port()
    result: dict[str, Any] = {"hold_s": hold, "transport": transport, "levels": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        worker = spawn_module("bench.synthetic_worker", "--port", str(port), "--paced", "--slots", str(top),
                              log=Path(tmp) / "synthetic.log")
        try:
            with Launched(Path(tmp), workers=0, worker_urls=[f"http://127.0.0.1:{port}"], slots=top,
                          recording={"enabled": False}, queue={"capacity": 1000},
                          auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
                launched.wait_gateway("gateway")
                procs = {"gateway": psutil.Process(launched.pid("gateway")), "worker": psutil.Process(worker.pid),
                         "bench": psutil.Process()}

                def make_client() -> BenchCall | BenchSocket:
                    if transport == "webrtc":
                        return BenchCall(launched.url, PacketMic(packets))
                    return BenchSocket(launched.ws_url + "?record=false&app=bench", events)

                async def go() -> None:
                    log(f"load warm-up (one {'call: aiortc is imported with the first' if transport == 'webrtc' else 'session'})")
                    await load_level(launched, 1, 1.0, make_client, procs, lambda _line: None)
                    for k in [0, *levels]:
                        result["levels"].append(await load_level(launched, k, hold, make_client, procs, log,
                                                                 "calls" if transport == "webrtc" else "sessions"))

                asyncio.run(go())
        finally:
            stop(worker)
    idle = result["levels"][0]
    for lv in result["levels"][1:]:
        k = lv["calls"]
        lv["per_call_pct"] = round(lv["gateway_cpu_pct"] / k, 2)
        lv["per_call_above_idle_pct"] = round((lv["gateway_cpu_pct"] - idle["gateway_cpu_pct"]) / k, 2)
        lv["loop_per_call_pct"] = round((lv["gateway_loop_cpu_pct"] - idle["gateway_loop_cpu_pct"]) / k, 2)
    return result
