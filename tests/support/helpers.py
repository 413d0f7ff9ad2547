"""Small helpers for tests: feed audio, collect events, see whether a process is gone."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import psutil

from core.audio import float_to_pcm16, resample


def speech_pcm(backend, text: str, rate: int) -> bytes:
    """Speech made by the pipeline's own TTS, at ``rate``."""
    pcm24 = b"".join(backend.tts.synthesize(text, deterministic=True))
    audio = np.frombuffer(pcm24, dtype="<i2").astype(np.float32) / 32768
    return float_to_pcm16(resample(audio, 24000, rate))


def silence(seconds: float, rate: int) -> bytes:
    return b"\x00\x00" * int(seconds * rate)


def noise(seconds: float, rate: int, dbfs: float = -50.0, seed: int = 1) -> bytes:
    rng = np.random.default_rng(seed)
    amp = 10 ** (dbfs / 20)
    return float_to_pcm16((rng.standard_normal(int(seconds * rate)) * amp).astype(np.float32))


class Collector:
    """Reads a conversation's events in the background, with arrival times."""

    def __init__(self, conversation) -> None:
        self.events: list[tuple[float, object]] = []
        self._conv = conversation
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for event in self._conv.events():
            self.events.append((time.perf_counter(), event))

    def of(self, kind: str) -> list:
        return [e for _, e in self.events if e.type == kind]

    async def wait_for(self, kind: str, timeout: float = 30.0, count: int = 1):
        deadline = time.perf_counter() + timeout
        while len(self.of(kind)) < count:
            if time.perf_counter() > deadline:
                seen = [e.type for _, e in self.events]
                raise AssertionError(f"no {kind!r} within {timeout}s; saw {seen[-20:]}")
            await asyncio.sleep(0.01)
        return self.of(kind)[count - 1]


async def stream(conversation, pcm: bytes, rate: int, chunk_ms: int = 20, realtime: bool = True) -> None:
    """Send ``pcm`` in ``chunk_ms`` pieces, paced at real time when asked."""
    step = rate * chunk_ms // 1000 * 2
    start = time.perf_counter()
    for i in range(0, len(pcm), step):
        await conversation.append_audio(pcm[i : i + step])
        if realtime:
            ahead = start + (i + step) / 2 / rate - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)


def gone(pid: int) -> bool:
    """Exited (a zombie whose parent is gone counts: nothing runs any more)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for(what: str, predicate, proc, log, timeout: float = 20.0) -> None:
    """Until ``predicate()`` holds; fails (with ``log``'s text) if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {what}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()}"
        time.sleep(0.1)


def http_answers(port: int) -> bool:
    """Any HTTP answer on ``127.0.0.1:port/health`` (200 or 503 alike)."""
    import httpx

    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0, trust_env=False)
        return True
    except httpx.HTTPError:
        return False
