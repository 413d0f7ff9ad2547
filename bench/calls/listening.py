"""The listening part: what one WebSocket session costs the gateway and a real worker (the default
cascade, as ``start_all.sh`` runs it) while the user is quiet, in % of one core, as
``python -m bench calls --parts listening``.

The session sends 40 ms ``input_audio_buffer.append`` events of a quiet room (noise 55 dB down) in
real time, as our pages do, and no turn begins: what is timed is the session's standing cost (the
JSON and base64 of every append, the worker's resampling, room filter and VAD), not a model's.
Each run opens a fresh session, lets it settle, and reads both processes' CPU time over ``--hold``
seconds; a window with no session first gives the idle figures (health probes), taken off.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.calls.common import RATE, loadavg, process_cpu
from bench.calls.socket_client import BenchSocket, appends
from bench.launch import Launched
from bench.stats import median_spread

SETTLE_S = 2.0


def quiet_room(seconds: float = 4.0) -> bytes:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(int(seconds * RATE)) * 32768 * 10 ** (-55 / 20)).astype("<i2").tobytes()


def _cpu(procs: dict[str, psutil.Process]) -> dict[str, float]:
    return {name: process_cpu(p)[0] for name, p in procs.items()}


async def _window(procs: dict[str, psutil.Process], hold: float) -> dict[str, float]:
    before, t0 = _cpu(procs), time.monotonic()
    await asyncio.sleep(hold)
    after, span = _cpu(procs), time.monotonic() - t0
    return {name: (after[name] - before[name]) / span * 100 for name in procs}


def part_listening(hold: float, runs: int, log) -> dict[str, Any]:
    mic = appends(quiet_room())
    result: dict[str, Any] = {"hold_s": hold, "runs": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            procs = {"gateway": psutil.Process(launched.pid("gateway")), "worker": psutil.Process(launched.pid("worker0"))}

            async def go() -> None:
                await asyncio.sleep(SETTLE_S)
                idle = await _window(procs, hold)
                result["idle"] = {k: round(v, 2) for k, v in idle.items()}
                for k in range(runs):
                    session = BenchSocket(launched.ws_url + "?record=false&app=bench", mic)
                    try:
                        await session.connect()
                        await session.until("session.created", timeout=120)
                        await asyncio.sleep(SETTLE_S)
                        cpu = await _window(procs, hold)
                        turns = sum(e["type"] == "input_audio_buffer.speech_started" for _, e in session.events)
                    finally:
                        await session.close()
                    row = {name: round(cpu[name] - idle[name], 2) for name in procs}
                    row["both"] = round(row["gateway"] + row["worker"], 2)
                    row["turns"] = turns
                    row["loadavg"] = loadavg()
                    result["runs"].append(row)
                    log(f"  listening run {k + 1}/{runs}: gateway {row['gateway']:.2f} + worker {row['worker']:.2f} "
                        f"= {row['both']:.2f} % of a core above idle (speech_started {turns}), load {row['loadavg']}")
                    await asyncio.sleep(1.0)

            asyncio.run(go())
    for name in ("gateway", "worker", "both"):
        result[name] = median_spread([r[name] for r in result["runs"]])
    return result
