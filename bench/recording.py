"""Cost of recording: voice-to-voice with the session recorder on versus off, same worker.

    python -m bench.recording --runs 10        # table
    python -m bench.recording --runs 10 --json

Starts one real worker process (temporary data dir, the shared model cache) and holds spoken
sessions straight on its WebSocket, alternating ``record=true`` and ``record=false`` so drift in
machine load hits both alike. Each session streams a question at real time with server VAD and
waits for the reply. V2V is the worker's own figure (``session.metrics.v2v_ms``: speech stopped
-> first reply audio); ``v2v_client_ms`` is the client's (last voiced sample sent -> first audio
delta received, including the 500 ms silence hangover).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import websockets

from bench.launch import Launched
from bench.stats import goal_mark, summary

CLIENT_V2V_GOAL_PCT = 5  # goal: client V2V (median) with recording at most this much above without

RATE = 24000
CHUNK_MS = 40
PROMPTS = ["What is the capital of France?", "What colour is coal?", "Which animal says meow?",
           "What do you call a baby cat?", "How many seconds are in a minute?"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def spoken_session(url: str, pcm: np.ndarray, record: bool, headers: dict[str, str]) -> dict[str, float]:
    ws_url = url.replace("http://", "ws://") + f"/ws/realtime?record={'true' if record else 'false'}&app=bench&extensions=all"
    audio = np.concatenate([np.zeros(RATE // 2, dtype="<i2"), pcm, np.zeros(RATE * 3 // 2, dtype="<i2")])
    last_voiced = RATE // 2 + int(np.flatnonzero(np.abs(pcm) > 0.02 * 32768)[-1])
    step = RATE * CHUNK_MS // 1000
    result: dict[str, float] = {}
    async with websockets.connect(ws_url, max_size=None, additional_headers=headers) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        voiced_sent_at: list[float] = []

        async def send() -> None:
            t0 = time.monotonic()
            for n, i in enumerate(range(0, len(audio), step)):
                await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
                chunk = audio[i:i + step]
                if i <= last_voiced < i + step:
                    voiced_sent_at.append(time.monotonic() + (last_voiced - i) / RATE)
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(chunk.tobytes()).decode()}))

        sender = asyncio.create_task(send())
        first_audio = None
        try:
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 60))
                if ev["type"] == "response.output_audio.delta" and first_audio is None:
                    first_audio = time.monotonic()
                elif ev["type"] == "session.metrics":
                    result["v2v_ms"] = ev["metrics"]["v2v_ms"]
                    break
        finally:
            sender.cancel()
        if first_audio is not None and voiced_sent_at:
            result["v2v_client_ms"] = (first_audio - voiced_sent_at[0]) * 1000
    return result


async def run(url: str, runs: int, headers: dict[str, str]) -> dict[str, list[float]]:
    """``headers``: the worker secret (the sessions go to the worker directly)."""
    from core.cascade.tts import PiperTts

    tts = PiperTts()
    speech = [np.frombuffer(b"".join(tts.synthesize(p, deterministic=True)), dtype="<i2") for p in PROMPTS]
    out: dict[str, list[float]] = {"on_v2v": [], "off_v2v": [], "on_client": [], "off_client": []}
    await spoken_session(url, speech[0], False, headers)  # warm-up, not counted
    for i in range(runs):
        for record in ((True, False) if i % 2 == 0 else (False, True)):
            r = await spoken_session(url, speech[i % len(speech)], record, headers)
            key = "on" if record else "off"
            if "v2v_ms" in r:
                out[f"{key}_v2v"].append(r["v2v_ms"])
            if "v2v_client_ms" in r:
                out[f"{key}_client"].append(r["v2v_client_ms"])
            log(f"run {i + 1}/{runs} record={'on ' if record else 'off'} {r}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recording", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="sessions per setting (default 10)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, start_gateway=False) as worker:  # stopped on leaving
            worker.wait_ready(300)
            samples = asyncio.run(run(worker.worker_url(), args.runs, worker.worker_headers))
    stats = {k: summary(v) for k, v in samples.items()}
    ratio = stats["on_v2v"]["p50"] / stats["off_v2v"]["p50"] if stats["off_v2v"]["p50"] else None
    ratio_client = (stats["on_client"]["p50"] / stats["off_client"]["p50"]
                    if stats["off_client"]["p50"] else None)
    result = {"stats": stats, "v2v_ratio_on_off": ratio, "v2v_client_ratio_on_off": ratio_client}
    print(json.dumps(result) if args.json else report(result))


def report(r: dict) -> str:
    """Markdown table; the goal (docs/benchmarks.md, "Recording cost"): client V2V (median) with
    recording at most 5 % above without."""
    stats = r["stats"]
    lines = ["| metric | p50 | p90 | n |", "|---|---|---|---|"]
    for key, label in (("off_v2v", "V2V (worker: speech stopped -> first audio), recording off"),
                       ("on_v2v", "V2V, recording on"),
                       ("off_client", "client V2V (last voiced sample -> first audio delta), off"),
                       ("on_client", "client V2V, on")):
        s = stats[key]
        lines.append(f"| {label} | {s['p50']:.1f} ms | {s['p90']:.1f} ms | {s['n']} |")

    def share(ratio: float | None) -> str:
        return "-" if ratio is None or math.isnan(ratio) else f"{(ratio - 1) * 100:+.1f} %"

    ratio, ratio_client = r["v2v_ratio_on_off"], r["v2v_client_ratio_on_off"]
    goal = goal_mark(ratio_client, 1 + CLIENT_V2V_GOAL_PCT / 100, f"within {CLIENT_V2V_GOAL_PCT:g} %")
    lines += ["", "| recording on vs off (median) | change | goal |", "|---|---|---|",
              f"| V2V (worker) | {share(ratio)} | |", f"| client V2V | {share(ratio_client)} | {goal} |"]
    return "\n".join(lines)

if __name__ == "__main__":
    main()
