"""The ``minicpm_o`` backend against ``tests/minicpm_double``: a test double of MiniCPM-o 4.5's
remote code (the documented method signatures, fixed replies, every call logged to
``calls.jsonl``), loaded the real way (``AutoModel.from_pretrained(trust_remote_code=True)``)
in a real worker behind a real gateway. What this cannot show without the weights is listed in
docs/backends.md.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import websockets

from core.media import write_wav as write_wav_file
from tests.support.realtime_client import recv_until
from tests.support.stack import Stack


DOUBLE = Path(__file__).resolve().parents[1] / "support" / "minicpm_double"
REPLY = "I see and hear you, friend."


def tone_wav(path: Path, seconds: float, freq: float, rate: int = 16000) -> str:
    t = np.arange(int(seconds * rate)) / rate
    return str(write_wav_file(path, (0.2 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2"), rate))


def build_double(root: Path) -> Path:
    """A model directory laid out as MiniCPM-o's is: config.json with ``auto_map`` pointing at
    the remote code beside it, and a weights file."""
    import torch
    from safetensors.torch import save_file

    model = root / "MiniCPM-o-double"
    model.mkdir(parents=True)
    for f in DOUBLE.glob("*.py"):
        shutil.copy(f, model / f.name)
    (model / "config.json").write_text(json.dumps({
        "model_type": "minicpmo_double", "architectures": ["MiniCPMODouble"],
        "auto_map": {"AutoConfig": "configuration_minicpmo_double.MiniCPMODoubleConfig",
                     "AutoModel": "modeling_minicpmo_double.MiniCPMODouble"},
    }))
    save_file({"scale": torch.ones(1)}, str(model / "model.safetensors"))
    return model


@pytest.fixture(scope="module")
def double_dir(tmp_path_factory):
    return build_double(tmp_path_factory.mktemp("minicpm"))


@pytest.fixture(scope="module")
def mini_stack(tmp_path_factory, double_dir):
    voices = {"Anna": tone_wav(double_dir / "anna.wav", 1.0, 220), "Ben": tone_wav(double_dir / "ben.wav", 1.5, 180)}
    s = Stack(tmp_path_factory.mktemp("minicpm_stack"), workers=1, backend={"name": "minicpm_o", "options": {
        "model_path": str(double_dir), "device": "cpu", "dtype": "float32", "voices": voices}}).start(timeout=180)
    yield s
    s.stop()


def calls(double_dir: Path) -> list[dict]:
    with open(double_dir / "calls.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def url(stack) -> str:
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-minicpm_o&extensions=all"


def pcm_of(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")


async def say(ws, text: str, **response) -> tuple[dict, list[dict]]:
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    await ws.send(json.dumps({"type": "response.create", "response": response}))
    events: list[dict] = []
    done = await recv_until(ws, "response.done", log=events)
    return done, events


async def test_loads_through_remote_code_and_answers_a_mixed_turn(mini_stack, double_dir):
    log = calls(double_dir)
    assert log[0] == {"method": "init_tts", "streaming": True, "n_timesteps": 10, "init_flags": [True, True, True]}
    jpeg = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (80, 60), (200, 100, 0)).save(jpeg, format="JPEG")
    clip = (np.sin(np.arange(16000) / 5) * 8000).astype("<i2").tobytes()
    async with websockets.connect(url(mini_stack), max_size=None) as ws:
        created = await recv_until(ws, "session.created")
        assert created["session"]["audio"]["output"]["voice"] == "Anna"
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None},
            "output": {"voice": "ben"}}}}))
        assert (await recv_until(ws, "session.updated"))["session"]["audio"]["output"]["voice"] == "Ben"
        # no function calling on this backend: tools are refused, naming it
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "tools": [
            {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}]}}))
        error = (await recv_until(ws, "error"))["error"]
        assert "minicpm_o" in error["message"] and error["param"].endswith("tools")
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_audio", "audio": b64(clip)},
                        {"type": "input_image", "image_url": "data:image/jpeg;base64," + b64(jpeg.getvalue())},
                        {"type": "input_text", "text": "What is this?"}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        events: list[dict] = []
        done = await recv_until(ws, "response.done", log=events)
    deltas = [e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"]
    assert "".join(deltas) == REPLY and len(deltas) == 3 and done["response"]["status"] == "completed"
    assert len(pcm_of(events)) // 2 == 3 * 7200  # three 0.3 s pieces at 24 kHz
    log = calls(double_dir)
    prefills = [c for c in log if c["method"] == "streaming_prefill"]
    # one message, one item: its clip, image and text go in together, in the client's order
    assert prefills[-1]["kinds"] == ["audio", "image", "text"] and prefills[-1]["is_last_chunk"]
    assert {"method": "init_token2wav_cache", "samples": 24000} in log  # Ben's 1.5 s reference
    assert [c for c in log if c["method"] == "streaming_generate"][-1]["generate_audio"] is True


async def test_kv_cache_reused_until_the_history_is_edited(mini_stack, double_dir):
    async with websockets.connect(url(mini_stack), max_size=None) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"turn_detection": None}}}}))
        await recv_until(ws, "session.updated")
        first, _ = await say(ws, "First question.")
        mark = len(calls(double_dir))
        await say(ws, "Second question.", output_modalities=["text"])
        new = calls(double_dir)[mark:]
        # only the new user message is prefilled: the model's cache still holds the rest
        assert [c["method"] for c in new if c["method"] in ("reset_session", "streaming_prefill")] == \
            ["streaming_prefill"]
        assert next(c for c in new if c["method"] == "streaming_generate")["generate_audio"] is False
        heard = 300  # ms: the first reply's first piece (0.3 s), so "I see" is what was heard
        await ws.send(json.dumps({"type": "conversation.item.truncate", "item_id": first["response"]["output"][0]["id"],
                                  "content_index": 0, "audio_end_ms": heard}))
        await recv_until(ws, "conversation.item.truncated")
        mark = len(calls(double_dir))
        await say(ws, "Third question.", output_modalities=["text"])
        new = calls(double_dir)[mark:]
        methods = [c["method"] for c in new if c["method"] in ("reset_session", "streaming_prefill")]
        assert methods[0] == "reset_session" and methods.count("streaming_prefill") == 5  # all of it again
        texts = [c["text"] for c in new if c["method"] == "streaming_prefill"]
        assert texts == ["First question.", "I see", "Second question.", REPLY, "Third question."]  # as heard


async def test_cancel_closes_the_generator_and_counts_exact_audio(mini_stack, double_dir):
    async with websockets.connect(url(mini_stack), max_size=None) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"turn_detection": None}}}}))
        await recv_until(ws, "session.updated")
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Something slow."}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        events: list[dict] = []
        await recv_until(ws, "response.output_audio.delta", log=events)
        await ws.send(json.dumps({"type": "response.cancel"}))
        done = await recv_until(ws, "response.done", log=events)
        metrics = await recv_until(ws, "session.metrics")
        assert done["response"]["status"] == "cancelled"
        assert abs(metrics["metrics"]["audio_ms"] - len(pcm_of(events)) / 48) < 1.0
        deadline = time.monotonic() + 5
        while calls(double_dir)[-1]["method"] != "generate_closed":
            assert time.monotonic() < deadline, "the model's generator was not closed"
            await asyncio.sleep(0.05)
        generated = [c for c in calls(double_dir) if c["method"] == "streaming_generate"]
        assert len(generated) and len(pcm_of(events)) // 2 < 40 * 7200
        # after a cancel the cache holds words the history does not: the next turn starts afresh
        mark = len(calls(double_dir))
        await say(ws, "Go on.", output_modalities=["text"])
        assert calls(double_dir)[mark]["method"] == "reset_session"


async def test_speech_over_a_reply_in_server_vad_cuts_it(mini_stack, tts):
    """server_vad on MiniCPM-o: a long voice over its reply is a barge-in (the omni backends judge by
    length); the reply is cancelled for the turn and the session goes on. (The old subclass's
    ``cancel_response`` override took no barge-in arguments: this raised inside the audio path.)"""
    speech = b"".join(tts.synthesize("Hold on, I would like to ask you about something else, please.",
                                     deterministic=True))  # 24 kHz, ~3 s
    async with websockets.connect(url(mini_stack), max_size=None) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": {"type": "server_vad"}}}}}))
        await recv_until(ws, "session.updated")
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Something slow."}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        events: list[dict] = []
        first = await recv_until(ws, "response.output_audio.delta", log=events)
        stream = speech + b"\x00\x00" * 24000 * 2
        step = 24000 * 2 // 50  # 20 ms, at real time: the reply is still playing while the user speaks
        for i in range(0, len(stream), step):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(stream[i:i + step])}))
            await asyncio.sleep(0.02)
        done = await recv_until(ws, "response.done", log=events, timeout=30)
        kinds = [e["type"] for e in events]
        assert "error" not in kinds, [e for e in events if e["type"] == "error"]
        assert "input_audio_buffer.speech_started" in kinds
        assert done["response"]["id"] == first["response_id"]
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"


async def test_model_duplex_the_model_decides_when_to_speak(mini_stack, double_dir, tts):
    speech = b"".join(tts.synthesize("Hello, can you hear me?", deterministic=True))  # 24 kHz
    jpeg = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (64, 64), (0, 0, 200)).save(jpeg, format="JPEG")
    async with websockets.connect(url(mini_stack), max_size=None) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": {"type": "model_duplex"}}}}}))
        updated = await recv_until(ws, "session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"]["type"] == "model_duplex"
        await ws.send(json.dumps({"type": "response.create"}))
        err = await recv_until(ws, "error")
        assert "model decides when to speak" in err["error"]["message"]
        await ws.send(json.dumps({"type": "input_image_buffer.append", "image": b64(jpeg.getvalue())}))
        await recv_until(ws, "input_image_buffer.appended")
        stream = b"\x00\x00" * 12000 + speech + b"\x00\x00" * 24000 * 3
        step = 24000 * 2 // 10
        events: list[dict] = []
        for i in range(0, len(stream), step):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(stream[i:i + step])}))
            await asyncio.sleep(0.01)
        done = await recv_until(ws, "response.done", log=events, timeout=60)
        kinds = [e["type"] for e in events]
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
        assert "input_audio_buffer.speech_started" in kinds and "input_audio_buffer.committed" not in kinds
        assert text == "Hi! Hello there." and done["response"]["status"] == "completed"
        assert len(pcm_of(events)) // 2 == 2 * 24000  # two spoken units of one second
        # back to server_vad: the duplex session is stopped
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
            "turn_detection": {"type": "server_vad"}}}}}))
        await recv_until(ws, "session.updated")
    await asyncio.sleep(0.3)
    log = calls(double_dir)
    prepare = [c for c in log if c["method"] == "duplex_prepare"][-1]
    assert prepare["prefix"].startswith("<|im_start|>system\n") and prepare["suffix"] == "<|audio_end|><|im_end|>"
    assert prepare["ref_samples"] == 16000  # Anna, the default voice
    units = [c for c in log if c["method"] == "duplex_prefill"]
    assert units and all(u["samples"] == 16000 for u in units)  # one second at 16 kHz per unit
    assert units[0]["frames"] == 1 and all(u["frames"] == 0 for u in units[1:])  # each frame goes in once
    assert any(c["method"] == "duplex_stop" for c in log)


async def test_a_live_session_on_minicpm_o_is_driven_by_the_models_own_duplex(mini_stack, double_dir, tts):
    """Issue 48: a backend that decides turns itself drives a Live session natively (its
    ``model_duplex``), not the semantic turn policy; every server event validates as Live."""
    from core.live_events import server_event_error

    speech = b"".join(tts.synthesize("Hello, can you hear me?", deterministic=True))  # 24 kHz
    live_url = f"ws://127.0.0.1:{mini_stack.port}/v1/live/sessions"
    async with websockets.connect(live_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "session": {"model": "omniduplex-minicpm_o"}}))
        events = [json.loads(await ws.recv())]
        assert events[0]["type"] == "session.started", events
        stream = b"\x00\x00" * 12000 + speech + b"\x00\x00" * 24000 * 3
        step = 24000 * 2 // 10
        for i in range(0, len(stream), step):
            await ws.send(json.dumps({"type": "session.input_audio.append", "audio": b64(stream[i:i + step])}))
            await asyncio.sleep(0.01)
        async with asyncio.timeout(60):
            while events[-1]["type"] != "session.usage.updated":  # after the reply
                events.append(json.loads(await ws.recv()))
    said = "".join(e["delta"] for e in events if e["type"] == "session.output_transcript.delta")
    assert said == "Hi! Hello there.", [e["type"] for e in events]
    audio = sum(len(base64.b64decode(e["delta"])) for e in events if e["type"] == "session.output_audio.delta")
    assert audio // 2 == 2 * 24000  # the model's two spoken units of one second
    assert not [e for e in events if e["type"] == "error"]
    invalid = [f"{e['type']}: {why}" for e in events if (why := server_event_error(e))]
    assert not invalid, invalid[:3]
    assert any(c["method"] == "duplex_prepare" for c in calls(double_dir)), "the model's own duplex mode ran"
