"""The transport part: one-way latency in and out, a WebSocket session and a call at once, against
``bench/synthetic_worker.py --probe`` (no model)."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.calls.client import BenchCall, make_tracks
from bench.calls.common import RATE, WS_CHUNK_S, loadavg
from bench.launch import Launched
from bench.stats import median_spread, summary


PROBE_PERIOD_S = 0.49  # a burst every 0.49 s: its onset falls anywhere in a 20 or 40 ms chunk
PROBE_LOUD = 3000  # bench/synthetic_worker.py's LOUD


def probe_pattern(seconds: float) -> tuple[np.ndarray, list[int]]:
    """Quiet with a 100 ms voiced burst every PROBE_PERIOD_S; the index of each burst's first loud sample."""
    from bench.synthetic_worker import voiced_deltas

    burst = np.frombuffer(base64.b64decode(voiced_deltas()[0]), dtype="<i2")
    period = int(PROBE_PERIOD_S * RATE)
    pcm = np.zeros(int(seconds * RATE) + period, "<i2")
    onsets = []
    for start in range(period - burst.size, int(seconds * RATE), period):
        pcm[start:start + burst.size] = burst
        onsets.append(start + int(np.flatnonzero(np.abs(burst.astype(np.int32)) > PROBE_LOUD)[0]))
    return pcm, onsets


def one_way(sent: list[float], got: list[float], window: float = PROBE_PERIOD_S) -> list[float]:
    """For each time in ``sent``, ms to the first in ``got`` at or after it (within ``window`` s)."""
    out, j = [], 0
    got = sorted(got)
    for t in sorted(sent):
        while j < len(got) and got[j] < t:
            j += 1
        if j < len(got) and got[j] - t <= window:
            out.append(round((got[j] - t) * 1000, 2))
    return out


async def ws_probe(ws_url: str, pcm: np.ndarray, onsets: list[int]) -> dict[str, list[float]]:
    import websockets

    step = int(WS_CHUNK_S * RATE)
    heard: list[float] = []
    sent: list[float] = []
    first_delta: dict[str, float] = {}
    async with websockets.connect(ws_url, max_size=None, compression=None, ping_interval=None) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        t0 = time.monotonic()

        async def send() -> None:
            for i in range(0, pcm.size, step):
                await asyncio.sleep(max(0.0, t0 + (i + step) / RATE - time.monotonic()))
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(pcm[i:i + step].tobytes()).decode()}))

        sender = asyncio.create_task(send())
        try:
            while not sender.done():
                try:
                    ev = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                except TimeoutError:
                    continue
                now = time.monotonic()
                if ev["type"] == "bench.heard":
                    heard.append(ev["t"])
                elif ev["type"] == "bench.sent":
                    sent.append(ev["t"])
                elif ev["type"] == "response.output_audio.delta":
                    first_delta.setdefault(ev["response_id"], now)
        finally:
            sender.cancel()
    spoken = [t0 + i / RATE for i in onsets]
    return {"in": one_way(spoken, heard), "out": one_way(sent, list(first_delta.values()))}


async def rtc_probe(base_url: str, pcm: np.ndarray, onsets: list[int]) -> dict[str, list[float]]:
    SpeechMic, _ = make_tracks()
    mic = SpeechMic()
    call = BenchCall(base_url, mic)
    try:
        await call.connect()
        await call.until("session.created", timeout=30)
        mic.say(pcm.tobytes())
        await asyncio.sleep(pcm.size / RATE + 0.3)
        spoken = [mic.speech_t0 + i / RATE for i in onsets]
        heard = [e["t"] for _, e in call.events if e["type"] == "bench.heard"]
        sent = [e["t"] for _, e in call.events if e["type"] == "bench.sent"]
        track = [t for t, reply in call.frames if reply]
        return {"in": one_way(spoken, heard), "out_wire": one_way(sent, [t for t, _ in call.wire]),
                "out": one_way(sent, track)}
    finally:
        await call.hangup()
        await call.close()


def part_transport(seconds: float, runs: int, log) -> dict[str, Any]:
    """One-way latencies, mouth -> worker and worker -> ear, for both transports at once, against the
    synthetic worker's probes (no model: the transports alone); ``runs`` times on one stack."""
    from launcher.processes import free_port, spawn_module, stop

    pcm, onsets = probe_pattern(seconds)
    port = free_port()
    result: dict[str, Any] = {"seconds": seconds, "loadavg_start": loadavg(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        worker = spawn_module("bench.synthetic_worker", "--port", str(port), "--probe", "--slots", "2",
                              log=Path(tmp) / "synthetic.log")
        try:
            with Launched(Path(tmp), workers=0, worker_urls=[f"http://127.0.0.1:{port}"], slots=2,
                          recording={"enabled": False},
                          auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
                launched.wait_gateway("gateway")

                async def go() -> None:
                    await rtc_probe(launched.url, pcm[: RATE], onsets[:1])  # warm-up: aiortc's import
                    for _ in range(runs):
                        la = loadavg()
                        ws, rtc = await asyncio.gather(ws_probe(launched.ws_url + "?record=false", pcm, onsets),
                                                       rtc_probe(launched.url, pcm, onsets))
                        run = {"loadavg_start": la,
                               "websocket": {"in_ms": summary(ws["in"]), "out_ms": summary(ws["out"])},
                               "webrtc": {"in_ms": summary(rtc["in"]), "out_wire_ms": summary(rtc["out_wire"]),
                                          "out_ms": summary(rtc["out"])}}
                        w, c = run["websocket"], run["webrtc"]
                        d_in = c["in_ms"]["p50"] - w["in_ms"]["p50"]
                        d_out = c["out_ms"]["p50"] - w["out_ms"]["p50"]
                        d_wire = c["out_wire_ms"]["p50"] - w["out_ms"]["p50"]
                        run["added_p50_ms"] = {"in": round(d_in, 1), "out": round(d_out, 1),
                                               "out_wire": round(d_wire, 1), "turn": round(d_in + d_out, 1),
                                               "turn_wire": round(d_in + d_wire, 1)}
                        result["runs"].append(run)
                        a = run["added_p50_ms"]
                        log(f"  transport: in WS {w['in_ms']['p50']} / RTC {c['in_ms']['p50']} ms, out WS "
                            f"{w['out_ms']['p50']} / RTC wire {c['out_wire_ms']['p50']} / track {c['out_ms']['p50']}"
                            f" ms: a turn +{a['turn']} ms (+{a['turn_wire']} at the wire)")

                asyncio.run(go())
        finally:
            stop(worker)
    result["loadavg_end"] = loadavg()
    keys = {"websocket": ("in_ms", "out_ms"), "webrtc": ("in_ms", "out_wire_ms", "out_ms")}
    for t, legs in keys.items():  # each figure: the median of the runs' p50 / p90 (with spread)
        result[t] = {leg: {q: median_spread([round(run[t][leg][q], 1) for run in result["runs"]]) for q in ("p50", "p90")}
                     | {"n": sum(run[t][leg]["n"] for run in result["runs"])} for leg in legs}
    result["added_p50_ms"] = {k: median_spread([run["added_p50_ms"][k] for run in result["runs"]])
                              for k in ("in", "out", "out_wire", "turn", "turn_wire")}
    return result
