"""Distribution summaries shared by the benchmarks."""

from __future__ import annotations

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
