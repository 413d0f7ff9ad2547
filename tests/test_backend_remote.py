"""The ``remote_omni`` backend: a worker that fronts an OpenAI-compatible omni engine.

Tested against ``OmniEngineDouble``, a test double written here that streams the two documented
chat-completions shapes (vLLM-Omni: ``modality``-tagged chunks with base64 WAV in
``delta.content``; OpenAI/SGLang-Omni: ``delta.audio.data`` PCM16 and ``delta.audio.transcript``),
and against our own gateway's ``/v1/chat/completions`` (cascade backend).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import threading
import time
import wave
from typing import Self

import httpx
import numpy as np
import pytest
import uvicorn
import websockets
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from core.processors import create_backend
from core.conversation import ConversationConfig, TurnDetection
from tests.helpers import Collector, stream
from tests.stack import Stack, free_port

pytestmark = pytest.mark.e2e

REPLY = "Hello from the double, nice to meet you."


def tone(seconds: float, rate: int = 24000, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def wav_b64(samples: np.ndarray, rate: int) -> str:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((samples * 32767).astype("<i2").tobytes())
    return base64.b64encode(buf.getvalue()).decode()


class OmniEngineDouble:
    """Test double of an omni engine's OpenAI API (not a model): records each request and streams
    a fixed reply in the engine's documented wire format.

    ``/vllm/v1``: vLLM-Omni (``modality`` on every chunk; audio = base64 WAV per chunk in
    ``delta.content``, here 16 kHz to exercise resampling). ``/openai/v1``: OpenAI / SGLang-Omni
    (``delta.audio.data`` raw PCM16 24 kHz, text in ``delta.audio.transcript``). A user text
    containing "slow" streams 40 chunks 50 ms apart (to cancel mid-stream); "fail" gets HTTP 400.
    """

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.aborted = threading.Event()
        app = FastAPI()

        @app.get("/{flavor}/v1/models")
        async def models(flavor: str) -> dict:
            return {"object": "list", "data": [{"id": "double-omni", "object": "model"}]}

        @app.post("/{flavor}/v1/chat/completions")
        async def chat(flavor: str, request: Request):
            body = await request.json()
            self.requests.append(body)
            text = json.dumps(body["messages"][-1])
            if "fail" in text:
                return JSONResponse({"error": {"message": "the double refuses", "type": "invalid_request_error"}},
                                    status_code=400)
            if not body.get("stream"):
                return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "double transcript"}}]}
            slow = "slow" in text
            if body.get("tools") and body["messages"][-1]["role"] != "tool":
                return StreamingResponse(self._tool_call(body), media_type="text/event-stream")
            gen = self._vllm(body, slow) if flavor == "vllm" else self._openai(body, slow)
            return StreamingResponse(self._watch(request, gen), media_type="text/event-stream")

        self.app = app
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def url(self, flavor: str) -> str:
        return f"http://127.0.0.1:{self.port}/{flavor}/v1"

    async def _watch(self, request: Request, gen):
        try:
            async for chunk in gen:
                if await request.is_disconnected():
                    self.aborted.set()
                    return
                yield chunk
        except asyncio.CancelledError:
            self.aborted.set()
            raise

    @staticmethod
    def _sse(obj: dict) -> str:
        return f"data: {json.dumps(obj)}\n\n"

    async def _vllm(self, body: dict, slow: bool):
        base = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        words = REPLY.split(" ")
        yield self._sse({**base, "modality": "text", "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                                          "content": ""}}]})
        for i, word in enumerate(words):
            yield self._sse({**base, "modality": "text", "choices": [{"index": 0, "delta": {
                "content": word if i == 0 else " " + word}}]})
        if "audio" in body.get("modalities", ["text", "audio"]):
            for _ in range(40 if slow else 2):  # 0.5 s per chunk, a whole WAV file each
                yield self._sse({**base, "modality": "audio", "choices": [{"index": 0, "delta": {
                    "role": "assistant", "content": wav_b64(tone(0.5, 16000), 16000)}}]})
                if slow:
                    await asyncio.sleep(0.05)
        yield self._sse({**base, "modality": "text", "choices": [{"index": 0, "delta": {},
                                                                  "finish_reason": "stop"}]})
        yield self._sse({**base, "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 9,
                                                          "total_tokens": 20}})
        yield "data: [DONE]\n\n"

    async def _tool_call(self, body: dict):
        """A request with tools (and no tool result last): a call to the first tool, streamed as
        vLLM's tool parser does: id and name first, then the arguments in pieces."""
        base = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        name = body["tools"][0]["function"]["name"]
        yield self._sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "chatcmpl-tool-1", "type": "function", "function": {"name": name, "arguments": ""}}]}}]})
        for piece in ('{"city": ', '"Paris", ', '"unit": "c"}'):
            yield self._sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": piece}}]}}]})
        yield self._sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        yield "data: [DONE]\n\n"

    async def _openai(self, body: dict, slow: bool):
        base = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        audio = "audio" in body.get("modalities", [])
        yield self._sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                    **({"audio": {"id": "a1"}} if audio else {})}}]})
        pcm = (tone(1.0) * 32767).astype("<i2").tobytes()
        pieces = 40 if slow else 4
        step = len(pcm) // pieces // 2 * 2
        words = REPLY.split(" ")
        for i in range(pieces):
            delta: dict = {}
            if i < len(words):
                word = words[i] if i == 0 else " " + words[i]
                delta = {"audio": {"id": "a1", "transcript": word}} if audio else {"content": word}
            if audio:
                delta.setdefault("audio", {"id": "a1"})["data"] = base64.b64encode(pcm[i * step:(i + 1) * step]).decode()
            yield self._sse({**base, "choices": [{"index": 0, "delta": delta}]})
            if slow:
                await asyncio.sleep(0.05)
        for word in words[pieces:]:
            yield self._sse({**base, "choices": [{"index": 0, "delta": (
                {"audio": {"id": "a1", "transcript": " " + word}} if audio else {"content": " " + word})}]})
        yield self._sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        yield "data: [DONE]\n\n"

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "test double did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(5)


@pytest.fixture(scope="module")
def engine():
    with OmniEngineDouble() as double:
        yield double


def remote(engine, flavor: str, **extra):
    opts = {"base_url": engine.url(flavor), "model": "double-omni", "wait_for_server_s": 5, "audio_chunk_ms": 100}
    if flavor == "vllm":
        opts.update(audio_format="wav", send_speaker=True, audio_part="audio_url", voices=["Ethan", "Chelsie"])
    return opts | extra


def pcm_of(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")


async def recv_until(ws, kind: str, timeout: float = 30.0, seen: list | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        ev = json.loads(await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic())))
        if seen is not None:
            seen.append(ev)
        if ev["type"] == kind:
            return ev


async def test_vllm_omni_stream_through_our_worker_gateway_and_recording(engine, tmp_path):
    """Realtime protocol in front of the engine: text, audio and an image go up as chat messages;
    text deltas and 24 kHz audio come back; the session is recorded like any other."""
    stack = Stack(tmp_path, workers=1, backend={"name": "remote_omni", "options": remote(engine, "vllm")}).start()
    try:
        jpeg = io.BytesIO()
        from PIL import Image

        Image.new("RGB", (64, 48), (10, 200, 30)).save(jpeg, format="JPEG")
        clip = (tone(0.8, 16000) * 32767).astype("<i2").tobytes()
        url = f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-remote_omni"
        async with websockets.connect(url, max_size=None) as ws:
            created = await recv_until(ws, "session.created")
            assert created["session"]["audio"]["output"]["voice"] == "Ethan"
            await ws.send(json.dumps({"type": "session.update", "session": {
                "type": "realtime", "instructions": "Be brief.", "audio": {
                    "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None},
                    "output": {"voice": "chelsie"}}}}))
            assert (await recv_until(ws, "session.updated"))["session"]["audio"]["output"]["voice"] == "Chelsie"
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [
                    {"type": "input_audio", "audio": base64.b64encode(clip).decode()},
                    {"type": "input_image", "image_url": "data:image/jpeg;base64,"
                     + base64.b64encode(jpeg.getvalue()).decode()},
                    {"type": "input_text", "text": "What is this?"}]}}))
            await ws.send(json.dumps({"type": "response.create"}))
            events: list[dict] = []
            done = await recv_until(ws, "response.done", seen=events)
            session_id = created["session"]["id"]
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
        pcm = pcm_of(events)
        assert text == REPLY and done["response"]["status"] == "completed"
        assert done["response"]["usage"]["output_tokens"] == 9
        # two 0.5 s WAV chunks at 16 kHz arrive as 1.0 s at 24 kHz, in 100 ms deltas
        assert abs(len(pcm) // 2 - 24000) <= 48
        assert max(len(base64.b64decode(e["delta"])) for e in events if e["type"] == "response.output_audio.delta") <= 4800
        body = engine.requests[-1]
        assert body["stream"] is True and body["modalities"] == ["text", "audio"]
        assert body["audio"] == {"voice": "Chelsie", "format": "wav"} and body["speaker"] == "Chelsie"
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        parts = body["messages"][-1]["content"]
        assert [p["type"] for p in parts[-3:]] == ["audio_url", "image_url", "text"]
        assert parts[-3]["audio_url"]["url"].startswith("data:audio/wav;base64,UklGR")  # a WAV file
        assert parts[-2]["image_url"]["url"].startswith("data:image/jpeg;base64,")
        # recorded like any session: the worker wrote it under the stack's data dir
        deadline = time.monotonic() + 10
        while not list(stack.sessions_dir.glob(f"*{session_id}*/meta.json")) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert list(stack.sessions_dir.glob(f"*{session_id}*"))
    finally:
        stack.stop()


WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city", "unit"]}}


async def test_function_call_round_trip_through_the_engine(engine, tmp_path):
    """Tools go up as chat-completions ``tools``; the engine's streamed ``delta.tool_calls``
    come back as function call events and a ``function_call`` output item; the call and its
    result go up again as assistant ``tool_calls`` and a ``tool`` message."""
    from tests.realtime_client import Client

    stack = Stack(tmp_path, workers=1, backend={"name": "remote_omni", "options": remote(engine, "openai")}).start()
    try:
        url = f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-remote_omni"
        c = Client(await websockets.connect(url, max_size=None), beta=False)
        await c.until("session.created")
        s = await c.update(tools=[WEATHER], tool_choice="required", audio={"input": {"turn_detection": None}})
        assert s["tool_choice"] == "required"
        await c.typed("What is the weather in Paris?")
        r = await c.respond(output_modalities=["text"])
        body = engine.requests[-1]
        assert body["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in
                                                                   ("name", "description", "parameters")}}]
        assert body["tool_choice"] == "required"
        assert r["status"] == "completed" and [o["type"] for o in r["output"]] == ["function_call"]
        call = r["output"][0]
        assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris", "unit": "c"}
        deltas = [e["delta"] for e in c.of("response.function_call_arguments.delta")]
        assert len(deltas) >= 3 and "".join(deltas) == call["arguments"]
        done = c.of("response.function_call_arguments.done")[-1]
        assert done["call_id"] == call["call_id"] and done["arguments"] == call["arguments"]
        # the client answers; the next request carries the call and its result
        await c.send("conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"],
                                                       "output": '{"temp": 21}'})
        await c.until(c.added(), count=len(c.of(c.added())) + 1)
        reply = await c.respond(output_modalities=["text"], tool_choice="auto")
        assert reply["status"] == "completed" and reply["output"][0]["type"] == "message"
        messages = engine.requests[-1]["messages"]
        assert messages[-2] == {"role": "assistant", "content": None, "tool_calls": [{
            "id": call["call_id"], "type": "function",
            "function": {"name": "get_weather", "arguments": call["arguments"]}}]}
        assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": '{"temp": 21}'}
        assert engine.requests[-1]["tool_choice"] == "auto"
        await c.close()
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def openai_backend(engine):
    backend = create_backend("remote_omni", remote(engine, "openai", transcribe_input=True))
    backend.load()
    yield backend
    backend.close()


async def test_openai_shape_server_vad_transcripts_and_text_only(openai_backend, engine, tts):
    conv = openai_backend.open_conversation(ConversationConfig(
        input_sample_rate=24000, turn_detection=TurnDetection(silence_duration_ms=400)))
    events = Collector(conv)
    speech = b"".join(tts.synthesize("Could you say hello?", deterministic=True))
    await stream(conv, b"\x00\x00" * 12000 + speech + b"\x00\x00" * 24000, 24000, realtime=False)
    done = await events.wait_for("response_done")
    transcript = await events.wait_for("input_transcript")
    kinds = [e.type for _, e in events.events]
    assert kinds.index("speech_stopped") < kinds.index("input_committed") < kinds.index("response_started")
    assert done.status == "completed" and done.text == REPLY
    pcm = b"".join(e.pcm for e in events.of("audio_chunk"))
    assert abs(len(pcm) // 2 - 24000) <= 48 and done.audio_ms == pytest.approx(len(pcm) / 48, abs=0.1)
    assert transcript.transcript == "double transcript"
    # the spoken turn went up as a WAV file in an input_audio part
    user = [m for m in engine.requests if m.get("stream")][-1]["messages"][-1]
    assert user["content"][0]["type"] == "input_audio" and user["content"][0]["input_audio"]["format"] == "wav"
    # a text-only reply asks for text only and streams delta.content
    await conv.add_text("And in writing?")
    await conv.create_response(output_audio=False)
    done2 = await events.wait_for("response_done", count=2)
    assert done2.text == REPLY and done2.audio_ms == 0
    assert [m for m in engine.requests if m.get("stream")][-1]["modalities"] == ["text"]
    await conv.close()


async def test_cancel_mid_stream_aborts_the_request_and_counts_exact_audio(openai_backend, engine):
    conv = openai_backend.open_conversation(ConversationConfig(turn_detection=None))
    events = Collector(conv)
    engine.aborted.clear()
    await conv.add_text("Tell me something slow.")
    await conv.create_response()
    await events.wait_for("audio_chunk", count=3)
    result = await conv.cancel_response()
    done = await events.wait_for("response_done")
    await asyncio.sleep(0.3)
    sent = b"".join(e.pcm for e in events.of("audio_chunk"))
    assert done.status == "cancelled" and result.audio_ms == pytest.approx(len(sent) / 48, abs=0.1)
    assert len(sent) // 2 < 24000, "the stream stopped early"
    assert engine.aborted.wait(5), "the engine saw the client go away"
    assert not [e for _, e in events.events[events.events.index(next(x for x in events.events
                                                                     if x[1].type == "response_done")) + 1:]
                if e.type in ("audio_chunk", "text_delta")]
    # truncating to half of what was heard keeps a share of the words
    kept = conv.truncate(done.item_id, int(result.audio_ms // 2))
    assert len(kept.split()) <= len(done.text.split())
    # an engine error fails that reply with a readable error, and the session goes on
    await conv.add_text("please fail")
    await conv.create_response()
    failed = await events.wait_for("response_done", count=2)
    error = await events.wait_for("error")
    assert failed.status == "failed" and "HTTP 400" in error.message and "the double refuses" in error.message
    await conv.close()


def test_options_are_validated_and_an_absent_engine_is_reported():
    with pytest.raises(ValueError) as exc:
        create_backend("remote_omni", {"base_url": "gpu-host:8091", "model": ""})
    text = str(exc.value)
    assert "backend.options.base_url" in text and "backend.options.model" in text
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = create_backend("remote_omni", {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m",
                                             "wait_for_server_s": 0.5})
    with pytest.raises(RuntimeError, match="did not answer"):
        backend.load()
    backend.close()


async def test_against_our_own_chat_completions(tmp_path):
    """One OmniDuplex fronting another: the remote backend drives our gateway's REST API."""
    stack = Stack(tmp_path, workers=1).start()
    try:
        probe = await asyncio.to_thread(httpx.post, f"{stack.url}/v1/chat/completions", json={}, timeout=10)
        if probe.status_code == 404:
            pytest.skip("this gateway has no /v1/chat/completions route yet (gateway/openai_rest.py)")
        backend = create_backend("remote_omni", {"base_url": f"{stack.url}/v1", "model": "omniduplex-cascade",
                                                 "default_voice": "joe"})
        await asyncio.to_thread(backend.load)
        conv = backend.open_conversation(ConversationConfig(turn_detection=None))
        events = Collector(conv)
        await conv.add_text("Say hello to Anna.")
        await conv.create_response(max_output_tokens=40)
        done = await events.wait_for("response_done", timeout=90)
        pcm = b"".join(e.pcm for e in events.of("audio_chunk"))
        assert done.status in ("completed", "incomplete") and done.text.strip()
        assert "".join(e.delta for e in events.of("text_delta")) == done.text
        assert len(pcm) // 2 > 12000 and np.abs(np.frombuffer(pcm, dtype="<i2")).max() > 1000
        await conv.close()
        backend.close()
    finally:
        stack.stop()
