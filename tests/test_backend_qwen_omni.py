"""The ``qwen_omni`` backend, real code end to end on CPU, with tiny random-weight models built in
a temp directory (``tests/tiny_omni.py``): Qwen2.5-Omni through real worker + gateway processes
and the realtime protocol; Qwen3-Omni through the worker app in-process.

Random weights speak noise and write random tokens, so these tests check the plumbing the real
model relies on: streamed text deltas, audio in 24 kHz PCM16 chunks that start before the reply
ends, exact accounting on cancel and truncate, media inputs, voices.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import httpx
import numpy as np
import pytest
import websockets

from tests.stack import Stack
from tests.tiny_omni import build_qwen2_5_omni, build_qwen3_omni

pytestmark = pytest.mark.e2e


def options(path) -> dict:
    # Short replies and pieces: the tiny Talker rarely stops by itself, so the caps bound its work.
    # Greedy Talker: random weights can give a sampler inf/nan probabilities for some draws.
    return {"model_path": str(path), "device": "cpu", "dtype": "float32", "seed": 0, "max_frames": 2,
            "talker_codes_per_token": 6, "token2wav_steps": 4, "talker_sample": False}


@pytest.fixture(scope="module")
def qwen25_model(tmp_path_factory):
    return build_qwen2_5_omni(tmp_path_factory.mktemp("qwen25") / "model")


@pytest.fixture(scope="module")
def qwen_stack(tmp_path_factory, qwen25_model):
    s = Stack(tmp_path_factory.mktemp("qwen_stack"), workers=1,
              backend={"name": "qwen_omni", "options": options(qwen25_model)}).start(timeout=240)
    yield s
    s.stop()


def ws_url(stack) -> str:
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-qwen_omni&extensions=all"


async def recv_until(ws, kind: str, timeout: float = 60.0, seen: list | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {kind}; saw {[e['type'] for e in (seen or [])][-15:]}")
        ev = json.loads(await asyncio.wait_for(ws.recv(), left))
        if seen is not None:
            seen.append(ev)
        if ev["type"] == "error" and kind != "error":
            raise AssertionError(f"error event: {ev['error']}")
        if ev["type"] == kind:
            return ev


async def send(ws, kind: str, **fields) -> None:
    await ws.send(json.dumps({"type": kind, **fields}))


def pcm16(seconds: float, rate: int = 16000, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * rate)) * 3000).astype("<i2").tobytes()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def jpeg(colour: tuple[int, int, int], size: int = 96) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="JPEG")
    return buf.getvalue()


def audio_of(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")


async def turn_based(ws, rate: int = 16000) -> None:
    await recv_until(ws, "session.created")
    # Greedy Thinker for the same reason as the greedy Talker (options()).
    await send(ws, "session.update", session={"type": "realtime", "temperature": 0, "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": rate}, "turn_detection": None}}})
    await recv_until(ws, "session.updated")


async def test_audio_and_text_in_streamed_text_and_speech_out(qwen_stack):
    async with websockets.connect(ws_url(qwen_stack), max_size=None) as ws:
        await turn_based(ws)
        for i in range(0, 32000, 3200):  # 2 s of "speech" in 100 ms appends, then an explicit commit
            await send(ws, "input_audio_buffer.append", audio=b64(pcm16(2.0)[i * 2:(i + 3200) * 2]))
        await send(ws, "input_audio_buffer.commit")
        committed = await recv_until(ws, "input_audio_buffer.committed")
        await send(ws, "conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello there!"}]})
        await recv_until(ws, "conversation.item.done")
        await send(ws, "response.create", response={"max_output_tokens": 24})
        events: list[dict] = []
        done = await recv_until(ws, "response.done", seen=events)
        metrics = await recv_until(ws, "session.metrics")
    kinds = [e["type"] for e in events]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"]
    pcm = audio_of(events)
    assert committed["item_id"]
    assert done["response"]["status"] in ("completed", "incomplete")
    assert len(deltas) >= 3, "text streams token by token"
    transcript = done["response"]["output"][0]["content"][0]["transcript"]
    assert "".join(deltas) == transcript
    assert pcm and len(pcm) % 2 == 0
    samples = np.frombuffer(pcm, dtype="<i2")
    assert np.abs(samples).max() > 0, "the vocoder produced sound"
    assert kinds.count("response.output_audio.delta") >= 2
    assert all(len(base64.b64decode(e["delta"])) <= 4800 for e in events if e["type"] == "response.output_audio.delta")
    assert metrics["metrics"]["ttfp_ms"] is not None
    assert abs(metrics["metrics"]["audio_ms"] - len(samples) / 24) < 1.0


async def test_cancel_and_truncate_count_only_what_was_sent(qwen_stack):
    async with websockets.connect(ws_url(qwen_stack), max_size=None) as ws:
        await turn_based(ws)
        await send(ws, "conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a story."}]})
        await send(ws, "response.create", response={"max_output_tokens": 200})
        events: list[dict] = []
        first = await recv_until(ws, "response.output_audio.delta", seen=events)
        await send(ws, "response.cancel")
        done = await recv_until(ws, "response.done", seen=events)
        metrics = await recv_until(ws, "session.metrics")
        heard_ms = len(audio_of(events)) // 2 / 24
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "client_cancelled"
        # the reply holds exactly the audio that went out: nothing after the cancel
        assert abs(metrics["metrics"]["audio_ms"] - heard_ms) < 1.0
        item_id = first["item_id"]
        # beyond what was sent is refused (asked first: a truncate to 0 ms may remove the item)
        await send(ws, "conversation.item.truncate", item_id=item_id, content_index=0,
                   audio_end_ms=int(heard_ms) + 5000)
        err = await recv_until(ws, "error")
        assert err["error"]["code"] == "invalid_audio"
        await send(ws, "conversation.item.truncate", item_id=item_id, content_index=0,
                   audio_end_ms=int(heard_ms // 2))
        truncated = await recv_until(ws, "conversation.item.truncated")
        assert truncated["audio_end_ms"] == int(heard_ms // 2)
        # nothing more arrives for the cancelled reply, and the session takes a new one
        await send(ws, "response.create", response={"output_modalities": ["text"], "max_output_tokens": 4})
        later: list[dict] = []
        await recv_until(ws, "response.done", seen=later)
        assert not [e for e in later if e.get("response_id") == done["response"]["id"]]


async def test_server_vad_turn_images_frames_and_voices(qwen_stack, tts):
    speech = b"".join(tts.synthesize("What colour is the square in the picture?", deterministic=True))
    silence = b"\x00\x00" * 24000
    async with websockets.connect(ws_url(qwen_stack), max_size=None) as ws:
        created = await recv_until(ws, "session.created")
        assert created["session"]["audio"]["output"]["voice"] == "Chelsie"  # the model's first voice
        await send(ws, "session.update", session={"type": "realtime", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 24000},
                      "turn_detection": {"type": "server_vad", "silence_duration_ms": 400}},
            "output": {"voice": "ethan"}}})
        updated = await recv_until(ws, "session.updated")
        assert updated["session"]["audio"]["output"]["voice"] == "Ethan"
        await send(ws, "session.update", session={"type": "realtime", "audio": {"output": {"voice": "alloy"}}})
        assert (await recv_until(ws, "session.updated"))["session"]["audio"]["output"]["voice"] == "Chelsie"
        # model_duplex is MiniCPM-o's: this backend refuses it by name
        await send(ws, "session.update", session={"type": "realtime", "audio": {"input": {
            "turn_detection": {"type": "model_duplex"}}}})
        err = await recv_until(ws, "error")
        assert "model_duplex" in err["error"]["message"]
        # an image item and two camera frames go into the prompt with the spoken question
        await send(ws, "conversation.item.create", item={"type": "message", "role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/jpeg;base64," + b64(jpeg((200, 30, 30)))}]})
        await recv_until(ws, "conversation.item.done")
        for colour in ((0, 0, 255), (0, 255, 0)):
            await send(ws, "input_image_buffer.append", image=b64(jpeg(colour)))
            await recv_until(ws, "input_image_buffer.appended")
        await asyncio.sleep(0.6)  # the worker allows bursts of two frames, then two per second
        await send(ws, "input_image_buffer.append", image=b64(b"not an image"))
        assert (await recv_until(ws, "error"))["error"]["code"] == "invalid_image"
        step = 24000 * 2 // 25  # 40 ms
        events: list[dict] = []
        stream = silence + speech + silence * 2
        for i in range(0, len(stream), step):
            await send(ws, "input_audio_buffer.append", audio=b64(stream[i:i + step]))
        await recv_until(ws, "response.done", seen=events, timeout=90)
        # the Thinker transcribes the turn once the reply is out (random weights: random words)
        transcript = await recv_until(ws, "conversation.item.input_audio_transcription.completed")
    kinds = [e["type"] for e in events]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("input_audio_buffer.speech_stopped")
    assert kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
    assert transcript["item_id"] == next(e for e in events if e["type"] == "input_audio_buffer.committed")["item_id"]
    assert audio_of(events)


async def test_first_piece_is_small_and_spoken_while_the_thinker_writes(qwen25_model):
    """In-process: the reply is spoken in several pieces, the first one a couple of words, and
    the first piece reaches the Talker before the Thinker has finished."""
    from core.processors import create_backend
    from core.conversation import ConversationConfig
    from tests.helpers import Collector

    backend = create_backend("qwen_omni", options(qwen25_model) | {"warm_up": False})
    await asyncio.to_thread(backend.load)
    calls = []
    speak = backend.speak_piece

    def spy(state, context_ids, *args):
        calls.append((time.perf_counter(), context_ids.shape[1]))
        return speak(state, context_ids, *args)

    backend.speak_piece = spy
    try:
        conv = backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=60,
                                                            temperature=1.0))
        events = Collector(conv)
        await conv.add_text("Tell me about the park, please.")
        await conv.create_response()
        done = await events.wait_for("response_done", timeout=120)
        text_times = [t for t, e in events.events if e.type == "text_delta"]
        segments = conv._past_segments[done.item_id]
        assert len(segments) >= 2 and len(segments[0].text.split()) <= 3
        assert calls[0][0] < text_times[-1], "the first piece was spoken before the last token was written"
        assert calls[1][1] > calls[0][1], "later pieces see the reply so far as context"
        assert done.audio_ms == pytest.approx(sum(s.emitted_samples for s in segments) / 24, abs=0.5)
        await conv.close()
    finally:
        backend.close()


async def test_chat_completions_rest_api_on_this_backend(qwen_stack):
    """Our own OpenAI REST API fronts the omni model too: streamed text + pcm16 speech."""
    body = {"model": "omniduplex-qwen_omni", "stream": True, "max_tokens": 16, "modalities": ["text", "audio"],
            "audio": {"voice": "Ethan", "format": "pcm16"},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi!"}]}]}
    audio, text = [], []
    client = httpx.AsyncClient(timeout=60)
    async with client, client.stream("POST", f"{qwen_stack.url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                a = delta.get("audio") or {}
                if a.get("data"):
                    audio.append(a["data"])
                if a.get("transcript"):
                    text.append(a["transcript"])
    assert audio and text


def test_qwen3_omni_through_the_worker_app(tmp_path):
    """Qwen3-Omni (MoE Thinker and Talker, code predictor, Code2Wav) runs on CPU in transformers:
    the same backend, through the worker's realtime endpoint in-process."""
    from fastapi.testclient import TestClient

    from core.config import AppConfig
    from worker.app import create_app

    model = build_qwen3_omni(tmp_path / "model")
    config = AppConfig.model_validate({"data_dir": str(tmp_path / "data"), "recording": {"enabled": False},
                                       "backend": {"name": "qwen_omni", "options": options(model)}})
    with TestClient(create_app(config)) as client:
        deadline = time.monotonic() + 120
        while not client.get("/health").json()["model_loaded"]:
            assert client.get("/health").json()["state"] != "ERROR", client.get("/health").json()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        health = client.get("/health").json()
        assert health["backend"] == "qwen_omni" and "audio_output" in health["capabilities"]
        # Random weights can put inf/nan in a sampling step for some draws; fix the draws (the
        # worker runs in this process) so the test checks the plumbing, not luck.
        import torch

        torch.manual_seed(0)
        with client.websocket_connect("/ws/realtime?model=omniduplex-qwen_omni&extensions=all") as ws:
            def until(kind):
                seen = []
                while True:
                    ev = ws.receive_json()
                    seen.append(ev)
                    assert ev["type"] != "error", ev
                    if ev["type"] == kind:
                        return ev, seen

            created, _ = until("session.created")
            assert created["session"]["audio"]["output"]["voice"] in ("chelsie", "ethan")
            # Greedy Thinker: random weights can give inf/nan probabilities to a sampler.
            ws.send_json({"type": "session.update", "session": {"type": "realtime", "temperature": 0, "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}})
            until("session.updated")
            ws.send_json({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_audio", "audio": b64(pcm16(1.0))},
                {"type": "input_text", "text": "What do you hear?"}]}})
            until("conversation.item.done")
            # The Talker always samples; with random weights a draw can still hit inf/nan, which the
            # backend reports as response_failed. That is the model, not the plumbing: try again.
            for _attempt in range(3):
                ws.send_json({"type": "response.create", "response": {"max_output_tokens": 12}})
                seen = []
                while True:
                    ev = ws.receive_json()
                    seen.append(ev)
                    if ev["type"] == "response.done":
                        break
                failed = [e for e in seen if e["type"] == "error"]
                assert all(e["error"]["code"] == "response_failed" for e in failed), failed
                if not failed:
                    break
            done, events = seen[-1], seen
    assert done["response"]["status"] in ("completed", "incomplete")
    assert [e for e in events if e["type"] == "response.output_audio_transcript.delta"]
    assert audio_of(events)


def test_supervisor_plans_one_worker_per_visible_gpu(tmp_path):
    """start_all.sh -> supervisor: a GPU backend gets one worker per visible GPU, each pinned with
    CUDA_VISIBLE_DEVICES; a CPU device, the cascade, or no GPU leave the config alone."""
    from core.config import AppConfig
    from launcher.supervisor import gpu_plan

    (tmp_path / "config.json").write_text("{}")
    gpu = AppConfig.model_validate({"backend": {"name": "qwen_omni", "options": {"model_path": str(tmp_path)}}})
    count, env = gpu_plan(gpu, None, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert count == 2 and env == {"worker 0": {"CUDA_VISIBLE_DEVICES": "2"}, "worker 1": {"CUDA_VISIBLE_DEVICES": "3"}}
    count, env = gpu_plan(gpu, 3, {"CUDA_VISIBLE_DEVICES": "0,1"})  # --workers wins; GPUs shared in turn
    assert count is None and [e["CUDA_VISIBLE_DEVICES"] for e in env.values()] == ["0", "1", "0"]
    assert gpu_plan(gpu, None, {"CUDA_VISIBLE_DEVICES": ""}) == (None, {})
    cpu = AppConfig.model_validate({"backend": {"name": "qwen_omni", "options": {"device": "cpu"}}})
    assert gpu_plan(cpu, None, {"CUDA_VISIBLE_DEVICES": "0"}) == (None, {})
    assert gpu_plan(AppConfig(), None, {"CUDA_VISIBLE_DEVICES": "0"}) == (None, {})
