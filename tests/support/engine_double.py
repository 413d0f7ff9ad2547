"""A test double of an OpenAI-compatible chat-completions server (an omni engine such as
vLLM-Omni or SGLang-Omni, or a plain LLM server when no audio is asked for). Not a model: it
records each request and streams a fixed reply in the documented wire formats. Shared by the
``remote_omni`` tests and the cascade's ``llm_url`` tests."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from typing import Self

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from core.media import wav_bytes
from tests.support.stack import free_port

REPLY = "Hello from the double, nice to meet you."


def tone(seconds: float, rate: int = 24000, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def wav_b64(samples: np.ndarray, rate: int) -> str:
    return base64.b64encode(wav_bytes((samples * 32767).astype("<i2"), rate)).decode()


class OmniEngineDouble:
    """Test double of an omni engine's OpenAI API (not a model): records each request and streams
    a fixed reply in the engine's documented wire format.

    ``/vllm/v1``: vLLM-Omni (``modality`` on every chunk; audio = base64 WAV per chunk in
    ``delta.content``, here 16 kHz to exercise resampling). ``/openai/v1``: OpenAI / SGLang-Omni
    (``delta.audio.data`` raw PCM16 24 kHz, text in ``delta.audio.transcript``). A user text
    containing "slow" streams 40 chunks 50 ms apart (to cancel mid-stream); "fail" gets HTTP 400;
    "stall" answers 200 and then sends nothing for 30 s (a stuck server).
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
            if "stall" in text:
                return StreamingResponse(self._stall(), media_type="text/event-stream")
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
    async def _stall():
        await asyncio.sleep(30)
        yield "data: [DONE]\n\n"

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


