"""``bench duplex --room``'s figures: per condition and run (``summarise``), the median of the runs
with the spread (``median_conditions``), issue 70's goals judged on it (``goals``) and the tables
(``report``). ``room_trials.py`` says what each trial measures."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bench.duplex.report import _ms, _pct
from bench.stats import goal_mark, median_by_mode, summary

GOAL_SHARE = 0.95  # echo -10/-6 dB: of each story played
GOAL_CUTIN_MS = 300.0  # cut-ins over echo: onset -> last audio played, p50
KEYS = ("self_interruptions", "per_minute", "zero_stories", "came_back", "new_responses", "played_min_s",
        "played_p50_s", "share_min", "share_p50", "underrun_s", "ended_in_window", "cutin_taken_share", "cutin_cut_share",
        "cutin_undecided", "answer_stops", "answers_stopped", "last_played_p50_ms", "last_played_p90_ms",
        "before_onset", "silent_at_onset",
        "bc_lost_rate", "bc_false_rate", "bc_gone_before", "clipped_trials", "errors", "not_trials")
COUNTS = ("stories", "cutins", "backchannels")


def _none(v: float) -> float | None:
    return None if isinstance(v, float) and np.isnan(v) else v


def _share(k: int, n: int) -> float | None:
    return round(k / n, 3) if n else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per condition (in the order the rows came), the figures of one run."""
    out: dict[str, Any] = {}
    for cond in dict.fromkeys(r["condition"] for r in rows):
        mine = [r for r in rows if r["condition"] == cond]
        ok = [r for r in mine if "error" not in r and r.get("status") == "ok"]
        stories = [r for r in ok if r["kind"] == "story"]
        cutins = [r for r in ok if r["kind"] == "cutin"]
        bcs = [r for r in ok if r["kind"] == "backchannel"]
        stops = sum(r["self_interruptions"] for r in stories)
        minutes = sum(r["window_s"] - r["ended_s"] for r in stories) / 60 if stories else 0
        played = summary([r["played_s"] for r in stories])
        shares = [r["share"] for r in stories if r["share"] is not None]
        last = summary([r["last_played_ms"] for r in cutins if r.get("last_played_ms") is not None])
        taken = sum(r["taken"] for r in cutins)
        cut = sum(r["taken"] and r["playing_at_onset"] for r in cutins)  # taken, and something was playing
        lost = sum(r["story_lost"] for r in bcs)
        answers = [r["answer_stops"] for r in cutins if r.get("answer_stops") is not None]
        out[cond] = {
            "stories": len(stories), "cutins": len(cutins), "backchannels": len(bcs),
            "self_interruptions": stops if stories else None,
            "per_minute": round(stops / minutes, 2) if minutes else None,
            "zero_stories": sum(r["self_interruptions"] == 0 for r in stories) if stories else None,
            "came_back": sum(r["came_back"] for r in stories) if stories else None,
            "new_responses": sum(s["why"] == "new_response" for r in stories for s in r["stops"]) if stories else None,
            "played_min_s": min(r["played_s"] for r in stories) if stories else None,
            "played_p50_s": _none(played["p50"]),
            "share_min": min(shares) if shares else None,
            "share_p50": round(float(np.median(shares)), 4) if shares else None,
            "underrun_s": round(sum(r["underrun_s"] for r in stories), 2) if stories else None,
            "ended_in_window": sum(r["ended_in_window"] for r in stories) if stories else None,
            "cutin_taken_share": _share(taken, len(cutins)), "cutin_cut_share": _share(cut, len(cutins)),
            "cutin_undecided": sum(r["undecided"] for r in cutins) if cutins else None,
            "answer_stops": sum(answers) if answers else None,  # the answers to cut-ins interrupting themselves
            "answers_stopped": sum(n > 0 for n in answers) if answers else None,
            "last_played_p50_ms": _none(last["p50"]), "last_played_p90_ms": _none(last["p90"]),
            "before_onset": sum(r["self_interruptions_before"] for r in cutins + bcs) if cutins or bcs else None,
            "silent_at_onset": sum(not r["playing_at_onset"] for r in cutins + bcs) if cutins or bcs else None,
            "bc_lost_rate": _share(lost, len(bcs)),
            "bc_false_rate": _share(sum(r["false_interruption"] for r in bcs), len(bcs)),
            "bc_gone_before": sum(not r["playing_at_onset"] for r in bcs) if bcs else None,
            "clipped_trials": sum(r.get("clipped_samples", 0) > 0 for r in ok),
            "errors": sum("error" in r for r in mine),
            "not_trials": sum("error" not in r and r.get("status") != "ok" for r in mine),
        }
    return out


def median_conditions(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per condition, each figure's median over the runs with its spread."""
    return median_by_mode(runs, KEYS, COUNTS)


def goals(median: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 70's goals, judged on the median of the runs: each {"goal", "value", "mark", "shown"}."""
    def value(cond: str, key: str) -> float | None:
        return median.get(cond, {}).get(key, {}).get("median")

    out = []
    for cond, s in median.items():
        echo = "echo -10 dB" in cond or "echo -6 dB" in cond
        noisy = "10 dB SNR" in cond
        if s["stories"] and (echo or noisy):
            v = value(cond, "self_interruptions")
            out.append({"goal": f"{cond}: no self-interruption" if echo else f"{cond}: no stop", "value": v,
                        "mark": goal_mark(v, 0), "shown": None if v is None else f"{v:g}"})
        if s["stories"] and echo:
            v = value(cond, "share_min")
            out.append({"goal": f"{cond}: each story played >= {GOAL_SHARE:.0%}", "value": v,
                        "mark": goal_mark(v, GOAL_SHARE, at_least=True),
                        "shown": None if v is None else f"least {v:.0%}"})
        if s["cutins"] and (echo or noisy):
            v = value(cond, "cutin_cut_share")
            out.append({"goal": f"{cond}: cut-ins taken 100% (each over the story playing)", "value": v,
                        "mark": goal_mark(v, 1.0, at_least=True), "shown": None if v is None else f"{v:.0%}"})
        if s["cutins"] and echo:
            v = value(cond, "last_played_p50_ms")
            out.append({"goal": f"{cond}: onset -> last audio played p50 <= {GOAL_CUTIN_MS:.0f} ms", "value": v,
                        "mark": goal_mark(v, GOAL_CUTIN_MS), "shown": None if v is None else f"{v:.0f} ms"})
            v = value(cond, "answer_stops")
            out.append({"goal": f"{cond}: the answers never interrupt themselves", "value": v,
                        "mark": goal_mark(v, 0), "shown": None if v is None else f"{v:g} stops"})
    with_echo, without = median.get("backchannel, echo -10 dB"), median.get("backchannel, no echo")
    if with_echo and without and with_echo["backchannels"] and without["backchannels"]:
        a, b = value("backchannel, echo -10 dB", "bc_lost_rate"), value("backchannel, no echo", "bc_lost_rate")
        diff = None if a is None or b is None else round(a - b, 3)
        out.append({"goal": "backchannels over echo -10 dB lose the story no more often than without echo",
                    "value": diff, "mark": goal_mark(diff, 0.0),
                    "shown": None if diff is None else f"{a:.0%} vs {b:.0%}"})
    return out


def _n(s: dict[str, Any], fmt: str = ".0f") -> str:
    return _ms(s, fmt)


def report(r: dict[str, Any]) -> str:
    runs = r["runs"]
    lines = [f"Full duplex in a room (WebSocket), {r['set']} set: echo_cancellation={r['echo_cancellation']}, "
             f"noise_reduction={r['noise_reduction']} (sent: {r['session_fields'] or 'nothing, the defaults'}); "
             f"the server's default turn detection; {sum(r['conditions'].values())} trials a run; {len(runs)} run(s) ("
             + ", ".join(f"{run['wall_s']:.0f} s, load {run['loadavg_start'][0]:.1f}" for run in runs)
             + f" on {os.cpu_count()} CPUs). User voice at the mic {r['voice_dbfs']} dBFS (the dev clips' "
               f"active speech); noise at its SNR below it; a {r['window_s']:.0f} s window from the story's first audio.",
             "", "Median of the runs (min-max).", ""]
    stories = {c: s for c, s in r["median"].items() if s["stories"]}
    if stories:
        lines += ["Stories (no user voice): self-interruptions (the story stopped while the user said nothing) "
                  "and what the listener heard:", "",
                  "| condition | stories | self-interruptions (per minute of story) | stories with none "
                  "| came back within 1 s | story played s, least / median | share played, least / median "
                  "| underruns s |", "|---|---|---|---|---|---|---|---|"]
        for c, s in stories.items():
            lines.append(f"| {c} | {s['stories']} | {_n(s['self_interruptions'])} ({_n(s['per_minute'], '.1f')}) | "
                         f"{_n(s['zero_stories'])} | {_n(s['came_back'])} | {_n(s['played_min_s'], '.1f')} / "
                         f"{_n(s['played_p50_s'], '.1f')} | {_pct(s['share_min'])} / {_pct(s['share_p50'])} | "
                         f"{_n(s['underrun_s'], '.1f')} |")
    cutins = {c: s for c, s in r["median"].items() if s["cutins"]}
    if cutins:
        lines += ["", "Cut-ins 4-7 s into the story: taken on a verdict (a turn committed or the answer's audio "
                  "began); from the clip's onset to the end of the last audio the client played of what was "
                  "talking at the onset:", "",
                  "| condition | cut-ins | taken (over the story playing) | undecided "
                  "| onset -> last audio played p50 / p90 ms "
                  "| self-interruptions before the onset | nothing playing at the onset "
                  "| answers' self-interruptions (answers stopped) |",
                  "|---|---|---|---|---|---|---|---|"]
        for c, s in cutins.items():
            lines.append(f"| {c} | {s['cutins']} | {_pct(s['cutin_taken_share'])} ({_pct(s['cutin_cut_share'])}) | "
                         f"{_n(s['cutin_undecided'])} | "
                         f"{_n(s['last_played_p50_ms'])} / {_n(s['last_played_p90_ms'])} | {_n(s['before_onset'])} | "
                         f"{_n(s['silent_at_onset'])} | {_n(s['answer_stops'])} ({_n(s['answers_stopped'])}) |")
    bcs = {c: s for c, s in r["median"].items() if s["backchannels"]}
    if bcs:
        lines += ["", "Backchannels 4-7 s into the story: the story lost (stopped and not back within 1 s of the "
                  "voice, or answered; gone before the voice counts as lost) and taken as an interruption:", "",
                  "| condition | backchannels | story lost | taken as interruptions | story gone before the voice "
                  "| self-interruptions before the onset |", "|---|---|---|---|---|---|"]
        for c, s in bcs.items():
            lines.append(f"| {c} | {s['backchannels']} | {_pct(s['bc_lost_rate'])} | {_pct(s['bc_false_rate'])} | "
                         f"{_n(s['bc_gone_before'])} | {_n(s['before_onset'])} |")
    first = runs[0]["conditions"]
    odd = [f"{c}: {v['errors']} errors, {v['not_trials']} not trials (no story audio)" for c, v in first.items()
           if v["errors"] or v["not_trials"]]
    completed = [f"{c}: {v['ended_in_window']}" for c, v in first.items() if v["ended_in_window"]]
    clipped = [f"{c}: {v['clipped_trials']}" for c, v in first.items() if v["clipped_trials"]]
    if odd:
        lines += ["", "Not counted (first run): " + "; ".join(odd)]
    if completed:
        lines += ["", "Stories whose audio ended inside the window (the rest of it is left out of the share; "
                  "first run): " + "; ".join(completed)]
    if clipped:
        lines += ["", "Trials whose microphone clipped (first run): " + "; ".join(clipped)]
    if len(runs) > 1:
        lines += ["", "Per run: self-interruptions, least share played, cut-ins taken, onset -> last audio played "
                      "p50 ms, backchannels losing the story:", ""]
        for c in r["median"]:
            per = []
            for run in runs:
                s = run["conditions"].get(c)
                if not s:
                    per.append("-")
                    continue
                per.append(" / ".join("-" if s[k] is None else f"{s[k]:.0f}" if k.endswith("ms") else f"{s[k]:g}"
                                      for k in ("self_interruptions", "share_min", "cutin_taken_share",
                                                "last_played_p50_ms", "bc_lost_rate")))
            lines.append(f"- {c}: " + "; ".join(per))
    lines += ["", "Goals (issue 70, median of the runs):", ""]
    lines += [f"- {g['goal']}: {g['mark']}" + ("" if g["shown"] is None else f" ({g['shown']})") for g in r["goals"]]
    if not r["goals"]:
        lines.append("- none measured")
    return "\n".join(lines)
