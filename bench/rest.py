"""Chat completions with audio through the REST API, at several concurrency levels.

    python -m bench rest --concurrency 1 2 4            # starts workers + gateway, prints a table
    python -m bench rest --url http://127.0.0.1:8006    # targets a running gateway
    python -m bench rest --json                         # one JSON object (also: python -m bench.rest)

Each request is ``POST /v1/chat/completions`` with ``stream: true``, ``modalities: ["text",
"audio"]`` and ``audio.format: "pcm16"``, a one-sentence question, timed at the client from the
moment the request is sent (metric definitions: DESIGN.md, same as seeds/001):
TTFT = first text delta, TTFP = first audio delta, E2E = ``[DONE]``,
RTF = (last audio delta - start) / seconds of audio, TPOT = (E2E - TTFT) / (completion tokens - 1),
ITL = mean gap between text deltas. Queue is the time the request waited for a worker
(``x-omniduplex-queued-ms``); it is inside TTFT/TTFP/E2E, as a client sees it, and shown apart
(with TTFP minus queue: the service's own time to first audio).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import httpx

from bench.launch import Launched
from bench.pipeline import TEXT_PROMPTS
from bench.stats import summary

MODEL = "omniduplex-cascade"
KEYS = ("e2e_ms", "ttft_ms", "tpot_ms", "ttfp_ms", "rtf", "itl_ms", "queue_ms")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def one_request(http: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> dict[str, float]:
    body = {
        "model": MODEL, "messages": [{"role": "user", "content": prompt}], "stream": True,
        "stream_options": {"include_usage": True}, "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "pcm16"}, "max_completion_tokens": max_tokens,
    }
    text_times: list[float] = []
    first_audio = last_audio = end = None
    audio_bytes = 0
    tokens = 0
    start = time.perf_counter()
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        queue_ms = float(r.headers.get("x-omniduplex-queued-ms", "nan"))
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            now = time.perf_counter()
            data = line[6:]
            if data == "[DONE]":
                end = now
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            if chunk.get("usage") and not chunk.get("choices"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                audio = choice["delta"].get("audio") or {}
                if audio.get("transcript"):
                    text_times.append(now)
                if audio.get("data"):
                    first_audio = first_audio or now
                    last_audio = now
                    audio_bytes += len(base64.b64decode(audio["data"]))
    if end is None or first_audio is None or not text_times:
        raise RuntimeError("incomplete stream")
    audio_s = audio_bytes / 2 / 24000
    gaps = [b - a for a, b in itertools.pairwise(text_times)]
    return {
        "e2e_ms": (end - start) * 1000,
        "ttft_ms": (text_times[0] - start) * 1000,
        "tpot_ms": (end - text_times[0]) * 1000 / max(1, tokens - 1),
        "ttfp_ms": (first_audio - start) * 1000,
        "rtf": (last_audio - start) / audio_s,
        "itl_ms": sum(gaps) / len(gaps) * 1000 if gaps else float("nan"),
        "queue_ms": queue_ms,
        "audio_s": audio_s,
        "tokens": float(tokens),
    }


async def level(url: str, concurrency: int, prompts: int, max_tokens: int) -> dict:
    gate = asyncio.Semaphore(concurrency)
    results: list[dict[str, float]] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0),
                                 limits=httpx.Limits(max_connections=concurrency + 2)) as http:

        async def run(i: int) -> None:
            async with gate:
                r = await one_request(http, url, TEXT_PROMPTS[i % len(TEXT_PROMPTS)], max_tokens)
                results.append(r)
                log(f"  c={concurrency} {len(results)}/{prompts}: ttfp {r['ttfp_ms']:.0f} ms, "
                    f"queue {r['queue_ms']:.0f} ms, e2e {r['e2e_ms']:.0f} ms")

        started = time.perf_counter()
        await asyncio.gather(*(run(i) for i in range(prompts)))
        wall = time.perf_counter() - started
    out = {key: summary([r[key] for r in results]) for key in KEYS}
    out["ttfp_after_queue_ms"] = summary([r["ttfp_ms"] - r["queue_ms"] for r in results])
    out["audio_s"] = summary([r["audio_s"] for r in results])
    out["tokens"] = summary([r["tokens"] for r in results])
    out["requests_per_min"] = round(prompts / wall * 60, 2)
    return {"concurrency": concurrency, "prompts": prompts, **out}


def machine() -> str:
    cpu = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} vCPUs ({cpu}), Python {platform.python_version()}"


def table(result: dict) -> str:
    head = ("| Input | Output | Workers | Max_Concurrency | Prompts | Mean E2E | Mean TTFT | Mean TPOT | Mean TTFP "
            "| Mean RTF | Mean ITL | Mean Queue | Mean TTFP after queue |")
    lines = [head, "|" + "---|" * 13]
    for lv in result["levels"]:
        m = {k: lv[k]["mean"] for k in KEYS}
        lines.append(
            f"| text ~8 words | text <= {result['max_tokens']} tok + audio | {result['workers']} "
            f"| {lv['concurrency']} | {lv['prompts']} | {m['e2e_ms']:.2f} | {m['ttft_ms']:.2f} | {m['tpot_ms']:.2f} "
            f"| {m['ttfp_ms']:.2f} | {m['rtf']:.2f} | {m['itl_ms']:.2f} | {m['queue_ms']:.2f} "
            f"| {lv['ttfp_after_queue_ms']['mean']:.2f} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict:
    stack = None
    url = args.url
    if url is None:
        log(f"starting {args.workers} worker(s) and a gateway...")  # real processes on free ports
        stack = Launched(Path(tempfile.mkdtemp(prefix="bench-rest-")), workers=args.workers,
                         queue={"capacity": 1000})
        url = stack.url
    try:
        if stack is not None:
            stack.wait_ready()
        async with httpx.AsyncClient(timeout=120) as http:  # warm-up: first-call costs stay out
            for _ in range(max(1, args.workers)):
                await one_request(http, url, "Say hello.", 12)
        levels = []
        for c in args.concurrency:
            levels.append(await level(url, c, args.prompts, args.max_tokens))
        if stack is not None:
            workers = args.workers
        else:
            async with httpx.AsyncClient(timeout=10) as http:
                workers = (await http.get(f"{url}/health")).json()["workers_total"]
        return {"levels": levels, "workers": workers, "max_tokens": args.max_tokens, "machine": machine()}
    finally:
        if stack is not None:
            stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--prompts", type=int, default=12, help="requests per concurrency level (default 12)")
    parser.add_argument("--max-tokens", type=int, default=100, help="max_completion_tokens per request")
    parser.add_argument("--workers", type=int, default=1, help="workers to start (ignored with --url)")
    parser.add_argument("--url", help="a running gateway instead of starting one")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if min(args.concurrency) < 1 or args.prompts < 1:
        parser.error("--concurrency and --prompts must be at least 1")
    # SIGTERM ends like Ctrl-C, so the workers and gateway this run started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = asyncio.run(run(args))
    print(json.dumps(result) if args.json else f"{table(result)}\n\nmachine: {result['machine']}")


if __name__ == "__main__":
    main()
