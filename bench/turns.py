"""Turn-taking through the real realtime API: how fast a spoken question is answered, and how often
the system cuts in when the speaker pauses mid-sentence, per turn-detection mode.

    python -m bench turns                                    # all modes, the whole set, 3 runs (~1 h)
    python -m bench turns --modes server_vad semantic_auto   # the goal's two modes, 3 runs (~35 min)
    python -m bench turns --modes server_vad semantic_auto --limit 5 --runs 1
    python -m bench turns --json --out bench/results

A real gateway + one cascade worker. The set is the eval part of ``bench/sets/turns.py``, spoken by
``bench/turn_set.py`` (espeak-ng voices, not the project's Piper voice): complete questions, and
utterances with a 0.6-1.5 s pause mid-sentence.
Modes: ``server_vad`` (silence_duration_ms 500, default threshold and padding) and
``semantic_low|medium|high|auto`` (``semantic_vad`` with that eagerness). They run interleaved per
item (item 1 in every mode, then item 2 ..., the mode order rotating) so machine drift hits all
modes alike. Each run is a fresh GA session: ``session.update`` with
``audio.input.turn_detection``; then the clip is streamed as 20 ms ``input_audio_buffer.append``
chunks of PCM16 24 kHz on a wall-clock schedule after 0.5 s of silence, then silence goes on (a
microphone keeps sending) until the run is decided.

- complete: V2V = first ``response.output_audio.delta`` minus the time the chunk holding the last
  voiced sample was sent; no audio within 10 s of streamed silence is "no answer". Then
  ``response.cancel`` and close.
- paused: a cut-in is a response created inside the pause (the server took the turn before the
  chunk where speech resumes was sent: its audio is on the way and starts over the speaker even
  when it lands just after they resume); "audio in pause" counts only those whose first audio
  arrived before the resume. The rest is streamed regardless; then the answer to the whole
  utterance (audio of a response created after the speech resumed) is awaited up to 10 s; its
  V2V is reported apart.

The whole set runs ``--runs`` times (default 3) on one stack; each run is reported, and the goal
is judged on the median of the runs (spread shown): semantic_auto V2V p50 <= 0.75x server_vad's
with <= 10 % cut-ins. A mode the server refuses (an ``error`` on ``session.update``) is reported
as "refused: <message>" and skipped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from types import EllipsisType
from typing import Any

import numpy as np
import websockets

from bench.launch import cascade_realtime_url, raise_fd_limit
from bench.stats import median_by_mode, summary
from bench.turn_set import RATE, Clip, items, synthesize

CHUNK_MS = 20
CHUNK = RATE * CHUNK_MS // 1000
LEAD_S = 0.5  # silence before the speech
WAIT_S = 10.0  # streamed silence to wait for an answer
MAX_TOKENS = 48
GOAL_RATIO = 0.75
GOAL_CUT_INS = 0.10


def _semantic(eagerness: str) -> dict[str, Any]:
    return {"type": "semantic_vad", "eagerness": eagerness, "create_response": True, "interrupt_response": True}


MODES: dict[str, dict[str, Any]] = {
    "server_vad": {"type": "server_vad", "silence_duration_ms": 500},
    "semantic_low": _semantic("low"),
    "semantic_medium": _semantic("medium"),
    "semantic_high": _semantic("high"),
    "semantic_auto": _semantic("auto"),
}


class Refused(Exception):
    """The server answered ``session.update`` with an error."""


async def stream(ws, clip: Clip, marks: dict[str, float]) -> None:
    """The clip in real time after LEAD_S of silence, then silence up to WAIT_S (+1 s) after the
    last voiced sample. ``marks`` gets the send times of the chunks holding the marked samples."""
    lead = int(LEAD_S * RATE)
    tail = int((WAIT_S + 1.0) * RATE)
    audio = np.concatenate([np.zeros(lead, np.int16), clip.pcm, np.zeros(tail, np.int16)]).astype("<i2")
    wanted = {"last_voiced": lead + clip.last_voiced}
    if clip.pause_start is not None:
        wanted.update(pause_start=lead + clip.pause_start, resume=lead + clip.resume)
    t0 = time.monotonic()
    for n, i in enumerate(range(0, audio.size, CHUNK)):
        await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
        now = time.monotonic()
        for name, at in wanted.items():
            if i <= at < i + CHUNK:
                marks[name] = now
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(audio[i:i + CHUNK].tobytes()).decode()}))


async def open_session(url: str, turn_detection: dict[str, Any] | None | EllipsisType = ..., **audio_input: Any):
    """A GA session, updated: ``turn_detection`` (left out, ``...``: the server's default) and any
    other ``session.audio.input`` fields (``bench duplex --room``: ``echo_cancellation``,
    ``noise_reduction``)."""
    fields = dict(audio_input)
    if turn_detection is not ...:
        fields["turn_detection"] = turn_detection
    ws = await websockets.connect(url, max_size=None, compression=None, ping_interval=None, open_timeout=600)
    try:
        while json.loads(await asyncio.wait_for(ws.recv(), 600))["type"] != "session.created":
            pass
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "max_output_tokens": MAX_TOKENS, "audio": {"input": fields}}}))
        return await until_ready(ws, "session.updated", 30)
    except BaseException:
        await ws.close()
        raise


async def until_ready(ws, ready: str, timeout: float):
    """``ws`` once ``ready`` arrives; ``Refused`` with the server's reason on an ``error`` first."""
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if ev["type"] == ready:
            return ws
        if ev["type"] == "error":
            raise Refused(ev["error"].get("message") or json.dumps(ev["error"]))


async def one_run(url: str, mode: str, clip: Clip) -> dict[str, Any]:
    it = clip.item
    r: dict[str, Any] = {"mode": mode, "item": it.id, "kind": it.kind, "text": it.text, "voice": it.voice}
    ws = await open_session(url, MODES[mode])
    marks: dict[str, float] = {}
    sender = asyncio.create_task(stream(ws, clip, marks))
    created: dict[str, float] = {}  # response id -> response.created time
    first_audio: dict[str, float] = {}  # response id -> first audio delta time
    transcripts: list[str] = []
    events: list[tuple[float, str]] = []  # turn events, for debugging
    errors: list[str] = []
    t_start = time.monotonic()
    try:
        while True:
            lv = marks.get("last_voiced")
            if lv is not None and time.monotonic() > lv + WAIT_S:
                break
            try:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 0.1))
            except asyncio.TimeoutError:
                if sender.done() and sender.exception():
                    raise sender.exception()
                continue
            now = time.monotonic()
            kind = ev["type"]
            if kind == "response.created":
                created[ev["response"]["id"]] = now
                events.append((now, kind))
            elif kind == "response.output_audio.delta":
                rid = ev.get("response_id", "?")
                if rid not in first_audio:
                    first_audio[rid] = now
                    events.append((now, "first_audio"))
                    if _decided(it.kind, marks, created, first_audio):
                        break
            elif kind == "conversation.item.input_audio_transcription.completed":
                transcripts.append(ev.get("transcript", ""))
            elif kind in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                          "response.done"):
                events.append((now, kind))
            elif kind == "error":
                errors.append(ev["error"].get("message", ""))
        sender.cancel()
        await ws.send(json.dumps({"type": "response.cancel"}))
        # The transcript of the (last) turn may still be on its way: wait for it a little.
        settle = time.monotonic() + 1.0
        while len(transcripts) < max(1, len(created)) and time.monotonic() < settle:
            try:
                ev = json.loads(await asyncio.wait_for(ws.recv(), max(0.01, settle - time.monotonic())))
            except asyncio.TimeoutError:
                break
            if ev["type"] == "conversation.item.input_audio_transcription.completed":
                transcripts.append(ev.get("transcript", ""))
    finally:
        sender.cancel()
        await ws.close()
    lv = marks.get("last_voiced")
    r["transcripts"] = transcripts
    r["errors"] = errors
    r["events"] = [(round((t - t_start) * 1000), k) for t, k in events]
    after = [t for t in first_audio.values() if lv is not None and t >= lv]
    if it.kind == "complete":
        r["early_audio"] = any(lv is None or t < lv for t in first_audio.values())
        r["v2v_ms"] = round((min(after) - lv) * 1000, 1) if after else None
        r["answered"] = bool(after)
    else:
        resume, pause = marks.get("resume"), marks.get("pause_start")
        cut = [t for t in first_audio.values() if resume is None or t < resume]
        r["cut_in"] = bool(cut)
        r["cut_in_ms_after_pause"] = round((min(cut) - pause) * 1000, 1) if cut and pause else None
        r["created_in_pause"] = any(pause is not None and pause <= t < (resume or float("inf"))
                                    for t in created.values())
        full = [t for rid, t in first_audio.items() if resume is not None and created.get(rid, 0) >= resume]
        r["answered"] = bool(full)
        r["v2v_ms"] = round((min(full) - lv) * 1000, 1) if full and lv is not None else None
    return r


def _decided(kind: str, marks: dict[str, float], created: dict[str, float], first_audio: dict[str, float]) -> bool:
    """Whether the first audio just seen settles the run."""
    lv = marks.get("last_voiced")
    if kind == "complete":
        return lv is not None and max(first_audio.values()) >= lv
    resume = marks.get("resume")
    return resume is not None and any(created.get(rid, 0) >= resume for rid in first_audio)


async def run_all(url: str, modes: list[str], clips: list[Clip], log) -> tuple[list[dict[str, Any]], dict[str, str]]:
    refused: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    warm = next((c for c in clips if c.item.kind == "complete"), clips[0])
    try:
        await one_run(url, "server_vad", warm)  # warm-up: first ASR / LLM / TTS calls
    except Exception as exc:  # noqa: BLE001 - a failed warm-up shows again in the real runs
        log(f"warm-up failed: {exc!r}")
    for n, clip in enumerate(clips):
        order = modes[n % len(modes):] + modes[:n % len(modes)]
        for mode in order:
            if mode in refused:
                continue
            try:
                row = await one_run(url, mode, clip)
            except Refused as exc:
                refused[mode] = str(exc)
                log(f"{mode}: refused: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                row = {"mode": mode, "item": clip.item.id, "kind": clip.item.kind, "error": repr(exc)}
            rows.append(row)
            log(_row_line(row))
    return rows, refused


def _row_line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['mode']:16s} {r['item']} error {r['error']}"
    extra = f" cut_in={r['created_in_pause']} audio_in_pause={r['cut_in']}" if r["kind"] == "paused" else ""
    return f"{r['mode']:16s} {r['item']} v2v={r['v2v_ms']}{extra} {r['transcripts']}"


def _nan_none(d: dict[str, float]) -> dict[str, float | None]:
    """NaN (no values) as None, so the JSON stays valid."""
    return {k: None if isinstance(v, float) and np.isnan(v) else v for k, v in d.items()}


def summarise(rows: list[dict[str, Any]], modes: list[str], refused: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        if mode in refused:
            out[mode] = {"refused": refused[mode]}
            continue
        mine = [r for r in rows if r["mode"] == mode]
        comp = [r for r in mine if r["kind"] == "complete" and "error" not in r]
        paused = [r for r in mine if r["kind"] == "paused" and "error" not in r]
        v2v = _nan_none(summary([r["v2v_ms"] for r in comp if r["v2v_ms"] is not None]))
        full = _nan_none(summary([r["v2v_ms"] for r in paused if r["v2v_ms"] is not None]))
        cuts = sum(r["created_in_pause"] for r in paused)
        out[mode] = {
            "complete": len(comp), "v2v_p50_ms": v2v["p50"], "v2v_p90_ms": v2v["p90"],
            "no_answer": sum(not r["answered"] for r in comp), "early_audio": sum(r["early_audio"] for r in comp),
            "paused": len(paused), "cut_ins": cuts, "cut_in_share": round(cuts / len(paused), 3) if paused else None,
            "audio_in_pause": sum(r["cut_in"] for r in paused),
            "paused_answered": sum(r["answered"] for r in paused), "paused_v2v_p50_ms": full["p50"],
            "errors": sum("error" in r for r in mine),
        }
    base = out.get("server_vad", {}).get("v2v_p50_ms")
    for s in out.values():
        if "refused" not in s:
            ok = base is not None and base > 0 and s["v2v_p50_ms"] is not None
            s["ratio_to_server_vad"] = round(s["v2v_p50_ms"] / base, 3) if ok else None
    return out


def goal(modes: dict[str, Any]) -> dict[str, Any]:
    auto = modes.get("semantic_auto")
    if not auto or "refused" in auto or "server_vad" not in modes or auto.get("ratio_to_server_vad") is None:
        return {"met": None, "why": "needs server_vad and semantic_auto results"}
    ratio, share = auto["ratio_to_server_vad"], auto["cut_in_share"]
    met = ratio <= GOAL_RATIO and share is not None and share <= GOAL_CUT_INS
    return {"met": met, "why": f"semantic_auto V2V p50 {ratio:.2f}x server_vad (goal <= {GOAL_RATIO}), "
                                f"cut-ins {share:.0%} (goal <= {GOAL_CUT_INS:.0%})"}


def scorer_cost(texts: list[str], repeats: int = 3) -> dict[str, Any]:
    """In-process: what the end-of-turn score costs on this CPU. ``standalone``: the scorer's own
    forward over a transcript (cached chat prefix), as the core runs it when no held reply
    scores the words; ``in_reply``: the extra time a reply's prefill takes to also yield the
    score (the path a held speculative reply takes), from the same prompts with and without."""
    import threading

    from core.cascade.llm import KvState, SmolLm
    from core.cascade.turn_scorer import EndOfMessageScorer
    from core.processors.cascade import DEFAULT_INSTRUCTIONS

    lm = SmolLm(Path("data"))
    scorer = EndOfMessageScorer(lm)
    for t in texts[:3]:
        scorer.probability(t)
    standalone: list[float] = []
    for _ in range(repeats):
        for t in texts:
            t0 = time.perf_counter()
            scorer.probability(t)
            standalone.append((time.perf_counter() - t0) * 1000)
    plain: list[float] = []
    scored: list[float] = []
    for _ in range(repeats):
        for t in texts:
            messages = [{"role": "system", "content": DEFAULT_INSTRUCTIONS}, {"role": "user", "content": t}]
            for out, hook in ((plain, None), (scored, lambda _p: None)):
                stats = lm.generate(messages, KvState(), lambda _d: None, threading.Event(), max_tokens=1,
                                    end_of_message=hook)
                out.append(stats.prefill_ms)
    return {"standalone_ms": summary(standalone), "prefill_ms": summary(plain), "prefill_scored_ms": summary(scored),
            "calls": len(standalone)}


def run_cli(args) -> dict[str, Any]:
    import sys

    raise_fd_limit()
    modes = list(getattr(args, "modes", None) or MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; use some of {list(MODES)}")
    limit = getattr(args, "limit", None)
    complete, paused = items("complete", limit), items("paused", limit)
    order = [it for pair in zip(complete, paused) for it in pair]
    order += complete[len(paused):] + paused[len(complete):]
    clips = [synthesize(it) for it in order]

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    cost = scorer_cost([clip.item.parts[0] for clip in clips])
    runs: list[dict[str, Any]] = []
    with cascade_realtime_url() as url:
        for k in range(max(1, getattr(args, "runs", None) or 3)):
            log(f"run {k + 1}")
            t0 = time.monotonic()
            rows, refused = asyncio.run(run_all(url, modes, clips, log))
            per_mode = summarise(rows, modes, refused)
            runs.append({"modes": per_mode, "goal": goal(per_mode), "wall_s": round(time.monotonic() - t0, 1),
                         "rows": rows})
    median = median_modes([run["modes"] for run in runs])
    return {"runs": runs, "median": median, "goal": goal(median_values(median)),
            "complete_items": len(complete), "paused_items": len(paused), "scorer": cost}


def median_values(median: dict[str, Any]) -> dict[str, Any]:
    """``median_modes``' figures as plain medians, the shape ``goal`` reads."""
    return {mode: {k: (v["median"] if isinstance(v, dict) else v) for k, v in s.items()} for mode, s in median.items()}


MEDIAN_KEYS = ("v2v_p50_ms", "v2v_p90_ms", "ratio_to_server_vad", "cut_in_share", "cut_ins", "no_answer",
               "audio_in_pause", "paused_answered")


def median_modes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode, each figure's median over the runs with its spread (a refused mode stays refused)."""
    return median_by_mode(runs, MEDIAN_KEYS, ("complete", "paused"))


def report(r: dict[str, Any]) -> str:
    def ms(x: Any) -> str:
        return "-" if x is None else f"{x:.0f}"

    lines = [f"{r['complete_items']} complete questions, {r['paused_items']} paused utterances; "
             f"{len(r['runs'])} run(s)"]
    for k, run in enumerate(r["runs"]):
        lines += ["", f"Run {k + 1} (wall {run['wall_s']:.0f} s):", "",
                  "| mode | V2V p50 / p90 ms | x server_vad | no answer | cut-ins | audio in pause "
                  "| paused: answered, V2V p50 ms |",
                  "|---|---|---|---|---|---|---|"]
        for mode, s in run["modes"].items():
            if "refused" in s:
                lines.append(f"| {mode} | refused: {s['refused']} | | | | | |")
                continue
            ratio = "-" if s["ratio_to_server_vad"] is None else f"{s['ratio_to_server_vad']:.2f}"
            share = "-" if s["cut_in_share"] is None else f"{s['cut_in_share']:.0%}"
            errors = f" ({s['errors']} errors)" if s["errors"] else ""
            lines.append(f"| {mode}{errors} | {ms(s['v2v_p50_ms'])} / {ms(s['v2v_p90_ms'])} | {ratio} | "
                         f"{s['no_answer']}/{s['complete']} | {share} ({s['cut_ins']}/{s['paused']}) | "
                         f"{s['audio_in_pause']}/{s['paused']} | "
                         f"{s['paused_answered']}/{s['paused']}, {ms(s['paused_v2v_p50_ms'])} |")
    lines += ["", "Median of the runs (min-max):", "",
              "| mode | V2V p50 ms | V2V p90 ms | x server_vad | cut-ins (share) | no answer |", "|---|---|---|---|---|---|"]
    for mode, s in r["median"].items():
        if "refused" in s:
            lines.append(f"| {mode} | refused: {s['refused']} | | | | |")
            continue
        lines.append(f"| {mode} | {s['v2v_p50_ms']['text']} | {s['v2v_p90_ms']['text']} | "
                     f"{s['ratio_to_server_vad']['text']} | {s['cut_ins']['text']} of {s['paused']} "
                     f"({s['cut_in_share']['text']}) | {s['no_answer']['text']} of {s['complete']} |")
    c = r.get("scorer")
    if c:
        lines += ["", f"End-of-turn score on this CPU ({c['calls']} calls): standalone {ms(c['standalone_ms']['p50'])} ms "
                      f"p50 ({ms(c['standalone_ms']['p90'])} p90); inside a reply's prefill "
                      f"{ms(c['prefill_scored_ms']['p50'])} ms vs {ms(c['prefill_ms']['p50'])} ms without "
                      f"(p50 prefill of the same prompts)"]
    g = r["goal"]
    verdict = "met" if g["met"] else "**missed**" if g["met"] is False else "not measured"
    lines += ["", f"Goal (median of the runs): {verdict}: {g['why']}"]
    return "\n".join(lines)
