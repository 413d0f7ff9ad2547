"""Prometheus /metrics on the gateway and on a worker: both parse with prometheus_client's own
parser, and their numbers move with real traffic (a spoken turn through server VAD)."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from tests.support.realtime_client import recv_until
from tests.support.stack import Stack



@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("metrics_stack"), workers=1, recording={"enabled": False}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tts():
    from core.cascade.tts import PiperTts

    return PiperTts()


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value}; raises if the text does not parse (``headers``: a
    worker's /metrics needs the worker secret)."""
    r = httpx.get(f"{url}/metrics", timeout=5, headers=headers)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: dict, name: str, **labels) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


async def speak(ws, pcm: bytes, chunk_ms: int = 40, speedup: float = 2.0) -> None:
    step = 24000 * chunk_ms // 1000 * 2
    for i in range(0, len(pcm), step):
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(pcm[i:i + step]).decode()}))
        await asyncio.sleep(chunk_ms / 1000 / speedup)


async def test_metrics_parse_and_move_with_traffic(stack, tts):
    url = f"ws://127.0.0.1:{stack.port}/v1/realtime?extensions=all"
    g0, w0 = scrape(stack.url), scrape(stack.worker_url(), stack.worker_headers)
    assert value(g0, "omniduplex_queue_length") == 0
    assert value(g0, "omniduplex_worker_health", worker="w0", health="healthy") == 1
    assert value(g0, "omniduplex_workers", health="healthy") == 1
    assert value(w0, "omniduplex_worker_model_loaded") == 1 and value(w0, "omniduplex_worker_state", state="IDLE") == 1

    a = await websockets.connect(url)
    await recv_until(a, "session.created")
    b = await websockets.connect(url)
    await recv_until(b, "queue.position")
    g1, w1 = scrape(stack.url), scrape(stack.worker_url(), stack.worker_headers)
    assert value(g1, "omniduplex_queue_length") == 1
    assert value(g1, "omniduplex_sessions", state="queued") == 1
    assert value(g1, "omniduplex_sessions", state="active") == 1
    assert value(g1, "omniduplex_worker_busy_slots", worker="w0") == 1
    assert value(w1, "omniduplex_worker_sessions_active") == 1
    await b.close()

    # One spoken turn through server VAD: V2V and TTFP are measured by the worker and seen by both.
    speech = b"\x00\x00" * 12000 + b"".join(tts.synthesize("What is the capital of France?", deterministic=True))
    sender = asyncio.create_task(speak(a, speech + b"\x00\x00" * 36000))
    m = await recv_until(a, "session.metrics", 60)
    await sender
    assert m["metrics"]["v2v_ms"] is not None and m["metrics"]["ttfp_ms"] is not None
    await a.close()

    deadline = time.monotonic() + 5
    while True:
        g2, w2 = scrape(stack.url), scrape(stack.worker_url(), stack.worker_headers)
        if value(g2, "omniduplex_realtime_sessions_total", ended_by="client") >= \
                value(g0, "omniduplex_realtime_sessions_total", ended_by="client") + 1 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    for name in ("omniduplex_v2v_seconds_count", "omniduplex_ttfp_seconds_count"):
        assert value(g2, name) == value(g0, name) + 1, name
    assert value(g2, "omniduplex_v2v_seconds_sum") - value(g0, "omniduplex_v2v_seconds_sum") == pytest.approx(
        m["metrics"]["v2v_ms"] / 1000, abs=0.01)
    # b left while queued: only assigned sessions count as queue waits.
    assert value(g2, "omniduplex_queue_wait_seconds_count") == value(g0, "omniduplex_queue_wait_seconds_count") + 1
    assert value(g2, "omniduplex_realtime_sessions_total", ended_by="client") >= 1
    assert value(g2, "omniduplex_queue_length") == 0 and value(g2, "omniduplex_sessions", state="active") == 0
    for name in ("omniduplex_worker_v2v_seconds_count", "omniduplex_worker_ttfp_seconds_count",
                 "omniduplex_worker_ttft_seconds_count"):
        assert value(w2, name) == value(w0, name) + 1, name
    assert value(w2, "omniduplex_worker_responses_total", status="completed") >= 1
    assert value(w2, "omniduplex_worker_sessions_total", end_reason="client_closed") >= 1


async def test_health_metrics_follow_the_operator(stack):
    token = stack.admin_token
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {token}"}) as c:
        c.post("/api/admin/workers/w0/disable")
        m = scrape(stack.url)
        assert value(m, "omniduplex_worker_health", worker="w0", health="disabled") == 1
        assert value(m, "omniduplex_worker_health", worker="w0", health="healthy") == 0
        c.post("/api/admin/workers/w0/enable")
    stack.wait_healthy(1, 10)
    assert value(scrape(stack.url), "omniduplex_worker_health", worker="w0", health="healthy") == 1
