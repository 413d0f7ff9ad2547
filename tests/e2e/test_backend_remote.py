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
import time

import httpx
import numpy as np
import pytest
import websockets

from core.processors import create_backend
from core.conversation import ConversationConfig, TurnDetection
from tests.support.realtime_client import recv_until
from tests.support.engine_double import REPLY, OmniEngineDouble, tone
from tests.support.helpers import Collector, stream
from tests.support.stack import Stack


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
            done = await recv_until(ws, "response.done", log=events)
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
    from tests.support.realtime_client import Client

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


async def test_against_our_own_chat_completions(stack):
    """One OmniDuplex fronting another: the remote backend drives our gateway's REST API (the
    suite's shared default stack: a stack of its own cost ~11 s more to start)."""
    probe = await asyncio.to_thread(httpx.post, f"{stack.url}/v1/chat/completions", json={}, timeout=10)
    # the route exists (gateway/rest/routes.py): an empty body is refused, never a 404
    assert probe.status_code != 404, f"no /v1/chat/completions route: {probe.status_code} {probe.text}"
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
