"""Cost of OpenTelemetry tracing (issue 36): a turn with tracing on versus off, side by side.

    python -m bench tracing                 # both parts, 3 runs each
    python -m bench tracing --runs 5 --prompts 10

Two parts, each repeated ``--runs`` times (median and spread over the runs), on and off alternating
so that drift in machine load hits both alike:

- ``hook``: what tracing adds to one turn inside the worker, in-process: the ``turn`` span and
  its stage children built from a reply's metrics (``worker/tracing.py``), with the real SDK,
  ``BatchSpanProcessor`` and OTLP/HTTP exporter sending to a local receiver; off, the hook is
  not installed and what remains is the ``telemetry.enabled()`` check. Also the gateway's and
  the worker's per-session spans (start, ``traceparent``, end), once per session.
- ``e2e``: typed turns (text out, 8 tokens) through a real gateway and cascade worker, one stack
  with ``telemetry.otlp_endpoint`` set to a local OTLP/HTTP receiver and one without, a session
  open on each; every prompt goes to both, one after the other (order alternating), and the
  figure is the median of the paired differences: the client's time from ``response.create``
  to ``response.done``, and the worker's ``e2e_ms``.

Goal: at most +1 ms p50 per turn with tracing on.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.stats import goal_mark, median_spread  # noqa: E402

GOAL_MS = 1.0  # at most this much added to a turn's p50 with tracing on
HOOK_TURNS = 2000
PROMPTS = ["What is the capital of France?", "What colour is coal?", "Which animal says meow?",
           "Name a yellow fruit.", "Say goodbye in Italian."]  # latency only; dev items or in no set
METRICS = {"response_id": "resp_bench", "ttft_ms": 180.2, "ttfp_ms": 260.4, "v2v_ms": 590.1, "e2e_ms": 1400.0,
           "audio_ms": 2100.0, "status": "completed", "interrupted": False, "start_epoch": 0.0,
           "stages": {"end_of_turn_ms": 210.0, "asr_ms": 120.5, "llm_ms": 180.2, "tts_ms": 80.2}}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Receiver:
    """A local OTLP/HTTP collector that counts the spans it is sent (POST /v1/traces, protobuf)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        counts = self.counts = {"posts": 0, "spans": 0}

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                request = ExportTraceServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers.get("content-length") or 0)))
                counts["posts"] += 1
                counts["spans"] += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- hook (in-process)


def _hook_run(on: bool, turns: int, endpoint: str) -> dict[str, float]:
    """µs per turn (p50, p90) for the worker's turn hook, and µs per session for the session spans."""
    from core import telemetry
    from core.config import TelemetryConfig
    from worker.tracing import SessionTrace

    if on:
        telemetry.setup(TelemetryConfig(otlp_endpoint=endpoint), "bench")
    per_turn: list[float] = []
    per_session: list[float] = []
    try:
        for s in range(turns // 20):
            t0 = time.perf_counter()
            trace = gw = None
            if telemetry.enabled():
                gw = telemetry.start_span("realtime.session", server=True, attributes={"gen_ai.system": "omniduplex"})
                trace = SessionTrace(telemetry.trace_headers(gw), "cascade", "omniduplex-cascade", f"sess_{s}", "w0")
            per_session.append((time.perf_counter() - t0) * 1e6)
            for _ in range(20):
                m = {**METRICS, "start_epoch": time.time() - 1.4}
                t0 = time.perf_counter()
                if trace is not None:  # off: no hook chained (worker/app.py)
                    trace.turn(m)
                elif telemetry.enabled():
                    raise AssertionError("unreachable")
                per_turn.append((time.perf_counter() - t0) * 1e6)
            t0 = time.perf_counter()
            if trace is not None:
                trace.end("client", 1000)
                telemetry.end_span(gw, {"omniduplex.end_reason": "client"})
            per_session[-1] += (time.perf_counter() - t0) * 1e6
            if telemetry._provider is not None:  # real turns are seconds apart: let the batch go out (untimed)
                telemetry._provider.force_flush()
    finally:
        telemetry.shutdown()
    q = statistics.quantiles(per_turn, n=10)
    return {"turn_p50_us": round(statistics.median(per_turn), 2), "turn_p90_us": round(q[8], 2),
            "session_p50_us": round(statistics.median(per_session), 2)}


def run_hook(runs: int, turns: int, receiver: Receiver) -> dict[str, Any]:
    out: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for i in range(runs):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            r = _hook_run(on, turns, receiver.url)
            out["on" if on else "off"].append(r)
            log(f"hook run {i + 1}/{runs} {'on ' if on else 'off'} {r}")
    keys = ("turn_p50_us", "turn_p90_us", "session_p50_us")
    return {side: {k: median_spread([r[k] for r in rs]) for k in keys} for side, rs in out.items()}


# ---------------------------------------------------------------- e2e (real gateway and worker)


class _Session:
    """One realtime session, turn-based, text out."""

    def __init__(self, ws) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, ws_url: str) -> _Session:
        import websockets

        s = cls(await websockets.connect(ws_url, max_size=None))
        await s.until("session.created")
        await s.ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}}}}))
        await s.until("session.updated")
        return s

    async def until(self, kind: str) -> dict:
        while True:
            ev = json.loads(await asyncio.wait_for(self.ws.recv(), 120))
            if ev["type"] == kind:
                return ev
            if ev["type"] == "error":
                raise RuntimeError(ev["error"])

    async def turn(self, prompt: str) -> tuple[float, float]:
        """(client ms from response.create to response.done, the worker's e2e_ms)."""
        await self.ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
        await self.until("conversation.item.added")
        t0 = time.perf_counter()
        await self.ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 8}}))
        await self.until("response.done")
        client = (time.perf_counter() - t0) * 1000
        return client, (await self.until("session.metrics"))["metrics"]["e2e_ms"]


async def _paired_run(urls: dict[str, str], prompts: list[str], flip: bool) -> dict[str, dict[str, list[float]]]:
    """A session on each stack at once; each prompt goes to both, one turn after the other (the
    order alternating), so a load spike from elsewhere lands on both sides of a pair."""
    sessions = {side: await _Session.open(url) for side, url in urls.items()}
    out: dict[str, dict[str, list[float]]] = {side: {"client": [], "worker": []} for side in urls}
    try:
        for n, prompt in enumerate(prompts):
            order = ("on", "off") if (n % 2 == 0) != flip else ("off", "on")
            for side in order:
                client, worker = await sessions[side].turn(prompt)
                out[side]["client"].append(client)
                out[side]["worker"].append(worker)
    finally:
        for s in sessions.values():
            await s.ws.close()
    return out


def run_e2e(runs: int, prompts: int, receiver: Receiver) -> dict[str, Any]:
    from bench.launch import Launched

    common = {"recording": {"enabled": False}, "auth": {"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}}
    texts = [PROMPTS[i % len(PROMPTS)] for i in range(prompts)]
    figures: dict[str, dict[str, list[float]]] = {side: {"client": [], "worker": []} for side in ("on", "off")}
    deltas: dict[str, list[float]] = {"client": [], "worker": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp) / "on", telemetry={"otlp_endpoint": receiver.url}, **common) as on, \
                Launched(Path(tmp) / "off", **common) as off:
            on.wait_ready()
            off.wait_ready()
            urls = {side: s.ws_url + "?model=omniduplex-cascade&record=false&app=bench&extensions=session.metrics"
                    for side, s in (("on", on), ("off", off))}
            asyncio.run(_paired_run(urls, texts[:2], False))  # warm-up, not counted
            for i in range(runs):
                out = asyncio.run(_paired_run(urls, texts, i % 2 == 1))
                for side in out:
                    for k in ("client", "worker"):
                        figures[side][k].append(statistics.median(out[side][k]))
                for k in ("client", "worker"):  # the median of the per-prompt differences
                    deltas[k].append(statistics.median(a - b for a, b in zip(out["on"][k], out["off"][k], strict=True)))
                log(f"e2e run {i + 1}/{runs}: client p50 on {figures['on']['client'][-1]:.1f} / off "
                    f"{figures['off']['client'][-1]:.1f} ms, paired difference p50 {deltas['client'][-1]:+.1f} ms; "
                    f"worker e2e p50 on {figures['on']['worker'][-1]:.1f} / off {figures['off']['worker'][-1]:.1f} ms")
    return {side: {k: median_spread([round(v, 1) for v in vs]) for k, vs in f.items()}
            for side, f in figures.items()} | {
        "delta": {k: median_spread([round(v, 1) for v in vs]) for k, vs in deltas.items()},
        "spans_received": receiver.counts["spans"]}


# ---------------------------------------------------------------- entry points


def run_cli(args) -> dict[str, Any]:
    runs = args.runs or 3
    receiver = Receiver()
    try:
        result: dict[str, Any] = {"runs": runs, "hook_turns": HOOK_TURNS,
                                  "hook": run_hook(runs, HOOK_TURNS, receiver)}
        result["hook_spans_received"] = receiver.counts["spans"]
        receiver.counts["spans"] = 0  # the e2e part's own count
        result["e2e_prompts"] = args.prompts
        result["e2e"] = run_e2e(runs, args.prompts, receiver)
    finally:
        receiver.close()
    return result


def report(r: dict[str, Any]) -> str:
    h = r["hook"]
    added = h["on"]["turn_p50_us"]["median"] - h["off"]["turn_p50_us"]["median"]
    lines = [f"Worker turn hook, in-process ({r['hook_turns']} turns a run, {r['runs']} runs; median (min-max) "
             f"over runs; {r['hook_spans_received']} spans reached the receiver):", "",
             "| tracing | per turn p50 | per turn p90 | per session (gateway + worker session spans) |",
             "|---|---|---|---|"]
    for side in ("off", "on"):
        s = h[side]
        lines.append(f"| {side} | {s['turn_p50_us']['text']} µs | {s['turn_p90_us']['text']} µs | "
                     f"{s['session_p50_us']['text']} µs |")
    lines.append(f"| added | {added:.1f} µs | | {goal_mark(added / 1000, GOAL_MS, f'<= {GOAL_MS:g} ms p50 a turn')} |")
    e = r["e2e"]
    lines += ["", f"Typed turns through a real gateway and cascade worker ({r['e2e_prompts']} turns a run, text out, "
              f"8 tokens; p50 of each run, median (min-max) over {r['runs']} runs; "
              f"{e['spans_received']} spans reached the receiver):", "",
              "| tracing | client: response.create -> response.done | worker e2e_ms |", "|---|---|---|"]
    for side in ("off", "on"):
        lines.append(f"| {side} | {e[side]['client']['text']} ms | {e[side]['worker']['text']} ms |")
    d = e["delta"]
    lines.append(f"| on - off (p50 of the paired turns' differences) | {d['client']['text']} ms | "
                 f"{d['worker']['text']} ms |")
    return "\n".join(lines)
