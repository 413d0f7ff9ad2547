"""Serving benchmark through the gateway, in the manner of the seed engine's omni benchmark.

    python -m bench serve [--concurrency 1 2 4] [--prompts 8] [--workers 1] [--out DIR]

Real gateway and workers; clients speak the realtime protocol. At each concurrency level C, C
clients run at once, each taking prompts from a shared list, one fresh session per prompt:

- text prompts: ``conversation.item.create`` + ``response.create``; the clock starts at
  ``response.create``;
- spoken prompts (made locally with the pipeline's TTS): streamed at real time with server VAD;
  the clock starts at the last voiced sample sent, so TTFP here *is* voice-to-voice (V2V).

Metrics (``../shared/DESIGN.md``): TTFT (first text delta), TTFP (first audio delta), TPOT/ITL
(mean gap between text deltas), E2E (``response.done``), RTF (last audio delta - start over
seconds of audio), queue wait (connect -> ``queue.assigned``, reported apart), and continuity:
a player that starts at the first audio delta and plays in real time; a chunk arriving more than
100 ms after it was due is an underrun.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from bench.launch import Launched, raise_fd_limit

RATE = 24000
CHUNK_MS = 40
UNDERRUN_MS = 100.0
MAX_TOKENS = 48
TEXT_PROMPTS = [
    "What is the capital of France?", "Say hello to my friend Anna.", "What colour is coal?",
    "Name a fruit that is yellow.", "How many seconds are in a minute?", "What is the opposite of wet?",
    "Which animal says meow?", "What do you call a baby cat?",
]
SPOKEN_PROMPTS = ["What is the capital of France?", "What colour is coal?", "Which animal says meow?",
                  "What do you call a baby cat?"]


def continuity(arrivals: list[tuple[float, float]]) -> tuple[int, float]:
    """(underruns, worst lateness ms) for chunks [(arrival time s, duration s)] played in real time."""
    if not arrivals:
        return 0, 0.0
    due = arrivals[0][0]
    underruns, worst = 0, 0.0
    for at, dur in arrivals:
        late = (at - due) * 1000
        if late > UNDERRUN_MS:
            underruns += 1
        worst = max(worst, late)
        due = max(due, at) + dur  # after a gap the player resumes from the late chunk
    return underruns, worst


async def one_request(url: str, kind: str, prompt: str, speech: np.ndarray | None,
                      max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    t_connect = time.monotonic()
    r: dict[str, Any] = {"kind": kind}
    async with websockets.connect(url, max_size=None, compression=None, ping_interval=None,
                                  open_timeout=600) as ws:
        queue_wait = None
        while True:
            ev = json.loads(await ws.recv())
            if ev["type"] == "queue.assigned":
                queue_wait = time.monotonic() - t_connect
            if ev["type"] == "session.created":
                break
        r["queue_wait_ms"] = (queue_wait if queue_wait is not None else time.monotonic() - t_connect) * 1000
        update = {"max_output_tokens": max_tokens}
        if kind == "text":
            update["audio"] = {"input": {"turn_detection": None}}
        await ws.send(json.dumps({"type": "session.update", "session": update}))
        start = None
        sender = None
        if kind == "text":
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
            await ws.send(json.dumps({"type": "response.create"}))
            start = time.monotonic()
        else:
            marks: dict[str, float] = {}
            sender = asyncio.create_task(stream_speech(ws, speech, marks))
        text_times: list[float] = []
        audio: list[tuple[float, float]] = []
        audio_s = 0.0
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 120))
            now = time.monotonic()
            kind_ev = ev["type"]
            if kind_ev in ("response.output_audio_transcript.delta", "response.output_text.delta"):
                text_times.append(now)
            elif kind_ev == "response.output_audio.delta":
                dur = len(base64.b64decode(ev["delta"])) / 2 / RATE
                audio.append((now, dur))
                audio_s += dur
            elif kind_ev == "response.done":
                break
        if sender is not None:
            sender.cancel()
            start = marks.get("last_voiced", now)
        done_at = now
    r["ttft_ms"] = (text_times[0] - start) * 1000 if text_times else None
    r["ttfp_ms"] = (audio[0][0] - start) * 1000 if audio else None
    r["e2e_ms"] = (done_at - start) * 1000
    gaps = np.diff(text_times) * 1000 if len(text_times) > 1 else np.asarray([])
    r["itl_ms"] = float(gaps.mean()) if gaps.size else None
    r["tpot_ms"] = ((text_times[-1] - text_times[0]) * 1000 / (len(text_times) - 1)) if len(text_times) > 1 else None
    r["rtf"] = ((audio[-1][0] - start) / audio_s) if audio_s else None
    r["underruns"], r["worst_late_ms"] = continuity(audio)
    r["audio_s"] = audio_s
    if kind == "spoken":
        r["v2v_ms"] = r["ttfp_ms"]
    return r


async def stream_speech(ws, speech: np.ndarray, marks: dict[str, float]) -> None:
    audio = np.concatenate([np.zeros(RATE // 2, dtype="<i2"), speech, np.zeros(RATE * 4, dtype="<i2")])
    last_voiced = RATE // 2 + int(np.flatnonzero(np.abs(speech) > 0.02 * 32768)[-1])
    step = RATE * CHUNK_MS // 1000
    t0 = time.monotonic()
    for n, i in enumerate(range(0, len(audio), step)):
        await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
        if i <= last_voiced < i + step:
            marks["last_voiced"] = time.monotonic() + (last_voiced - i) / RATE
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(audio[i:i + step].tobytes()).decode()}))


async def level(url: str, concurrency: int, jobs: list[tuple[str, str, np.ndarray | None]],
                max_tokens: int = MAX_TOKENS) -> list[dict[str, Any]]:
    todo = list(jobs)
    results: list[dict[str, Any]] = []

    async def client() -> None:
        while todo:
            kind, prompt, speech = todo.pop(0)
            try:
                results.append(await one_request(url, kind, prompt, speech, max_tokens))
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                results.append({"kind": kind, "error": repr(exc)})

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return results


def stats(values: list[float]) -> dict[str, float | None]:
    v = [x for x in values if x is not None]
    if not v:
        return {"mean": None, "median": None, "p90": None, "p99": None, "n": 0}
    a = np.asarray(v, dtype=float)
    return {"mean": round(float(a.mean()), 3), "median": round(float(np.median(a)), 3),
            "p90": round(float(np.percentile(a, 90)), 3), "p99": round(float(np.percentile(a, 99)), 3),
            "n": int(a.size)}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if "error" not in r]
    keys = ("queue_wait_ms", "ttft_ms", "ttfp_ms", "tpot_ms", "itl_ms", "e2e_ms", "rtf", "v2v_ms")
    out = {k: stats([r.get(k) for r in ok]) for k in keys}
    out["underruns"] = sum(r["underruns"] for r in ok)
    out["worst_late_ms"] = round(max((r["worst_late_ms"] for r in ok), default=0.0), 1)
    out["requests"], out["errors"] = len(rows), len(rows) - len(ok)
    return out


def run_cli(args) -> dict[str, Any]:
    raise_fd_limit()
    from core.cascade.tts import PiperTts

    tts = PiperTts()
    speech = {p: np.frombuffer(b"".join(tts.synthesize(p, deterministic=True)), dtype="<i2") for p in SPOKEN_PROMPTS}
    n = args.prompts
    result: dict[str, Any] = {"workers": args.workers, "prompts_per_kind": n, "max_output_tokens": MAX_TOKENS,
                              "levels": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=args.workers, recording={"enabled": False},
                      queue={"capacity": 1000, "max_wait_s": 3600},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            url = launched.ws_url + "?record=false&app=bench&extensions=all"
            asyncio.run(level(url, 1, [("text", TEXT_PROMPTS[0], None)]))  # warm-up
            for c in args.concurrency:
                for kind in ("text", "spoken"):
                    if kind == "text":
                        jobs = [("text", TEXT_PROMPTS[i % len(TEXT_PROMPTS)], None) for i in range(n)]
                    else:
                        jobs = [("spoken", p, speech[p]) for p in (SPOKEN_PROMPTS * n)[:n]]
                    rows = asyncio.run(level(url, c, jobs))
                    result["levels"].append({"concurrency": c, "kind": kind, **summarise(rows), "raw": rows})
    return result


def report(r: dict[str, Any]) -> str:
    def f(x: dict, key: str = "mean", digits: int = 2) -> str:
        v = x.get(key)
        return "-" if v is None else f"{v:.{digits}f}"

    lines = [
        f"Workers: {r['workers']}; max_output_tokens {r['max_output_tokens']}; times in ms.",
        "",
        "| Input | Output | Max_Concurrency | Prompts | Mean E2E | Mean TTFT | Mean TPOT | Mean TTFP | Mean RTF "
        "| Mean ITL | Mean queue wait | Underruns |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in r["levels"]:
        inp = "text" if lv["kind"] == "text" else "speech (V2V = TTFP)"
        lines.append(
            f"| {inp} | text+audio | {lv['concurrency']} | {lv['requests']} | {f(lv['e2e_ms'])} | {f(lv['ttft_ms'])} "
            f"| {f(lv['tpot_ms'])} | {f(lv['ttfp_ms'])} | {f(lv['rtf'])} | {f(lv['itl_ms'])} "
            f"| {f(lv['queue_wait_ms'])} | {lv['underruns']} |")
    lines += ["", "| Input | Max_Concurrency | TTFP median / p90 / p99 | E2E median / p90 / p99 | errors |",
              "|---|---|---|---|---|"]
    for lv in r["levels"]:
        t, e = lv["ttfp_ms"], lv["e2e_ms"]
        lines.append(f"| {lv['kind']} | {lv['concurrency']} | {f(t, 'median', 0)} / {f(t, 'p90', 0)} / "
                     f"{f(t, 'p99', 0)} | {f(e, 'median', 0)} / {f(e, 'p90', 0)} / {f(e, 'p99', 0)} | {lv['errors']} |")
    return "\n".join(lines)


def plot(r: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for kind, style in (("text", "o-"), ("spoken", "s--")):
        lv = [x for x in r["levels"] if x["kind"] == kind]
        cs = [x["concurrency"] for x in lv]
        for ax, key, title in zip(axes, ("ttfp_ms", "e2e_ms", "queue_wait_ms"),
                                  ("TTFP (ms; spoken: V2V)", "E2E (ms)", "Queue wait (ms)")):
            ax.plot(cs, [x[key]["median"] or 0 for x in lv], style, label=f"{kind} median")
            ax.plot(cs, [x[key]["p90"] or 0 for x in lv], style, alpha=0.4, label=f"{kind} p90")
            ax.set_title(title)
            ax.set_xlabel("concurrency")
            ax.set_xticks(cs)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"OmniDuplex serving, {r['workers']} worker(s), 2-core CPU")
    fig.tight_layout()
    fig.savefig(out / "serve.png", dpi=110)
