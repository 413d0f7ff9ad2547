"""The V2V part: the same spoken prompts over a WebSocket session and over a call, alternating,
on a real gateway and cascade worker (the package's docstring has the clock and the legs)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.calls.client import BenchCall, make_tracks
from bench.calls.common import FRAME_S, LEAD_S, QUERY, RATE, TAIL_S, VOICED, WS_CHUNK_S, loadavg
from bench.launch import Launched
from bench.serving import MAX_TOKENS, SPOKEN_PROMPTS, continuity
from bench.stats import median_spread, summary


def last_voiced(pcm: np.ndarray) -> int:
    return int(np.flatnonzero(np.abs(pcm.astype(np.int32)) > VOICED)[-1])


async def ws_turn(ws_url: str, speech: np.ndarray) -> dict[str, Any]:
    """One spoken prompt over a fresh WebSocket session; times relative to the last voiced sample."""
    import websockets

    audio = np.concatenate([np.zeros(int(LEAD_S * RATE), "<i2"), speech, np.zeros(int(TAIL_S * RATE), "<i2")])
    lv = int(LEAD_S * RATE) + last_voiced(speech)
    step = int(WS_CHUNK_S * RATE)
    r: dict[str, Any] = {"transport": "websocket"}
    marks: dict[str, float] = {}
    async with websockets.connect(ws_url, max_size=None, compression=None, ping_interval=None,
                                  open_timeout=120) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), 120))["type"] != "session.created":
            pass
        await ws.send(json.dumps({"type": "session.update", "session": {"max_output_tokens": MAX_TOKENS}}))
        while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "session.updated":
            pass

        async def send() -> None:
            t0 = time.monotonic()
            marks["last_voiced"] = t0 + lv / RATE
            for i in range(0, audio.size, step):
                await asyncio.sleep(max(0.0, t0 + (i + step) / RATE - time.monotonic()))
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(audio[i:i + step].tobytes()).decode()}))

        sender = asyncio.create_task(send())
        times: dict[str, float] = {}
        audio_in: list[tuple[float, float]] = []
        try:
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 60))
                now = time.monotonic()
                kind = ev["type"]
                if kind in ("input_audio_buffer.speech_stopped", "response.created") and kind not in times:
                    times[kind] = now
                elif kind == "response.output_audio.delta":
                    audio_in.append((now, len(base64.b64decode(ev["delta"])) / 2 / RATE))
                elif kind == "response.done":
                    break
                elif kind == "error":
                    r.setdefault("errors", []).append(ev.get("error", {}).get("message"))
            with contextlib.suppress(TimeoutError):  # the worker's own figures follow response.done
                while (ev := json.loads(await asyncio.wait_for(ws.recv(), 5)))["type"] != "session.metrics":
                    pass
                r["worker_v2v_ms"] = ev["metrics"].get("v2v_ms")
        finally:
            sender.cancel()
    mark = marks["last_voiced"]
    r["v2v_ms"] = (audio_in[0][0] - mark) * 1000 if audio_in else None
    r["speech_stopped_ms"] = _rel(times.get("input_audio_buffer.speech_stopped"), mark)
    r["response_created_ms"] = _rel(times.get("response.created"), mark)
    r["underruns"], r["worst_late_ms"] = continuity(audio_in)
    r["audio_s"] = round(sum(d for _, d in audio_in), 2)
    return r


def _rel(t: float | None, mark: float) -> float | None:
    return None if t is None else round((t - mark) * 1000, 1)


async def rtc_turn(base_url: str, speech: np.ndarray) -> dict[str, Any]:
    """One spoken prompt over a fresh WebRTC call; times relative to the last voiced sample."""
    SpeechMic, _ = make_tracks()
    mic = SpeechMic()
    call = BenchCall(base_url, mic, QUERY)
    r: dict[str, Any] = {"transport": "webrtc"}
    try:
        await call.connect()
        r["connect_ms"] = round(call.connect_ms, 1)
        await call.until("session.created", timeout=120)
        t = time.monotonic()
        call.send({"type": "session.update", "session": {"max_output_tokens": MAX_TOKENS}})
        await call.until("session.updated", timeout=30, since=t)
        pcm = np.concatenate([np.zeros(int(LEAD_S * RATE), "<i2"), speech]).astype("<i2")
        mic.say(pcm.tobytes())
        t_say = time.monotonic()
        await call.until("response.done", timeout=60, since=t_say)
        with contextlib.suppress(TimeoutError):
            await call.until("session.metrics", timeout=5, since=t_say)
        with contextlib.suppress(TimeoutError):
            await call.until("output_audio_buffer.stopped", timeout=30, since=t_say)
        await asyncio.sleep(0.25)  # the last frames through the client's jitter buffer
        end = time.monotonic()
        mark = mic.speech_t0 + (int(LEAD_S * RATE) + last_voiced(speech)) / RATE
        first_frame = call.first_reply_frame(mark)
        first_wire = next((t for t, _ in call.wire if t >= mark), None)
        r["v2v_ms"] = _rel(first_frame, mark)
        r["v2v_wire_ms"] = _rel(first_wire, mark)
        r["speech_stopped_ms"] = _rel(call.first("input_audio_buffer.speech_stopped", mark), mark)
        r["response_created_ms"] = _rel(call.first("response.created", mark), mark)
        r["started_ms"] = _rel(call.first("output_audio_buffer.started", mark), mark)
        metrics = next((e["metrics"] for t, e in call.events if e["type"] == "session.metrics" and t >= t_say), {})
        r["worker_v2v_ms"] = metrics.get("v2v_ms")
        play = call.playout(mark, end)
        r.update(underruns=play["underruns"], worst_late_ms=play["worst_late_ms"], dry_frames=play["dry_frames"],
                 wire_underruns=play["wire_underruns"],
                 audio_s=round(play["reply_frames"] * FRAME_S, 2))
        errors = [e.get("error", {}).get("message") for _, e in call.events if e["type"] == "error"]
        if errors:
            r["errors"] = errors
    finally:
        await call.hangup()
        await call.close()
    return r


async def v2v_run(launched: Launched, speech: dict[str, np.ndarray], prompts: int, log) -> list[dict[str, Any]]:
    ws_url = launched.ws_url + QUERY
    turns = {"websocket": lambda s: ws_turn(ws_url, s), "webrtc": lambda s: rtc_turn(launched.url, s)}
    rows: list[dict[str, Any]] = []
    for i in range(prompts):
        text = SPOKEN_PROMPTS[i % len(SPOKEN_PROMPTS)]
        order = ["websocket", "webrtc"] if i % 2 == 0 else ["webrtc", "websocket"]
        for transport in order:
            try:
                row = await turns[transport](speech[text])
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                row = {"transport": transport, "error": repr(exc)[:300]}
            row["prompt"] = text
            rows.append(row)
            log(f"  {transport:9s} {text!r}: " + (f"error {row['error']}" if "error" in row else
                f"V2V {row['v2v_ms']} ms (wire {row.get('v2v_wire_ms', '-')}), speech_stopped "
                f"{row['speech_stopped_ms']}, created {row['response_created_ms']}, worker's V2V {row.get('worker_v2v_ms')}, "
                f"underruns {row['underruns']}"))
    return rows


V2V_KEYS = ("v2v_ms", "v2v_wire_ms", "speech_stopped_ms", "response_created_ms", "started_ms", "worker_v2v_ms",
            "v2v_less_worker_ms", "v2v_wire_less_worker_ms")


def v2v_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in rows:  # the turn less the model's own time (speech stopped -> first audio at the worker)
        if r.get("worker_v2v_ms") is not None:
            for key in ("v2v_ms", "v2v_wire_ms"):
                if r.get(key) is not None:
                    r[key.replace("_ms", "_less_worker_ms")] = round(r[key] - r["worker_v2v_ms"], 1)
    for transport in ("websocket", "webrtc"):
        mine = [r for r in rows if r["transport"] == transport]
        ok = [r for r in mine if "error" not in r and r.get("v2v_ms") is not None]
        s: dict[str, Any] = {"n": len(ok), "errors": len(mine) - len(ok),
                             "underruns": sum(r["underruns"] for r in ok),
                             "worst_late_ms": max((r["worst_late_ms"] for r in ok), default=0.0),
                             "dry_frames": sum(r.get("dry_frames", 0) for r in ok),
                             "wire_underruns": sum(r.get("wire_underruns", 0) for r in ok)}
        for key in V2V_KEYS:
            vals = [r[key] for r in ok if r.get(key) is not None]
            if vals:
                sm = summary(vals)
                s[key] = {"p50": sm["p50"], "p90": sm["p90"]}
        out[transport] = s
    ws, rtc = out["websocket"].get("v2v_ms"), out["webrtc"].get("v2v_ms")
    out["diff_p50_ms"] = round(rtc["p50"] - ws["p50"], 1) if ws and rtc else None
    wire = out["webrtc"].get("v2v_wire_ms")
    out["diff_wire_p50_ms"] = round(wire["p50"] - ws["p50"], 1) if ws and wire else None
    ws, rtc = out["websocket"].get("v2v_less_worker_ms"), out["webrtc"].get("v2v_less_worker_ms")
    out["diff_less_worker_p50_ms"] = round(rtc["p50"] - ws["p50"], 1) if ws and rtc else None
    wire = out["webrtc"].get("v2v_wire_less_worker_ms")
    out["diff_wire_less_worker_p50_ms"] = round(wire["p50"] - ws["p50"], 1) if ws and wire else None
    return out


def part_v2v(prompts: int, runs: int, log) -> dict[str, Any]:
    from core.cascade.tts import PiperTts

    tts = PiperTts()
    texts = [SPOKEN_PROMPTS[i % len(SPOKEN_PROMPTS)] for i in range(prompts)]
    speech = {p: np.frombuffer(b"".join(tts.synthesize(p, deterministic=True)), dtype="<i2") for p in set(texts)}
    del tts
    result: dict[str, Any] = {"prompts": prompts, "max_output_tokens": MAX_TOKENS, "runs": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()

            async def go() -> None:
                log("v2v warm-up (one turn per transport)")
                await v2v_run(launched, speech, 1, log)
                for k in range(runs):
                    la = loadavg()
                    log(f"v2v run {k + 1}/{runs}, load average {la}")
                    t0 = time.monotonic()
                    rows = await v2v_run(launched, speech, prompts, log)
                    result["runs"].append({"loadavg_start": la, "loadavg_end": loadavg(),
                                           "wall_s": round(time.monotonic() - t0, 1),
                                           "summary": v2v_summary(rows), "rows": rows})

            asyncio.run(go())
    runs_s = [r["summary"] for r in result["runs"]]

    def med(path: tuple[str, ...]) -> dict[str, Any]:
        vals = []
        for s in runs_s:
            v: Any = s
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            vals.append(v)
        return median_spread(vals)

    result["median"] = {
        "diff_p50_ms": med(("diff_p50_ms",)), "diff_wire_p50_ms": med(("diff_wire_p50_ms",)),
        "diff_less_worker_p50_ms": med(("diff_less_worker_p50_ms",)),
        "diff_wire_less_worker_p50_ms": med(("diff_wire_less_worker_p50_ms",)),
        **{f"{t}_{k}_{q}": med((t, k, q)) for t in ("websocket", "webrtc") for k in V2V_KEYS for q in ("p50", "p90")
           if any(k in s[t] for s in runs_s)},
        "underruns": {t: sum(s[t]["underruns"] for s in runs_s) for t in ("websocket", "webrtc")},
        "webrtc_wire_underruns": sum(s["webrtc"].get("wire_underruns", 0) for s in runs_s),
        "webrtc_dry_frames": sum(s["webrtc"].get("dry_frames", 0) for s in runs_s),
    }
    return result
