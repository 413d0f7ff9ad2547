"""The bench's WebSocket client for the load part's sessions: what our pages send (40 ms PCM16
``input_audio_buffer.append`` events, in real time) and the reply's deltas timed as they arrive;
the same face as ``client.BenchCall`` (connect, until, first_reply_frame, playout, hangup, close)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from typing import Any

from bench.calls.common import RATE, WS_CHUNK_S, EventLog
from bench.serving import continuity


def appends(pcm: bytes) -> list[str]:
    """PCM16 mono 24 kHz -> the 40 ms append events, encoded once (no JSON in the bench's loop)."""
    step = int(WS_CHUNK_S * RATE) * 2
    return [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i:i + step]).decode()})
            for i in range(0, len(pcm) - step + 1, step)]


class BenchSocket(EventLog):
    """One WebSocket session from the client's side: the microphone's appends at a microphone's
    pace, events with their arrival times, and each reply delta's arrival and length."""

    def __init__(self, ws_url: str, mic: list[str]) -> None:
        super().__init__()
        self.ws_url, self.mic = ws_url, mic
        self.deltas: list[tuple[float, float]] = []  # (arrival, seconds of audio)
        self.connect_ms: float | None = None
        self._ws = None
        self._tasks: list[asyncio.Task] = []

    async def connect(self, timeout: float = 30.0) -> None:
        import websockets

        t = time.monotonic()
        self._ws = await asyncio.wait_for(websockets.connect(self.ws_url, max_size=None, compression=None,
                                                             ping_interval=None), timeout)
        self.connect_ms = (time.monotonic() - t) * 1000
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._speak())]

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for message in self._ws:
                now = time.monotonic()
                event = json.loads(message)
                kind = event.get("type", "")
                if kind == "response.output_audio.delta":
                    self.deltas.append((now, len(event.get("delta", "")) * 3 // 4 / 2 / RATE))
                else:
                    self.note({"type": kind})

    async def _speak(self) -> None:
        await self.until("session.created")
        t0 = time.monotonic()
        n = 0
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(max(0.0, t0 + (n + 1) * WS_CHUNK_S - time.monotonic()))
                await self._ws.send(self.mic[n % len(self.mic)])
                n += 1

    def first_reply_frame(self, since: float = 0.0) -> float | None:
        return next((t for t, _ in self.deltas if t >= since), None)

    def playout(self, start: float, end: float) -> dict[str, Any]:
        """Underruns of a player fed by the deltas from ``start`` to ``end`` (``bench serve``'s rule);
        the WebSocket has no wire apart from its events, nor idle frames."""
        span = [(t, s) for t, s in self.deltas if start <= t <= end]
        underruns, worst = continuity(span) if span else (0, 0.0)
        return {"late_at": [], "reply_frames": round(sum(s for _, s in span) / 0.02), "underruns": underruns,
                "worst_late_ms": round(worst, 1), "dry_frames": 0, "wire_underruns": underruns,
                "wire_worst_late_ms": round(worst, 1)}

    async def hangup(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.hangup()
