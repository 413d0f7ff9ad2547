"""Runs of the duplex trials on one stack, for either transport: each run's figures, their median
with the spread, and the goals judged on it."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from bench.duplex.report import goals, median_modes, summarise
from bench.duplex.trials import modes_for
from bench.launch import cascade_realtime_url


def measure(transport: str, part: str, modes: list[str], kinds: list[str], clips: list, runs: int,
            run_trials) -> dict[str, Any]:
    """``runs`` runs of ``run_trials`` (``trials.run_all`` or ``webrtc.run_all``) on one stack: each
    run's figures, their median with the spread and the goals judged on it."""
    if not any(modes_for(c.item.kind, modes) for c in clips):
        raise SystemExit(f"no trial: modes {modes} run none of the kinds {kinds}")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    out: list[dict[str, Any]] = []
    with cascade_realtime_url() as url:
        url += "&extensions=all"
        for k in range(max(1, runs)):
            log(f"run {k + 1} ({transport})")
            t0, load = time.monotonic(), os.getloadavg()
            rows, refused = asyncio.run(run_trials(url, part, modes, clips, log))
            out.append({"modes": summarise(rows, modes, refused), "wall_s": round(time.monotonic() - t0, 1),
                        "loadavg_start": [round(x, 2) for x in load],
                        "loadavg_end": [round(x, 2) for x in os.getloadavg()], "rows": rows})
    median = median_modes([run["modes"] for run in out])
    counts = {kind: sum(c.item.kind == kind for c in clips) for kind in kinds}
    return {"transport": transport, "set": part, "kinds": kinds, "items": counts, "modes": modes, "runs": out,
            "median": median, "goals": goals(median)}
