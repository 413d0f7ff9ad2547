"""Distribution summaries and goal marks shared by the benchmarks."""

from __future__ import annotations

import math

import numpy as np


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "mean": float("nan"), "n": 0}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p90": round(float(np.percentile(arr, 90)), 3),
        "mean": round(float(arr.mean()), 3),
        "n": int(arr.size),
    }


def goal_mark(value: float | None, limit: float, shown: str = "", *, at_least: bool = False) -> str:
    """A measured figure against its goal: ``"met"`` when ``value <= limit`` (``>= limit`` with
    ``at_least``), else ``"**missed**"``; a figure that was not measured (None or NaN) is missed
    too, ``"**missed** (not measured)"``. With ``shown``, the goal as it reads (``"p99 <= 5 ms"``),
    the whole report cell: ``"p99 <= 5 ms: met"``."""
    if value is None or math.isnan(value):
        mark = "**missed** (not measured)"
    else:
        mark = "met" if (value >= limit if at_least else value <= limit) else "**missed**"
    return f"{shown}: {mark}" if shown else mark
