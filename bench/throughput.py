"""Relay throughput: events/s and MB/s the gateway passes from a worker at line rate.

    python -m bench throughput [--seconds 5]

A synthetic worker (``bench/synthetic_worker.py``, a test double used for this measurement
only) emits audio deltas as fast as the socket takes them; one client reads them straight from
it and then through the gateway. The ratio says how much of the raw rate the relay keeps.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench.launch import Launched
from launcher.processes import free_port, spawn_module, stop

EVENTS = 20000


async def drain(url: str) -> dict[str, float]:
    async with websockets.connect(url, max_size=None, compression=None, ping_interval=None) as ws:
        await ws.recv()  # session.created
        n, size = 0, 0
        t0 = time.perf_counter()
        async for msg in ws:
            n += 1
            size += len(msg)
        dt = time.perf_counter() - t0
    return {"events": n, "seconds": round(dt, 3), "events_per_s": round(n / dt), "mb_per_s": round(size / dt / 1e6, 1)}


def run_cli(args) -> dict[str, Any]:
    port = free_port()
    worker = spawn_module("bench.synthetic_worker", "--port", str(port), "--events", str(EVENTS))
    url = f"http://127.0.0.1:{port}"
    try:
        with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
            with Launched(Path(tmp), workers=0, recording={"enabled": False},
                          worker_urls=[url]) as gw:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        if httpx.get(f"{gw.url}/health", timeout=2).json()["workers_healthy"] >= 1:
                            break
                    except (httpx.HTTPError, ValueError, KeyError):
                        pass
                    time.sleep(0.2)
                direct = asyncio.run(drain(f"ws://127.0.0.1:{port}/ws/realtime"))
                relayed = asyncio.run(drain(gw.ws_url + "?record=false"))
    finally:
        stop(worker)
    return {"direct": direct, "through_gateway": relayed, "event_bytes": 6550,
            "kept_share": round(relayed["events_per_s"] / direct["events_per_s"], 3)}


def report(r: dict[str, Any]) -> str:
    d, g = r["direct"], r["through_gateway"]
    return "\n".join([
        "| path | events/s | MB/s | events |",
        "|---|---|---|---|",
        f"| straight from the synthetic worker | {d['events_per_s']} | {d['mb_per_s']} | {d['events']} |",
        f"| through the gateway | {g['events_per_s']} | {g['mb_per_s']} | {g['events']} |",
        f"| relay keeps | {r['kept_share'] * 100:.0f} % | | |",
    ])
