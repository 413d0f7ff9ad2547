"""What the parts of ``python -m bench calls`` share: the audio clock, the goals, the
``/health`` prober (run in its own process) and the load average (the package's docstring says
what each part measures)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import psutil


RATE = 24000
FRAME_S = 0.02  # the clients' unit of audio: the mic's frames, and the reply's frames counted in these
FRAME = int(RATE * FRAME_S)
WS_CHUNK_S = 0.04
LEAD_S = 0.5  # silence before the speech
TAIL_S = 12.0  # silence after it, at most (the client stops at the reply's end)
VOICED = 0.02 * 32768  # a sample louder than this is voiced (bench serve's rule)
V2V_GOAL_MS = 60.0  # WebRTC V2V p50 at most this much above the WebSocket's
CPU_GOAL_PCT = 5.0  # gateway CPU per live call, % of one core
UNDERRUN_GOAL = 0
MANY_CALLS = 20
PROBE_EVERY_S = 0.1
QUERY = "?record=false&app=bench&extensions=session.metrics"  # V2V sessions: the worker's own V2V after each reply

# The /health prober: its own process, so the bench's busy event loop does not time itself.
PROBE = r"""
import json, sys, time, httpx
url, seconds, every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
out = []
with httpx.Client(timeout=10) as c:
    c.get(url)
    print("ready", flush=True)
    sys.stdin.readline()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        c.get(url)
        out.append((time.perf_counter() - t) * 1000)
        time.sleep(every)
print(json.dumps(out), flush=True)
"""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def process_cpu(proc: psutil.Process) -> tuple[float, float]:
    """(all threads, the main thread: the event loop) CPU seconds of a process."""
    total = proc.cpu_times()
    main = next((t for t in proc.threads() if t.id == proc.pid), None)
    return total.user + total.system, (main.user_time + main.system_time) if main else float("nan")


class EventLog:
    """A client's events with their arrival times, and a wait for one (both bench clients)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict]] = []
        self._new = asyncio.Event()

    def note(self, event: dict) -> None:
        self.events.append((time.monotonic(), event))
        self._new.set()

    def first(self, kind: str, since: float = 0.0) -> float | None:
        return next((t for t, e in self.events if e.get("type") == kind and t >= since), None)

    async def until(self, kind: str, timeout: float = 60.0, since: float = 0.0) -> float:
        deadline = time.monotonic() + timeout
        while (t := self.first(kind, since)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [e.get("type") for _, e in self.events[-12:]]
                raise TimeoutError(f"no {kind} within {timeout:.0f} s; saw {seen}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), left)
        return t
