"""The gateway's REST layer in-process, against a worker test double: failure paths that a real
worker rarely shows (a stream cut mid-way, an unreachable or crashing worker, a full queue), and
the lease being released on each of them. No models are loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest
from fastapi import FastAPI

from core.rest_jobs import CHAT_PATH, RELEASE_PATH, SPEECH_PATH, TRANSCRIPTION_PATH
from gateway.rest.routes import openai_router
from gateway.pool.model import Health
from gateway.pool.worker_pool import WorkerPool

MODEL = "omniduplex-cascade"
CAPS = ["audio_input", "audio_output", "image_input", "text_output"]
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


class CutStreamDouble(httpx.AsyncByteStream):
    """Test double of a worker stream: some lines, then the connection drops."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    async def __aiter__(self):
        for line in self.lines:
            yield line
        raise httpx.ReadError("connection lost")


class WorkerDouble:
    """Test double of ``worker/rest.py``: answers each internal path with a canned response."""

    def __init__(self) -> None:
        # A client that left: the gateway asks the worker to stop the request and free its slot.
        self.answers: dict[str, object] = {RELEASE_PATH: lambda: httpx.Response(200, json={"released": True})}
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers[request.url.path]
        if isinstance(answer, Exception):
            raise answer
        return answer() if callable(answer) else answer


def ndjson(*events: dict) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


DONE = {"type": "done", "status": "completed", "reason": None, "text": "Hello.", "audio_ms": 0.0,
        "output_tokens": 3, "prompt_tokens": 30}


@contextlib.asynccontextmanager
async def gateway(worker: WorkerDouble, capabilities=CAPS, **pool_args):
    pool = WorkerPool(**{"max_wait_s": 5.0, **pool_args})
    w = pool.add_worker("http://worker-double")
    for _ in range(2):
        pool.update_health(w.id, True, info={"backend": "cascade", "capabilities": capabilities, "slots": 1})
    app = FastAPI()
    app.include_router(openai_router(pool, transport=httpx.MockTransport(worker)))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client,
    ):
        yield client, pool


def idle(pool: WorkerPool) -> bool:
    snap = pool.snapshot()
    return snap["busy"] == 0 and snap["queue_length"] == 0


async def test_chat_formats_worker_events():
    worker = WorkerDouble()
    worker.answers[CHAT_PATH] = lambda: httpx.Response(200, content=ndjson(
        {"type": "text", "delta": "Hello"}, {"type": "text", "delta": "."},
        {"type": "audio_file", "data": "UklGRg==", "format": "wav"}, {**DONE, "audio_ms": 1500.0}))
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/chat/completions", json={
            **CHAT, "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}})
        assert r.status_code == 200, r.text
        body = r.json()
        message = body["choices"][0]["message"]
        assert message["content"] is None and message["audio"]["transcript"] == "Hello."
        assert message["audio"]["data"] == "UklGRg=="
        assert body["usage"] == {"prompt_tokens": 30, "completion_tokens": 3, "total_tokens": 33,
                                 "output_audio_seconds": 1.5}
        assert r.headers["x-omniduplex-worker-id"] == "w0"
        job = json.loads(worker.requests[0].content)
        assert job["output_audio"] is True and job["stream"] is False and job["voice"] == "alloy"
        assert worker.requests[0].headers["x-request-id"] == r.headers["x-request-id"]
        assert idle(pool)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = {"call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}


def sse_events(text: str) -> list:
    return [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]


async def test_chat_tools_become_a_job_and_calls_come_back():
    worker = WorkerDouble()
    worker.answers[CHAT_PATH] = lambda: httpx.Response(200, content=ndjson(
        {"type": "call", "index": 0, "call_id": "call_1", "name": "get_weather"},
        {"type": "call_arguments", "index": 0, "delta": '{"city": '},
        {"type": "call_arguments", "index": 0, "delta": '"Paris"}'},
        {**DONE, "text": "", "calls": [CALL]}))
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "call_0", "content": [{"type": "text", "text": "sunny"}]},
               {"role": "user", "content": "And again?"}]
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/chat/completions", json={
            **CHAT, "messages": history, "tools": [WEATHER], "parallel_tool_calls": False,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        assert choice["message"]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
        job = json.loads(worker.requests[0].content)
        assert job["tool_choice"] == "get_weather"
        assert job["tools"] == [{"name": "get_weather", "description": "Current weather in a city.",
                                 "parameters": WEATHER["function"]["parameters"]}]
        assert job["messages"][1]["tool_calls"] == [{"call_id": "call_0", "name": "get_weather", "arguments": "{}"}]
        assert job["messages"][2]["role"] == "tool" and job["messages"][2]["call_id"] == "call_0"
        assert job["messages"][2]["parts"][0]["text"] == "sunny"

        r = await client.post("/v1/chat/completions", json={**CHAT, "tools": [WEATHER], "stream": True})
        events = sse_events(r.text)
        deltas = [e["choices"][0]["delta"] for e in events]
        assert deltas[1]["tool_calls"] == [{"index": 0, "id": "call_1", "type": "function",
                                            "function": {"name": "get_weather", "arguments": ""}}]
        assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas[2:4]) == CALL["arguments"]
        assert events[-1]["choices"][0]["finish_reason"] == "tool_calls" and r.text.endswith("data: [DONE]\n\n")
        assert idle(pool)


@pytest.mark.parametrize(("extra", "param"), [
    ({"tools": [{"type": "mcp", "server_label": "x"}]}, "tools[0].type"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "1"}]},
     "messages[1].tool_call_id"),
    ({"messages": [{"role": "tool", "content": "1"}]}, "messages[0].tool_call_id"),
])
async def test_bad_tool_input_is_a_400_naming_the_parameter(extra, param):
    worker = WorkerDouble()
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/chat/completions", json={**CHAT, **extra})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error", error
        assert not worker.requests and idle(pool)


async def test_stream_cut_mid_way_reports_the_worker_and_frees_the_slot():
    worker = WorkerDouble()
    worker.answers[CHAT_PATH] = lambda: httpx.Response(200, stream=CutStreamDouble([ndjson({"type": "text", "delta": "Hel"})]))
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: ")]
        assert events[1]["choices"][0]["delta"]["content"] == "Hel"
        assert events[-1]["error"]["code"] == "worker_failed"  # the SDK raises APIError on this
        assert "[DONE]" not in r.text
        assert pool.get_worker("w0").health == Health.UNHEALTHY
        assert idle(pool)


async def test_unreachable_and_failing_workers():
    worker = WorkerDouble()
    worker.answers[CHAT_PATH] = httpx.ConnectError("refused")
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "worker_unavailable"
        assert pool.get_worker("w0").health == Health.UNHEALTHY and idle(pool)
    worker.answers[CHAT_PATH] = httpx.Response(500, text="Internal Server Error")
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 502 and r.json()["error"]["type"] == "server_error"
        assert pool.get_worker("w0").health == Health.UNHEALTHY and idle(pool)
    error = {"error": {"message": "bad audio", "type": "invalid_request_error", "param": "file", "code": "invalid_audio"}}
    worker.answers[TRANSCRIPTION_PATH] = httpx.Response(400, json=error)
    async with gateway(worker) as (client, pool):
        r = await client.post("/v1/audio/transcriptions", data={"model": MODEL}, files={"file": ("a.wav", b"RIFF")})
        assert r.status_code == 400 and r.json() == error  # the worker's 4xx is relayed as is
        assert pool.get_worker("w0").health == Health.HEALTHY and idle(pool)


async def test_speech_stream_cut_aborts_the_client_stream():
    worker = WorkerDouble()
    worker.answers[SPEECH_PATH] = lambda: httpx.Response(200, headers={"content-type": "audio/wav"},
                                                         stream=CutStreamDouble([b"RIFF...."]))
    async with gateway(worker) as (client, pool):
        with pytest.raises(httpx.ReadError):  # a cut-off file must not look complete
            await client.post("/v1/audio/speech", json={"model": MODEL, "voice": "a", "input": "hi"})
        assert pool.get_worker("w0").health == Health.UNHEALTHY and idle(pool)


async def test_queue_limits_and_capabilities():
    worker = WorkerDouble()
    async with gateway(worker, max_wait_s=0.3) as (client, pool):
        lease = await pool.acquire()  # someone else holds the only slot
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "queue_timeout"
        pool.release(lease)
        assert idle(pool)
    async with gateway(worker, capacity=0) as (client, pool):
        lease = await pool.acquire()
        r = await client.post("/v1/audio/speech", json={"model": MODEL, "voice": "a", "input": "hi"})
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
        pool.release(lease)
    async with gateway(worker, capabilities=["text_output"]) as (client, pool):
        r = await client.post("/v1/audio/speech", json={"model": MODEL, "voice": "a", "input": "hi"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_capability"
        assert not worker.requests and idle(pool)


async def test_client_leaving_while_queued_leaves_the_queue():
    worker = WorkerDouble()
    worker.answers[CHAT_PATH] = lambda: httpx.Response(200, content=ndjson(DONE))
    async with gateway(worker) as (client, pool):
        lease = await pool.acquire()
        task = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
        for _ in range(100):
            if pool.queue_length:
                break
            await asyncio.sleep(0.01)
        assert pool.queue_length == 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert pool.queue_length == 0
        pool.release(lease)
        assert idle(pool) and not worker.requests


async def test_transcription_formats():
    worker = WorkerDouble()
    result = {"text": "Hello there. General Kenobi.", "language": "english", "duration": 3.2, "segments": [
        {"id": 0, "start": 0.0, "end": 1.2, "text": " Hello there.", "tokens": [1], "avg_logprob": -0.1,
         "compression_ratio": 1.0, "no_speech_prob": 0.01, "temperature": 0.0},
        {"id": 1, "start": 1.5, "end": 3.1, "text": " General Kenobi.", "tokens": [2], "avg_logprob": -0.1,
         "compression_ratio": 1.0, "no_speech_prob": 0.01, "temperature": 0.0}]}
    worker.answers[TRANSCRIPTION_PATH] = lambda: httpx.Response(200, json=result)
    async with gateway(worker) as (client, _pool):
        async def get(fmt: str) -> httpx.Response:
            r = await client.post("/v1/audio/transcriptions", data={"model": MODEL, "response_format": fmt,
                                                                    "language": "en", "temperature": "0.2"},
                                  files={"file": ("a.ogg", b"OggS....")})
            assert r.status_code == 200, r.text
            return r

        assert (await get("json")).json() == {"text": result["text"], "usage": {"type": "duration", "seconds": 4}}
        assert (await get("text")).text == result["text"] + "\n"
        verbose = (await get("verbose_json")).json()
        assert verbose["segments"][1]["seek"] == 0 and verbose["duration"] == 3.2
        assert (await get("srt")).text.startswith("1\n00:00:00,000 --> 00:00:01,200\nHello there.\n")
        assert "00:00:01.500 --> 00:00:03.100\nGeneral Kenobi." in (await get("vtt")).text
        params = worker.requests[0].url.params
        assert params["language"] == "en" and params["temperature"] == "0.2"
        assert worker.requests[0].content == b"OggS...."
