"""The system end to end: real worker and gateway processes, the official ``openai`` SDK and
raw WebSocket clients, through the gateway."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time

import numpy as np
import pytest
import websockets
from openai import AsyncOpenAI

from tests.support.realtime_client import recv_until
from tests.support.stack import Stack



@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("stack"), workers=1, queue={"capacity": 3}, limits={"pause_timeout_s": 2}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tts():
    from core.cascade.tts import PiperTts

    return PiperTts()


def sdk(stack) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=f"{stack.url}/v1", websocket_base_url=f"ws://127.0.0.1:{stack.port}/v1")


def ws_url(stack) -> str:
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-cascade&extensions=all"


async def wait_idle(stack, timeout: float = 3.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        h = stack.health()
        w = stack.worker_health()
        if h["slots_busy"] == 0 and h["queue_length"] == 0 and w["active_sessions"] == 0:
            return h
        if time.monotonic() > deadline:
            raise AssertionError(f"not idle: gateway {h}, worker {w}")
        await asyncio.sleep(0.05)


def pcm_of(deltas: list[str]) -> np.ndarray:
    raw = b"".join(base64.b64decode(d) for d in deltas)
    assert len(raw) % 2 == 0
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768


async def test_sdk_turn_based_text_in_audio_out(stack):
    async with sdk(stack).realtime.connect(model="omniduplex-cascade") as conn:
        first = await conn.recv()
        assert first.type == "queue.assigned" or first.type == "session.created"
        await conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello to Anna."}]}
        )
        await conn.response.create()
        seen, audio, transcript = [], [], []
        async for ev in conn:
            seen.append(ev.type)
            if ev.type == "response.output_audio.delta":
                audio.append(ev.delta)
            elif ev.type == "response.output_audio_transcript.delta":
                transcript.append(ev.delta)
            elif ev.type == "response.done":
                done = ev
                break
    assert done.response.status == "completed"
    assert "".join(transcript).strip()
    assert done.response.output[0].content[0].transcript == "".join(transcript)
    samples = pcm_of(audio)
    assert len(samples) / 24000 > 0.5 and np.abs(samples).max() > 0.05
    for kind in ("session.updated", "conversation.item.added", "response.created", "response.output_item.added",
                 "response.content_part.added", "response.output_audio.done", "response.output_item.done"):
        assert kind in seen, kind
    await wait_idle(stack)


async def stream_speech(conn_send, pcm: bytes, rate: int = 24000, chunk_ms: int = 40) -> None:
    step = rate * chunk_ms // 1000 * 2
    t0 = time.monotonic()
    for i in range(0, len(pcm), step):
        await conn_send(base64.b64encode(pcm[i : i + step]).decode())
        ahead = t0 + (i + step) / 2 / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)


def spoken(tts, text: str) -> bytes:
    return b"\x00\x00" * 12000 + b"".join(tts.synthesize(text, deterministic=True)) + b"\x00\x00" * 36000


async def test_sdk_voice_exchange_with_server_vad(stack, tts):
    async with sdk(stack).realtime.connect(model="omniduplex-cascade") as conn:
        await conn.session.update(session={"type": "realtime", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}})
        sender = asyncio.create_task(stream_speech(
            lambda a: conn.input_audio_buffer.append(audio=a), spoken(tts, "What is the capital of France?")))
        order, audio = [], []
        async for ev in conn:
            if ev.type == "response.output_audio.delta":
                audio.append(ev.delta)
                continue
            order.append(ev.type)
            if ev.type == "conversation.item.input_audio_transcription.completed":
                transcript = ev.transcript
            if ev.type == "response.done":
                done = ev
                break
        await sender
    assert order.index("input_audio_buffer.speech_started") < order.index("input_audio_buffer.speech_stopped")
    assert order.index("input_audio_buffer.speech_stopped") < order.index(
        "conversation.item.input_audio_transcription.completed") < order.index("response.created")
    assert "capital" in transcript.lower() and "france" in transcript.lower()
    assert done.response.status == "completed" and len(pcm_of(audio)) > 12000
    await wait_idle(stack)


async def test_sdk_beta_dialect(stack):
    async with sdk(stack).beta.realtime.connect(model="omniduplex-cascade") as conn:
        await conn.session.update(session={"turn_detection": None, "modalities": ["text", "audio"]})
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}
        )
        await conn.response.create()
        seen, audio = [], []
        async for ev in conn:
            seen.append(ev.type)
            if ev.type == "response.audio.delta":
                audio.append(ev.delta)
            if ev.type == "response.done":
                done = ev
                break
    assert "conversation.item.created" in seen and "response.audio_transcript.delta" in seen
    assert "response.output_audio.delta" not in seen and audio
    assert done.response.status == "completed"
    await wait_idle(stack)


async def test_queue_order_positions_cancel_and_full(stack):
    a = await websockets.connect(ws_url(stack))
    await recv_until(a, "session.created")
    b = await websockets.connect(ws_url(stack))
    assert (await recv_until(b, "queue.position"))["position"] == 1
    c = await websockets.connect(ws_url(stack))
    assert (await recv_until(c, "queue.position"))["position"] == 2
    d = await websockets.connect(ws_url(stack))
    pos_d = await recv_until(d, "queue.position")
    assert pos_d["position"] == 3 and pos_d["queue_length"] == 3
    # capacity 3: the next one is turned away with 1013 and a reason
    e = await websockets.connect(ws_url(stack))
    err = await recv_until(e, "error")
    assert err["error"]["code"] == "queue_full"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(e.recv(), 5)
    assert closed.value.rcvd.code == 1013 and "queue full" in closed.value.rcvd.reason
    # c leaves while queued: dropped at once, d moves up
    await c.close()
    moved = await recv_until(d, "queue.position")
    assert moved["position"] == 2 and moved["queue_length"] == 2
    assert stack.health()["queue_length"] == 2
    # a leaves: b is served next, and hears queue.assigned before session.created
    await a.close()
    kinds = []
    while "session.created" not in kinds:
        kind = json.loads(await asyncio.wait_for(b.recv(), 10))["type"]
        if kind != "queue.position":  # b also heard the queue shrink as others left
            kinds.append(kind)
    assert kinds == ["queue.assigned", "session.recording", "session.created"]
    assert (await recv_until(d, "queue.position"))["position"] == 1
    await b.close()
    await recv_until(d, "queue.assigned")
    await recv_until(d, "session.created")
    await d.close()
    await wait_idle(stack)


async def test_barge_in_cancels_and_stops_audio(stack, tts):
    async with websockets.connect(ws_url(stack)) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "Tell me a long story about a dragon."}]}}))
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 200}}))
        first = await recv_until(ws, "response.output_audio.delta")
        rid = first["response_id"]

        async def send(a: str) -> None:
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": a}))

        sender = asyncio.create_task(stream_speech(send, spoken(tts, "Wait, stop please.")))
        events = []
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 20))
            events.append(ev)
            if ev["type"] == "response.done" and ev["response"]["id"] == rid:
                break
        done = events[-1]
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        assert "input_audio_buffer.speech_started" in [e["type"] for e in events]
        after = []
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            try:
                after.append(json.loads(await asyncio.wait_for(ws.recv(), t_end - time.monotonic())))
            except TimeoutError:
                break
        assert not [e for e in after if e["type"] == "response.output_audio.delta" and e["response_id"] == rid]
        sender.cancel()
    await wait_idle(stack)


async def test_bad_events_get_errors_and_session_survives(stack):
    async with websockets.connect(ws_url(stack)) as ws:
        await recv_until(ws, "session.created")
        bad = [
            "not json", json.dumps({"type": "nope"}), json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}),
            json.dumps({"type": "response.cancel"}),
            json.dumps({"type": "conversation.item.truncate", "item_id": "missing", "audio_end_ms": 10}),
            json.dumps({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}}}),
        ]
        codes = []
        for msg in bad:
            await ws.send(msg)
            codes.append((await recv_until(ws, "error"))["error"]["code"])
        assert codes[1] == "invalid_event_type" and codes[2] == "invalid_base64"
        assert codes[3] == "response_cancel_not_active"
        await ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Be brief."}}))
        assert (await recv_until(ws, "session.updated"))["session"]["instructions"] == "Be brief."
    await wait_idle(stack)


async def test_pause_resume(stack):
    async with websockets.connect(ws_url(stack)) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.pause"}))
        paused = await recv_until(ws, "session.paused")
        assert paused["pause_timeout_s"] > 0
        w = stack.worker_health()
        assert w["state"] == "DUPLEX_PAUSED"
        await ws.send(json.dumps({"type": "session.resume"}))
        await recv_until(ws, "session.resumed")
        # paused longer than the server's limit (2 s here): ended with a clear error and 4002
        await ws.send(json.dumps({"type": "session.pause"}))
        await recv_until(ws, "session.paused")
        err = await recv_until(ws, "error", timeout=5)
        assert err["error"]["code"] == "pause_timeout"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
        assert closed.value.rcvd.code == 4002
    await wait_idle(stack)


async def test_items_images_truncate_delete_retrieve(stack):
    import cv2

    image = np.full((120, 160, 3), (30, 160, 40), dtype=np.uint8)  # green
    jpeg = base64.b64encode(cv2.imencode(".jpg", image)[1].tobytes()).decode()
    async with websockets.connect(ws_url(stack)) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
        await recv_until(ws, "session.updated")
        await ws.send(json.dumps({"type": "input_image_buffer.append", "image": jpeg}))
        assert (await recv_until(ws, "input_image_buffer.appended"))["frames_received"] == 1
        await ws.send(json.dumps({"type": "input_image_buffer.append", "image": base64.b64encode(b"junk").decode()}))
        assert (await recv_until(ws, "error"))["error"]["code"] == "invalid_image"
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{jpeg}"}]}}))
        added = await recv_until(ws, "conversation.item.added")
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": added["item"]["id"]}))
        retrieved = await recv_until(ws, "conversation.item.retrieved")
        # echoed as created (the frame describer's note is what the LLM reads, not shown here)
        assert retrieved["item"]["content"] == [{"type": "input_image"}] and retrieved["item"] == added["item"]
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "Describe Paris in two sentences."}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        done = await recv_until(ws, "response.done", timeout=60)
        item_id = done["response"]["output"][0]["id"]
        await ws.send(json.dumps({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                                  "audio_end_ms": 300}))
        assert (await recv_until(ws, "conversation.item.truncated"))["audio_end_ms"] == 300
        await ws.send(json.dumps({"type": "conversation.item.delete", "item_id": added["item"]["id"]}))
        await recv_until(ws, "conversation.item.deleted")
        await ws.send(json.dumps({"type": "conversation.item.delete", "item_id": added["item"]["id"]}))
        assert (await recv_until(ws, "error"))["error"]["code"] == "item_not_found"
    await wait_idle(stack)


async def test_no_leaked_slots_after_random_disconnects(stack):
    rng = random.Random(7)
    modes = {"assigned": 0, "created": 0, "mid_response": 0, "queued": 0, "abort": 0}
    for _ in range(200):
        mode = rng.choice(list(modes))
        modes[mode] += 1
        if mode == "queued":
            holder = await websockets.connect(ws_url(stack))
            await recv_until(holder, "session.created")
            waiter = await websockets.connect(ws_url(stack))
            await recv_until(waiter, "queue.position")
            await waiter.close()
            await holder.close()
            continue
        ws = await websockets.connect(ws_url(stack))
        if mode == "assigned":
            await recv_until(ws, "queue.assigned")
        elif mode == "created":
            await recv_until(ws, "session.created")
        elif mode in ("mid_response", "abort"):
            await recv_until(ws, "session.created")
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "Count to twenty."}]}}))
            await ws.send(json.dumps({"type": "response.create"}))
            await recv_until(ws, "response.output_audio_transcript.delta")
        if mode == "abort":
            ws.transport.abort()  # TCP abort, no close frame
        else:
            await ws.close()
    assert all(modes.values())
    await wait_idle(stack, timeout=3.0)


async def test_worker_killed_mid_session(tmp_path):
    s = Stack(tmp_path, workers=1).start()
    try:
        async with websockets.connect(f"ws://127.0.0.1:{s.port}/v1/realtime") as ws:
            await recv_until(ws, "session.created")
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "Tell me a long story."}]}}))
            await ws.send(json.dumps({"type": "response.create"}))
            await recv_until(ws, "response.output_audio_transcript.delta")
            t0 = time.monotonic()
            s.kill("worker0")
            err = await recv_until(ws, "error", timeout=2)
            assert err["error"]["code"] == "worker_failed"
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), 2)
            assert closed.value.rcvd.code == 1011
            assert time.monotonic() - t0 < 2.0
        health = s.health()
        assert health["workers_healthy"] == 0 and health["slots_busy"] == 0
        # it comes back once healthy again
        s.start_worker(0)
        s.wait_healthy(1, timeout=120)
        async with websockets.connect(f"ws://127.0.0.1:{s.port}/v1/realtime") as ws:
            await recv_until(ws, "session.created")
    finally:
        s.stop()


async def test_item_with_a_bad_part_adds_nothing_and_names_the_event(stack):
    """A later bad part rejects the whole item: no half-added history the client never heard of."""
    async with websockets.connect(ws_url(stack)) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "conversation.item.create", "event_id": "evt_bad", "item": {
            "type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Remember the word banana."},
                {"type": "input_image", "image_url": "data:image/jpeg;base64,@@not-base64@@"}]}}))
        err = await recv_until(ws, "error")
        assert err["error"]["code"] == "invalid_base64" and err["error"]["event_id"] == "evt_bad"
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "Hello."}]}}))
        added = await recv_until(ws, "conversation.item.added")
        assert added["previous_item_id"] is None  # the rejected item left nothing behind
    await wait_idle(stack)
