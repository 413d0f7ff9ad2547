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


def median_spread(values: list) -> dict:
    """A figure over repeated runs: the median, its spread (min-max) and ``text`` ("0.84 (0.79-0.89)");
    None where a run had no value. Quality claims are made on the median (docs/benchmarks.md)."""
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "text": "-"}
    med = float(np.median(got))
    med = int(med) if med.is_integer() else round(med, 3)
    lo, hi = min(got), max(got)
    return {"median": med, "min": lo, "max": hi, "text": f"{med} ({lo}-{hi})" if lo != hi else f"{med}"}


def median_by_mode(runs: list[dict], keys: tuple[str, ...], counts: tuple[str, ...] = ()) -> dict:
    """Per mode of repeated runs (``{mode: figures}`` each), every figure in ``keys`` as its
    ``median_spread`` over the runs that have the mode, and the ``counts`` (set sizes) of the first;
    a mode the server refused stays as the first run reported it."""
    out: dict = {}
    for mode, first in runs[0].items():
        if "refused" in first:
            out[mode] = first
            continue
        present = [run[mode] for run in runs if mode in run and "refused" not in run[mode]]
        out[mode] = {key: median_spread([figures[key] for figures in present]) for key in keys}
        out[mode].update({key: first[key] for key in counts})
    return out
