"""From trial rows to figures: per mode and run (``summarise``), the median of the runs
(``median_modes``), the goals judged on it (``goals``) and the table (``report``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bench.duplex.common import (ANCHORS, GOAL_BACKCHANNEL, GOAL_CUTIN, GOAL_LIVE_MS, GOAL_P90_MS, GOAL_RATIO,
                                 GOAL_SEEN_MS, GOAL_STORY_LOST, GOAL_TAKEOVER, LIVE)
from bench.stats import goal_mark, median_by_mode, summary


def _nan_none(v: float) -> float | None:
    return None if isinstance(v, float) and np.isnan(v) else v


def _share(k: int, n: int) -> float | None:
    return round(k / n, 3) if n else None


def summarise(rows: list[dict[str, Any]], modes: list[str], refused: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        if mode in refused:
            out[mode] = {"refused": refused[mode]}
            continue
        mine = [r for r in rows if r["mode"] == mode and "error" not in r]
        comp = [r for r in mine if r["kind"] == "complete"]
        paused = [r for r in mine if r["kind"] == "paused"]
        bc_all = [r for r in mine if r["kind"] == "backchannel"]
        bc = [r for r in bc_all if r.get("status") == "ok"]
        ints_all = [r for r in mine if r["kind"] == "interruption"]
        ints = [r for r in ints_all if r.get("status") == "ok"]
        cut_all = [r for r in mine if r["kind"] == "cutin"]
        cutins = [r for r in cut_all if r.get("status") == "ok"]
        lat = summary([r["latency_ms"] for r in comp if r["latency_ms"] is not None])
        stopped = summary([r["stopped_ms"] for r in comp if r.get("stopped_ms") is not None])
        audio_after = summary([r["audio_after_stop_ms"] for r in comp if r.get("audio_after_stop_ms") is not None])
        seen = summary([r["seen_ms"] for r in ints if r["seen_ms"] is not None])
        stop = summary([r["stop_ms"] for r in ints if r["stop_ms"] is not None])
        answer = summary([r["answer_ms"] for r in ints if r["answer_ms"] is not None])
        # what the listener heard: the cut reply's audio as received and played (issue 69)
        silence = summary([r["silence_ms"] for r in ints if r.get("silence_ms") is not None])
        last_audio = summary([r["last_audio_ms"] or 0.0 for r in ints if r.get("silence_ms") is not None])
        cut_silence = summary([r["silence_ms"] for r in cutins if r.get("silence_ms") is not None])
        takeovers = sum(r["takeover"] for r in paused)
        in_pause = sum(r.get("takeover_in_pause", r["takeover"]) for r in paused)
        false = sum(r["false_interruption"] for r in bc)
        detected = sum(r["detected"] for r in ints)
        relevant = sum(r["relevant"] for r in ints)
        lost = sum(r["story_lost"] for r in bc)
        taken = sum(r["taken"] for r in cutins)
        back = summary([r["story_back_ms"] for r in bc if r.get("story_back_ms") is not None])
        cut_seen = summary([r["seen_ms"] for r in cutins if r["seen_ms"] is not None])
        out[mode] = {
            "complete": len(comp), "turn_p50_ms": _nan_none(lat["p50"]), "turn_p90_ms": _nan_none(lat["p90"]),
            "no_answer": sum(not r["answered"] for r in comp),
            "stopped_p50_ms": _nan_none(stopped["p50"]), "audio_after_stop_p50_ms": _nan_none(audio_after["p50"]),
            "paused": len(paused), "takeovers": takeovers, "pause_takeover": _share(takeovers, len(paused)),
            "takeovers_in_pause": in_pause, "talked_over": sum(bool(r.get("early_audio")) for r in comp),
            "backchannels": len(bc), "bc_not_trials": len(bc_all) - len(bc), "bc_false": false,
            "bc_false_rate": _share(false, len(bc)), "bc_lost": lost, "bc_lost_rate": _share(lost, len(bc)),
            "bc_back_p50_ms": _nan_none(back["p50"]),
            "cutins": len(cutins), "cutin_not_trials": len(cut_all) - len(cutins), "cutin_taken": taken,
            "cutin_taken_share": _share(taken, len(cutins)), "cutin_seen_p50_ms": _nan_none(cut_seen["p50"]),
            "interruptions": len(ints), "int_not_trials": len(ints_all) - len(ints), "detected": detected,
            "detected_share": _share(detected, len(ints)), "seen_p50_ms": _nan_none(seen["p50"]),
            "seen_p90_ms": _nan_none(seen["p90"]), "stop_p50_ms": _nan_none(stop["p50"]),
            "answer_p50_ms": _nan_none(answer["p50"]), "relevant": relevant, "relevance": _share(relevant, len(ints)),
            "silence_p50_ms": _nan_none(silence["p50"]), "silence_p90_ms": _nan_none(silence["p90"]),
            "last_audio_p50_ms": _nan_none(last_audio["p50"]), "cutin_silence_p50_ms": _nan_none(cut_silence["p50"]),
            # no verdict came (neither a turn nor a backchannel): counted apart, never as the good outcome
            "bc_undecided": sum(bool(r.get("undecided")) for r in bc),
            "int_undecided": sum(bool(r.get("undecided")) for r in ints),
            "cutin_undecided": sum(bool(r.get("undecided")) for r in cutins),
            "errors": sum("error" in r for r in rows if r["mode"] == mode),
            # long replies whose audio came slower than real time (the listener heard a gap): a loaded machine
            "reply_gaps": sum(r.get("reply_gaps_s", 0) > 0.1 for r in bc + ints + cutins),
        }
    base = out.get("server_vad", {}).get("turn_p50_ms")
    for s in out.values():
        if "refused" not in s:
            ok = base and s["turn_p50_ms"] is not None and s["complete"]
            s["ratio_to_server_vad"] = round(s["turn_p50_ms"] / base, 3) if ok else None
    return out


MEDIAN_KEYS = ("pause_takeover", "takeovers", "turn_p50_ms", "turn_p90_ms", "ratio_to_server_vad", "no_answer",
               "detected_share", "seen_p50_ms", "seen_p90_ms", "stop_p50_ms", "answer_p50_ms", "relevance",
               "bc_false_rate", "bc_false", "bc_lost_rate", "bc_back_p50_ms", "cutin_taken_share", "cutin_seen_p50_ms",
               "errors", "stopped_p50_ms", "audio_after_stop_p50_ms", "takeovers_in_pause", "talked_over",
               "silence_p50_ms", "silence_p90_ms", "last_audio_p50_ms", "cutin_silence_p50_ms", "bc_undecided",
               "int_undecided", "cutin_undecided")
COUNT_KEYS = ("complete", "paused", "backchannels", "interruptions", "cutins", "bc_not_trials", "int_not_trials",
              "cutin_not_trials")


def median_modes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode, each figure's median over the runs with its spread (a refused mode stays refused)."""
    return median_by_mode(runs, MEDIAN_KEYS, COUNT_KEYS)


def goals(median: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 34's goals, judged on the median of the runs: each {"goal", "value", "mark"}."""
    def value(mode: str, key: str) -> float | None:
        s = median.get(mode)
        return None if not s or "refused" in s or s[key]["median"] is None else s[key]["median"]

    out = []
    for mode in median:  # issue 47's, on every mode that ran the trials over a reply
        s = median[mode]
        if "refused" in s:
            continue
        if s.get("backchannels"):
            v = value(mode, "bc_lost_rate")
            out.append({"goal": f"{mode}: backchannels that lose the story or get an answer <= {GOAL_STORY_LOST:.0%}",
                        "value": v, "mark": goal_mark(v, GOAL_STORY_LOST), "shown": None if v is None else f"{v:.0%}"})
        if s.get("cutins"):
            v = value(mode, "cutin_taken_share")
            out.append({"goal": f"{mode}: short cut-ins taken as turns {GOAL_CUTIN:.0%}", "value": v,
                        "mark": goal_mark(v, GOAL_CUTIN, at_least=True),
                        "shown": None if v is None else f"{v:.0%}"})
    for mode in ("server_vad", "semantic_vad", "no_yield"):
        if mode not in median or "refused" in median[mode]:
            continue
        if median[mode].get("backchannels"):
            v = value(mode, "bc_false_rate")
            out.append({"goal": f"{mode}: backchannels taken as interruptions <= {GOAL_BACKCHANNEL:.0%}", "value": v,
                        "mark": goal_mark(v, GOAL_BACKCHANNEL), "shown": None if v is None else f"{v:.0%}"})
        if median[mode].get("interruptions"):
            v = value(mode, "silence_p50_ms")
            out.append({"goal": f"{mode}: silence after an interruption's onset p50 <= {GOAL_SEEN_MS:.0f} ms (the "
                                "audio the listener heard)", "value": v, "mark": goal_mark(v, GOAL_SEEN_MS),
                        "shown": None if v is None else f"{v:.0f} ms"})
            v = value(mode, "seen_p50_ms")
            out.append({"goal": f"{mode}: interruption seen p50 <= {GOAL_SEEN_MS:.0f} ms after the onset", "value": v,
                        "mark": goal_mark(v, GOAL_SEEN_MS), "shown": None if v is None else f"{v:.0f} ms"})
    if median.get("semantic_vad", {}).get("paused"):
        v = value("semantic_vad", "pause_takeover")
        out.append({"goal": f"semantic_vad: pause takeover <= {GOAL_TAKEOVER}", "value": v,
                    "mark": goal_mark(v, GOAL_TAKEOVER), "shown": None if v is None else f"{v:.2f}"})
    if median.get(LIVE, {}).get("complete") and median.get("semantic_vad", {}).get("complete"):
        live, sem = value(LIVE, "turn_p50_ms"), value("semantic_vad", "turn_p50_ms")
        diff = round(live - sem, 1) if live is not None and sem is not None else None
        out.append({"goal": f"Live: turn latency p50 within {GOAL_LIVE_MS:.0f} ms of Realtime GA's (semantic_vad)",
                    "value": diff, "mark": goal_mark(None if diff is None else abs(diff), GOAL_LIVE_MS),
                    "shown": None if diff is None else f"{diff:+.0f} ms"})
    if median.get("semantic_vad", {}).get("complete"):
        sem, base = value("semantic_vad", "turn_p50_ms"), value("server_vad", "turn_p50_ms")
        ratio = round(sem / base, 3) if sem is not None and base else None
        out.append({"goal": f"semantic_vad: turn latency p50 <= {GOAL_RATIO}x server_vad's", "value": ratio,
                    "mark": goal_mark(ratio, GOAL_RATIO), "shown": None if ratio is None else f"{ratio:.2f}x"})
        v = value("semantic_vad", "turn_p90_ms")
        out.append({"goal": f"semantic_vad: turn latency p90 <= {GOAL_P90_MS:.0f} ms", "value": v,
                    "mark": goal_mark(v, GOAL_P90_MS), "shown": None if v is None else f"{v:.0f} ms"})
    return out


def _pct(s: dict[str, Any]) -> str:
    """A median_spread of a share as percentages: "8 % (5-10 %)"."""
    if s["median"] is None:
        return "-"
    lo, hi = round(s["min"] * 100), round(s["max"] * 100)
    return f"{s['median'] * 100:.0f} %" + (f" ({lo}-{hi} %)" if lo != hi else "")


def _ms(s: dict[str, Any], fmt: str = ".0f") -> str:
    if s["median"] is None:
        return "-"
    lo, hi = format(s["min"], fmt), format(s["max"], fmt)
    return format(s["median"], fmt) + (f" ({lo}-{hi})" if lo != hi else "")


def _cell(s: dict[str, Any], key: str, n_key: str, text) -> str:
    return "n/a" if not s[n_key] else text(s[key])


def report(r: dict[str, Any]) -> str:
    n = r["items"]
    lines = [f"Full duplex over {'a WebRTC call' if r.get('transport') == 'webrtc' else 'WebSocket'}, {r['set']} set: "
             + ", ".join(f"{v} {k}" for k, v in n.items())
             + f"; {len(r['runs'])} run(s) (" + ", ".join(
                 f"{run['wall_s']:.0f} s, load {run.get('loadavg_start', [0])[0]:.1f}" for run in r["runs"])
             + f" on {os.cpu_count()} CPUs)",
             "", "Median of the runs (min-max):", "",
             "| mode | pause takeover | turn latency p50 / p90 ms | x server_vad | interruption detected "
             "| seen p50 / p90 ms | stop p50 ms | answer p50 ms | relevance | backchannel false interruptions |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, s in r["median"].items():
        if "refused" in s:
            lines.append(f"| {mode} | refused: {s['refused']} | | | | | | | | |")
            continue
        turn = "n/a" if not s["complete"] else f"{_ms(s['turn_p50_ms'])} / {_ms(s['turn_p90_ms'])}"
        if s["complete"] and s["no_answer"]["median"]:
            turn += f" ({s['no_answer']['text']} no answer)"
        ratio = _ms(s["ratio_to_server_vad"], ".2f")
        seen = "n/a" if not s["interruptions"] else f"{_ms(s['seen_p50_ms'])} / {_ms(s['seen_p90_ms'])}"
        errors = f" ({s['errors']['text']} errors)" if s["errors"]["median"] else ""
        lines.append(
            f"| {mode}{errors} | {_cell(s, 'pause_takeover', 'paused', _pct)} | {turn} | {ratio} | "
            f"{_cell(s, 'detected_share', 'interruptions', _pct)} | {seen} | "
            f"{_cell(s, 'stop_p50_ms', 'interruptions', _ms)} | {_cell(s, 'answer_p50_ms', 'interruptions', _ms)} | "
            f"{_cell(s, 'relevance', 'interruptions', _pct)} | {_cell(s, 'bc_false_rate', 'backchannels', _pct)} |")
    with_turns = {mode: s for mode, s in r["median"].items() if "refused" not in s and s["complete"]}
    if with_turns:
        lines += ["", "Where a complete turn's time goes: the turn's end (speech_stopped) after the last voiced "
                  "sample, then the first audio after it (0 when the held reply was ready); complete turns the "
                  "assistant began talking over before the voice's end (an inner pause taken for the end):", "",
                  "| mode | speech_stopped after the voice p50 ms | first audio after speech_stopped p50 ms "
                  "| complete turns talked over |", "|---|---|---|---|"]
        lines += [f"| {mode} | {_ms(s['stopped_p50_ms'])} | {_ms(s['audio_after_stop_p50_ms'])} | "
                  f"{_ms(s['talked_over'])} |" for mode, s in with_turns.items()]
    with_pauses = {mode: s for mode, s in r["median"].items() if "refused" not in s and s["paused"]}
    if with_pauses:
        lines += ["", "Pause takeover counts a reply begun in the pause or over the rest of the turn, before the "
                  "voice's end; in the pause alone (Full-Duplex-Bench's rate): " + "; ".join(
                      f"{mode} {_ms(s['takeovers_in_pause'])} of {s['paused']}" for mode, s in with_pauses.items())]
    lines += ["", "What the listener notices (issues 47, 69): the silence after an interruption's onset, from the "
              "audio the client received and played (the cut reply's last audio heard; the client clears its "
              "playback at speech_started, and plays any of the reply's audio that comes after), p50 / p90 and "
              "the last of it received after the onset, p50; short cut-ins taken as turns (a verdict came: a "
              "turn committed or an answer sounded) and their silence; backchannels after which the story did not "
              "come back within 1 s (or that got an answer); trials with no verdict (undecided: backchannel / "
              "interruption / cut-in), counted apart:", "",
              "| mode | silence after the onset p50 / p90 ms | last audio received p50 ms | cut-ins taken "
              "| cut-in silence p50 ms | backchannels losing the story | story back after the voice, p50 ms "
              "| undecided |", "|---|---|---|---|---|---|---|---|"]
    for mode, s in r["median"].items():
        if "refused" in s:
            continue
        silence = ("n/a" if not s["interruptions"] else f"{_ms(s['silence_p50_ms'])} / {_ms(s['silence_p90_ms'])}")
        undecided = " / ".join(_ms(s[k]) for k in ("bc_undecided", "int_undecided", "cutin_undecided"))
        lines.append(f"| {mode} | {silence} | {_cell(s, 'last_audio_p50_ms', 'interruptions', _ms)} | "
                     f"{_cell(s, 'cutin_taken_share', 'cutins', _pct)} | "
                     f"{_cell(s, 'cutin_silence_p50_ms', 'cutins', _ms)} | "
                     f"{_cell(s, 'bc_lost_rate', 'backchannels', _pct)} | "
                     f"{_cell(s, 'bc_back_p50_ms', 'backchannels', _ms)} | {undecided} |")
    skipped = [f"{mode}: {s['bc_not_trials']} backchannel, {s['int_not_trials']} interruption"
               for mode, s in r["median"].items() if "refused" not in s and (s["bc_not_trials"] or s["int_not_trials"])]
    if skipped:
        lines += ["", "Not trials in the first run (the long reply ended before the clip): " + "; ".join(skipped)]
    gaps = [f"{mode}: {s['reply_gaps']} of {s['backchannels'] + s['interruptions']}"
            for mode, s in r["runs"][0]["modes"].items() if "refused" not in s and s.get("reply_gaps")]
    if gaps:
        lines += ["", "Long replies that ran dry while playing (audio slower than real time) in the first run: "
                  + "; ".join(gaps)]
    if len(r["runs"]) > 1:
        lines += ["", "Per run: turn latency p50 ms, pause takeover, seen p50 ms, relevance, backchannel false "
                      "interruptions:", ""]
        for mode in r["modes"]:
            per = []
            for run in r["runs"]:
                s = run["modes"].get(mode, {})
                if "refused" in s or not s:
                    per.append("refused")
                    continue
                per.append(" / ".join("-" if s[k] is None else f"{s[k]:.0f}" if k.endswith("ms") else f"{s[k]:.2f}"
                                      for k in ("turn_p50_ms", "pause_takeover", "seen_p50_ms", "relevance",
                                                "bc_false_rate")))
            lines.append(f"- {mode}: " + "; ".join(per))
    lines += ["", "Goals (median of the runs):", ""]
    lines += [f"- {g['goal']}: {g['mark']}" + ("" if g["shown"] is None else f" ({g['shown']})") for g in r["goals"]]
    if not r["goals"]:
        lines.append("- none measured (needs server_vad and semantic_vad)")
    lines += ["", "Full-Duplex-Bench v1, published (pause takeover rate / turn-taking latency / user-interruption "
                  "latency): " + "; ".join(f"{name} {a} / {b} s / {c} s" for name, a, b, c in ANCHORS)
              + ". Their interruption latency runs from the end of the user's interruption to the model's reply "
                "(our 'answer' column), not from its onset (our 'seen')."]
    return "\n".join(lines)
