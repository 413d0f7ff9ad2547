"""A synthetic worker: a TEST DOUBLE used only by benchmarks (never on a product path).

It answers ``/health`` like a ready worker and, on ``/ws/realtime``, sends ``session.created`` and
then audio deltas of 100 ms of 24 kHz PCM16 (the size the real worker sends), so the gateway, not a
model, is what is measured:

- default (``bench throughput``): silent deltas as fast as the socket takes them, ``--events`` of
  them, then ``response.done`` and a normal close;
- ``--paced`` (``bench calls``): one endless reply per session in real time (a short lead sent at
  once, as a TTS ahead of the listener, then one delta every 100 ms on a monotonic schedule) of a
  voiced, amplitude-modulated tone (so the gateway's Opus encoder has real work), while everything
  the client sends is read and dropped; until the session closes. Reports ``--slots`` on /health;
- ``--probe`` (``bench calls``' transport part): one-way latencies without a model. In: each onset
  of loud audio in the client's appends (after >= 100 ms of quiet) is answered with a
  ``bench.heard`` event carrying when the chunk holding it arrived (``time.monotonic()``: one clock
  on one machine). Out: every 0.5 s a reply of one 100 ms voiced delta (``response.created``, the
  delta, ``response.done``), then ``bench.sent`` with when the delta was sent.

``python -m bench.synthetic_worker --port P [--events N | --paced --slots S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import math
import time

import uvicorn
from fastapi import FastAPI, WebSocket

from core.audio_frames import MEDIA_FRAMES, MEDIA_PARAM, read_mic_frame, reply_frame

DELTA = base64.b64encode(bytes(4800)).decode()  # 100 ms of 24 kHz PCM16 silence
RATE = 24000
DELTA_S = 0.1
LEAD_DELTAS = 3  # paced: 300 ms ahead of real time, then real time


def voiced_deltas(seconds: int = 1) -> list[str]:
    """``seconds`` of a 150 Hz voice-like tone (harmonics, 4 Hz syllable envelope) as base64 100 ms deltas."""
    n = RATE * seconds
    out = bytearray()
    for i in range(n):
        t = i / RATE
        env = 0.55 + 0.45 * math.sin(2 * math.pi * 4 * t)
        v = sum(math.sin(2 * math.pi * 150 * k * t) / k for k in (1, 2, 3, 5))
        out += int(max(-32767, min(32767, 6000 * env * v))).to_bytes(2, "little", signed=True)
    step = int(RATE * DELTA_S) * 2
    return [base64.b64encode(bytes(out[i:i + step])).decode() for i in range(0, len(out), step)]


def create_app(events: int, paced: bool = False, slots: int = 1, probe: bool = False) -> FastAPI:
    app = FastAPI(title="synthetic worker (benchmark test double)")
    voiced = voiced_deltas() if paced or probe else []
    sessions = itertools.count(1)

    @app.get("/health")
    async def health() -> dict:
        return {"worker_id": "synthetic", "state": "IDLE", "model_loaded": True, "slots": slots, "active_sessions": 0,
                "capabilities": ["audio_input", "audio_output", "duplex", "text_output"], "backend": "synthetic"}

    @app.websocket("/ws/realtime")
    async def realtime(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(json.dumps({"type": "session.created", "session": {"id": "synthetic"}}))
        # A call's gateway sends and takes audio as binary frames, as the real worker then does.
        framed = ws.query_params.get(MEDIA_PARAM) == MEDIA_FRAMES
        if paced:
            await _paced(ws, voiced, next(sessions), framed)
            return
        if probe:
            await _probe(ws, voiced[0], next(sessions), framed)
            return
        frame = json.dumps({"type": "response.output_audio.delta", "response_id": "resp_x", "item_id": "item_x",
                            "output_index": 0, "content_index": 0, "delta": DELTA}, separators=(",", ":"))
        for _ in range(events):
            await ws.send_text(frame)
        await ws.send_text(json.dumps({"type": "response.done", "response": {"status": "completed"}}))
        await ws.close(1000)

    return app


def _audio_out(rid: str, iid: str, delta: str, framed: bool) -> str | bytes:
    """A reply's audio delta as the real worker sends it: a binary frame to a call's gateway."""
    if framed:
        return reply_frame(rid, iid, base64.b64decode(delta), RATE)
    return json.dumps({"type": "response.output_audio.delta", "response_id": rid, "item_id": iid, "output_index": 0,
                       "content_index": 0, "delta": delta}, separators=(",", ":"))


async def _send(ws: WebSocket, message: str | bytes) -> None:
    await (ws.send_bytes(message) if isinstance(message, bytes) else ws.send_text(message))


async def _paced(ws: WebSocket, voiced: list[str], n: int, framed: bool) -> None:
    rid, iid = f"resp_synth{n}", f"item_synth{n}"

    async def drain() -> None:
        while True:
            msg = await ws.receive()
            if msg.get("type") == "websocket.disconnect":
                return

    reader = asyncio.create_task(drain())
    frames = [_audio_out(rid, iid, d, framed) for d in voiced]
    try:
        await ws.send_text(json.dumps({"type": "response.created", "response": {
            "id": rid, "object": "realtime.response", "status": "in_progress", "output": []}}))
        t0 = time.monotonic()
        for k in itertools.count():
            due = t0 + max(0, k - LEAD_DELTAS) * DELTA_S
            wait = due - time.monotonic()
            if wait > 0:
                done, _ = await asyncio.wait({reader}, timeout=wait)
                if done:
                    return
            elif reader.done():
                return
            await _send(ws, frames[k % len(frames)])
    except Exception:  # noqa: BLE001 - the gateway closed the session: the reply ends with it
        return
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader


PROBE_EVERY_S = 0.5
LOUD = 3000  # |sample| above this is "loud"
QUIET_S = 0.1  # an onset follows at least this much quiet


async def _probe(ws: WebSocket, delta: str, n: int, framed: bool) -> None:
    import numpy as np

    quiet = QUIET_S * RATE  # samples of quiet so far (an onset is possible from the start)

    async def hear() -> None:
        nonlocal quiet
        while True:
            msg = await ws.receive()
            if msg.get("type") == "websocket.disconnect":
                return
            now = time.monotonic()
            if msg.get("bytes"):  # a call's microphone frame
                pcm = np.frombuffer(read_mic_frame(msg["bytes"])[0], dtype="<i2")
            else:
                try:
                    event = json.loads(msg.get("text") or "{}")
                except ValueError:
                    continue
                if event.get("type") != "input_audio_buffer.append":
                    continue
                pcm = np.frombuffer(base64.b64decode(event.get("audio", "")), dtype="<i2")
            loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > LOUD)
            if loud.size and quiet + loud[0] >= QUIET_S * RATE:
                await ws.send_text(json.dumps({"type": "bench.heard", "t": now}))
            quiet = pcm.size - 1 - loud[-1] if loud.size else quiet + pcm.size

    listener = asyncio.create_task(hear())
    try:
        for k in itertools.count():
            done, _ = await asyncio.wait({listener}, timeout=PROBE_EVERY_S)
            if done:
                return
            rid = f"resp_probe{n}_{k}"
            await ws.send_text(json.dumps({"type": "response.created", "response": {
                "id": rid, "object": "realtime.response", "status": "in_progress", "output": []}}))
            frame = _audio_out(rid, f"item_probe{n}_{k}", delta, framed)
            sent = time.monotonic()
            await _send(ws, frame)
            await ws.send_text(json.dumps({"type": "response.done", "response": {
                "id": rid, "object": "realtime.response", "status": "completed", "output": []}}))
            await ws.send_text(json.dumps({"type": "bench.sent", "t": sent, "response_id": rid}))
    except Exception:  # noqa: BLE001 - the gateway closed the session
        return
    finally:
        listener.cancel()
        with contextlib.suppress(BaseException):
            await listener


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.synthetic_worker")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--paced", action="store_true", help="one endless reply per session, in real time")
    parser.add_argument("--probe", action="store_true", help="one-way latency probes, in and out")
    parser.add_argument("--slots", type=int, default=1, help="what /health reports")
    args = parser.parse_args()
    uvicorn.run(create_app(args.events, args.paced, args.slots, args.probe), host="127.0.0.1", port=args.port,
                log_level="warning", ws="websockets-sansio", ws_per_message_deflate=False)


if __name__ == "__main__":
    main()
