"""Latency of the embedded pipeline, in-process (no network): TTFT, TTFP, RTF, E2E, V2V.

    python -m bench.pipeline            # table, 10 runs of each kind
    python -m bench.pipeline --json     # one JSON object (keys below)
    python -m bench pipeline --compare-instructions "You are ..."   # the default prompt vs another

Text runs: a fresh conversation gets a one-sentence question; times are measured from
``create_response``. Spoken runs: a question spoken by the pipeline's own TTS is streamed in
20 ms chunks at real time with silence around it; V2V is end of speech detected
(``speech_stopped``) -> first reply audio chunk, and ``v2v_from_voice_ms`` adds the silence
hangover (last voiced sample -> first reply audio, what a listener waits).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import psutil

from bench.stats import goal_mark, summary

TEXT_PROMPTS = [
    "What is the capital of France?",
    "Say hello to my friend Anna.",
    "What colour is coal?",
    "Name a fruit that is yellow.",
    "How many seconds are in a minute?",
    "What is the opposite of wet?",
    "Which animal says meow?",
    "What do you call a baby cat?",
    "What is two plus two?",
    "Where does the sun rise?",
]
SPOKEN_PROMPTS = [
    "What is the capital of France?",
    "What colour is coal?",
    "Which animal says meow?",
    "What do you call a baby cat?",
    "How many seconds are in a minute?",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def text_run(backend, prompt: str, instructions: str | None = None) -> dict[str, float]:
    from core.conversation import ConversationConfig

    conv = backend.open_conversation(ConversationConfig(turn_detection=None, instructions=instructions))
    await conv.add_text(prompt)
    start = time.perf_counter()
    await conv.create_response()
    first_text = first_audio = last_audio = None
    audio_ms = 0.0
    async for event in conv.events():
        now = time.perf_counter()
        if event.type == "text_delta" and first_text is None:
            first_text = now
        elif event.type == "audio_chunk":
            first_audio = first_audio or now
            last_audio = now
            audio_ms += event.duration_ms
        elif event.type == "response_done":
            end = now
            break
    await conv.close()
    return {
        "ttft_ms": (first_text - start) * 1000,
        "ttfp_ms": (first_audio - start) * 1000,
        "e2e_ms": (end - start) * 1000,
        "rtf": (last_audio - start) / (audio_ms / 1000),
    }


async def spoken_run(backend, prompt: str, instructions: str | None = None) -> dict[str, float]:
    from core.audio import float_to_pcm16, resample
    from core.conversation import ConversationConfig

    rate = 16000
    pcm24 = b"".join(backend.tts.synthesize(prompt, deterministic=True))
    speech = resample(np.frombuffer(pcm24, dtype="<i2").astype(np.float32) / 32768, 24000, rate)
    voiced = np.nonzero(np.abs(speech) > 0.01)[0]
    lead = int(0.6 * rate)
    pcm = float_to_pcm16(np.concatenate([np.zeros(lead, np.float32), speech, np.zeros(int(1.5 * rate), np.float32)]))
    last_voiced_sample = lead + voiced[-1]

    conv = backend.open_conversation(ConversationConfig(input_sample_rate=rate, instructions=instructions))
    marks: dict[str, float] = {}

    async def read() -> None:
        async for event in conv.events():
            now = time.perf_counter()
            if event.type == "speech_stopped":
                marks.setdefault("stopped", now)
            elif event.type == "audio_chunk":
                marks.setdefault("audio", now)
            elif event.type == "response_done":
                marks["done"] = now
                return

    reader = asyncio.create_task(read())
    step = rate // 50 * 2
    t0 = time.perf_counter()
    for i in range(0, len(pcm), step):
        await conv.append_audio(pcm[i : i + step])
        if i // 2 <= last_voiced_sample < (i + step) // 2:
            marks["voice_end_sent"] = time.perf_counter()
        ahead = t0 + (i + step) / 2 / rate - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
    await asyncio.wait_for(reader, 60)
    await conv.close()
    return {
        "v2v_ms": (marks["audio"] - marks["stopped"]) * 1000,
        "v2v_from_voice_ms": (marks["audio"] - marks["voice_end_sent"]) * 1000,
        "speculative_hit": float(conv.stats.speculative_hits),
    }


async def cancel_run(backend) -> dict[str, float]:
    from core.conversation import ConversationConfig

    conv = backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=200))
    await conv.add_text("Tell me a long story about a brave knight.")
    await conv.create_response()
    async for event in conv.events():
        if event.type == "audio_chunk":
            break
    t = time.perf_counter()
    await conv.cancel_response()
    while conv.stats.last_cancel_stop_ms is None and time.perf_counter() - t < 10:
        await asyncio.sleep(0.005)
    await conv.close()
    return {"cancel_stop_ms": conv.stats.last_cancel_stop_ms or float("nan")}


async def main(args: argparse.Namespace) -> dict:
    from core.cascade.llm import CACHE_MARKER, CACHE_NAME, convert_gguf
    from core.processors import create_backend

    proc = psutil.Process()
    data_dir = args.data_dir
    result: dict = {}
    cache = os.path.join(data_dir, "models", CACHE_NAME)
    if not os.path.exists(os.path.join(cache, CACHE_MARKER)):
        log("converting SmolLM2 GGUF once (~20-30 s)...")
        t = time.perf_counter()
        from pathlib import Path

        await asyncio.to_thread(convert_gguf, Path(cache), log)
        result["convert_s"] = round(time.perf_counter() - t, 2)

    backend = create_backend("cascade", {"data_dir": data_dir})
    t = time.perf_counter()
    await asyncio.to_thread(
        backend.load, lambda p: log(f"  loading: {p.stage:8s} {p.fraction * 100:3.0f}% {p.detail}")
    )
    result["cold_start_s"] = round(time.perf_counter() - t, 2)
    result["load_stages_s"] = {k: round(v, 2) for k, v in backend.load_seconds.items()}
    rss = [proc.memory_info().rss / 2**20]

    text_runs, spoken_runs = [], []
    other = args.compare_instructions
    other_text, other_spoken = [], []
    for i in range(args.runs):  # with --compare-instructions the two prompts alternate run by run
        r = await text_run(backend, TEXT_PROMPTS[i % len(TEXT_PROMPTS)])
        text_runs.append(r)
        rss.append(proc.memory_info().rss / 2**20)
        log(f"  text {i + 1}/{args.runs}: ttfp {r['ttfp_ms']:.0f} ms")
        if other:
            other_text.append(await text_run(backend, TEXT_PROMPTS[i % len(TEXT_PROMPTS)], other))
            log(f"  text {i + 1}/{args.runs} (compared prompt): ttfp {other_text[-1]['ttfp_ms']:.0f} ms")
    for i in range(args.runs):
        r = await spoken_run(backend, SPOKEN_PROMPTS[i % len(SPOKEN_PROMPTS)])
        spoken_runs.append(r)
        rss.append(proc.memory_info().rss / 2**20)
        log(f"  spoken {i + 1}/{args.runs}: v2v {r['v2v_ms']:.0f} ms")
        if other:
            other_spoken.append(await spoken_run(backend, SPOKEN_PROMPTS[i % len(SPOKEN_PROMPTS)], other))
            log(f"  spoken {i + 1}/{args.runs} (compared prompt): v2v {other_spoken[-1]['v2v_ms']:.0f} ms")
    if other:
        result["compared"] = {key: summary([r[key] for r in other_text]) for key in ("ttft_ms", "ttfp_ms", "rtf", "e2e_ms")}
        result["compared"].update({key: summary([r[key] for r in other_spoken]) for key in ("v2v_ms", "v2v_from_voice_ms")})
    cancels = [await cancel_run(backend) for _ in range(max(1, args.runs // 3))]

    for key in ("ttft_ms", "ttfp_ms", "rtf", "e2e_ms"):
        result[key] = summary([r[key] for r in text_runs])
    for key in ("v2v_ms", "v2v_from_voice_ms"):
        result[key] = summary([r[key] for r in spoken_runs])
    result["speculative_hit_rate"] = round(float(np.mean([r["speculative_hit"] for r in spoken_runs])), 2)
    result["cancel_stop_ms"] = summary([c["cancel_stop_ms"] for c in cancels])
    result["rss_mb"] = summary(rss)
    result["rss_mb"]["max"] = round(max(rss), 1)
    result["machine"] = {"cpus": os.cpu_count(), "runs": args.runs}
    backend.close()
    return result


# Goals on the median (docs/benchmarks.md, "Embedded pipeline"): result key -> (limit, as it reads)
GOALS = {"ttfp_ms": (250, "<= 250 ms"), "rtf": (0.3, "<= 0.3"), "v2v_ms": (400, "<= 400 ms"),
         "rss_mb": (2048, "<= 2 GiB")}
COLD_START_GOAL_S = 10


def table(result: dict) -> str:
    rows = [
        ("TTFT (text prompt)", "ttft_ms", "ms"),
        ("TTFP (text prompt)", "ttfp_ms", "ms"),
        ("RTF", "rtf", ""),
        ("E2E (text prompt)", "e2e_ms", "ms"),
        ("V2V (speech_stopped -> audio)", "v2v_ms", "ms"),
        ("V2V from last voiced sample", "v2v_from_voice_ms", "ms"),
        ("cancel -> generation stopped", "cancel_stop_ms", "ms"),
        ("RSS", "rss_mb", "MB"),
    ]
    other = result.get("compared")
    if other:
        lines = ["| metric | median | p90 | compared prompt: median | p90 | median ratio | goal (median) |",
                 "|---|---|---|---|---|---|---|"]
    else:
        lines = ["| metric | median | p90 | goal (median) |", "|---|---|---|---|"]
    for label, key, unit in rows:
        s = result[key]
        line = f"| {label} | {s['p50']:.2f} {unit} | {s['p90']:.2f} {unit} |"
        if other:
            o = other.get(key)
            line += (f" {o['p50']:.2f} {unit} | {o['p90']:.2f} {unit} | {s['p50'] / o['p50']:.2f} |" if o
                     else " | | |")
        line += f" {goal_mark(s['p50'], *GOALS[key])} |" if key in GOALS else " |"
        lines.append(line)
    cold = goal_mark(result["cold_start_s"], COLD_START_GOAL_S, f"<= {COLD_START_GOAL_S} s")
    lines.append(f"| cold start from cache | {result['cold_start_s']:.2f} s | |{' | | |' if other else ''} {cold} |")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs per kind (default 10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--compare-instructions", metavar="TEXT",
                        help="also run every text and spoken prompt under this system prompt, alternating with "
                             "the default one, and print both (e.g. an old prompt against the new default)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    result = asyncio.run(main(args))
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    cli()
