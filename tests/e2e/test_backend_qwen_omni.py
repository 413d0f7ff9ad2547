"""The ``qwen_omni`` backend, real code end to end on CPU, with tiny random-weight models built in
a temp directory (``tests/support/tiny_omni.py``): Qwen2.5-Omni through real worker + gateway processes
and the realtime protocol; Qwen3-Omni through the worker app in-process.

Random weights speak noise and write random tokens, so these tests check the plumbing the real
model relies on: streamed text deltas, audio in 24 kHz PCM16 chunks that start before the reply
ends, exact accounting on cancel and truncate, media inputs, voices.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import time

import httpx
import numpy as np
import pytest
import websockets

from tests.support import realtime_client
from tests.support.stack import Stack, share_model_cache
from tests.support.tiny_omni import build_qwen2_5_omni, build_qwen3_omni



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


# a model's first reply may take a minute; an error event fails at once
recv_until = functools.partial(realtime_client.recv_until, timeout=60.0, raise_on_error=True)


def ws_url(stack) -> str:
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-qwen_omni&extensions=all"


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
        done = await recv_until(ws, "response.done", log=events)
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
        first = await recv_until(ws, "response.output_audio.delta", log=events)
        await send(ws, "response.cancel")
        done = await recv_until(ws, "response.done", log=events)
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
        await recv_until(ws, "response.done", log=later)
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
        await recv_until(ws, "response.done", log=events, timeout=90)
        # the Thinker transcribes the turn once the reply is out (random weights: random words)
        transcript = await recv_until(ws, "conversation.item.input_audio_transcription.completed")
    kinds = [e["type"] for e in events]
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("input_audio_buffer.speech_stopped")
    assert kinds.index("input_audio_buffer.committed") < kinds.index("response.created")
    assert transcript["item_id"] == next(e for e in events if e["type"] == "input_audio_buffer.committed")["item_id"]
    assert audio_of(events)


async def one_reply(backend, max_output_tokens: int, temperature: float = 1.0):
    """In-process: one text turn and its spoken reply; (conversation, its events, response_done)."""
    from core.conversation import ConversationConfig
    from tests.support.helpers import Collector

    conv = backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=max_output_tokens,
                                                        temperature=temperature))
    events = Collector(conv)
    await conv.add_text("Tell me about the park, please.")
    await conv.create_response()
    return conv, events, await events.wait_for("response_done", timeout=120)


async def test_first_piece_is_small_and_spoken_while_the_thinker_writes(qwen25_model):
    """In-process: the reply is spoken in several pieces, the first one a couple of words, and
    the first piece reaches the Talker before the Thinker has finished."""
    from core.processors import create_backend

    backend = create_backend("qwen_omni", options(qwen25_model) | {"warm_up": False})
    await asyncio.to_thread(backend.load)
    calls = []
    speak = backend.speak_piece

    def spy(state, context_ids, *args, **kwargs):
        calls.append((time.perf_counter(), context_ids.shape[1]))
        return speak(state, context_ids, *args, **kwargs)

    backend.speak_piece = spy
    try:
        conv, events, done = await one_reply(backend, max_output_tokens=60)
        text_times = [t for t, e in events.events if e.type == "text_delta"]
        segments = conv.replies.segments(done.item_id)
        assert len(segments) >= 2 and len(segments[0].text.split()) <= 3
        assert calls[0][0] < text_times[-1], "the first piece was spoken before the last token was written"
        assert calls[1][1] > calls[0][1], "later pieces see the reply so far as context"
        assert done.audio_ms == pytest.approx(sum(s.emitted_samples for s in segments) / 24, abs=0.5)
        await conv.close()
    finally:
        backend.close()


async def test_a_replys_first_audio_leaves_before_the_talker_ends_its_first_piece(qwen25_model):
    """``first_audio_blocks`` 1 (the default): the first piece's first DiT block (12 codes, 240 ms)
    reaches the reply when the Talker has written 24 of that piece's frames (the block and the one
    ahead), while it writes the rest, and the rest after it; the reply is as
    long as with the first piece spoken whole (the same codes: a greedy Talker), and only the
    first piece is split."""
    from core.processors import create_backend

    lengths = {}
    for blocks in (1, 0):
        backend = create_backend("qwen_omni", options(qwen25_model) | {"warm_up": False, "first_audio_blocks": blocks})
        await asyncio.to_thread(backend.load)
        speak, pieces, passes = backend.speak_piece, [], []  # passes: the Talker's forwards, one a codec frame
        hook = backend.model.talker.model.register_forward_pre_hook(lambda *_, _passes=passes: _passes.append(1))

        def spy(*args, early=None, _pieces=pieces, _speak=speak, _passes=passes):
            piece = {"early": []}
            _pieces.append(piece)
            _passes.clear()

            def early_spy(wav):
                piece["early"].append((len(_passes), len(wav)))
                early(wav)

            rest = _speak(*args, early=early_spy if early else None)
            piece.update(passes=len(_passes), rest=len(rest))
            return rest

        backend.speak_piece = spy
        try:
            conv, events, done = await one_reply(backend, max_output_tokens=24, temperature=0.0)
            lengths[blocks] = done.audio_ms
            assert len(pieces) >= 2 and all(not p["early"] for p in pieces[1:]), "only the first piece is split"
            if blocks:
                (passes_then, samples), = pieces[0]["early"]
                assert samples == 12 * 480 and pieces[0]["rest"] > 0, "one block of audio first, then the rest"
                assert passes_then == 24 < pieces[0]["passes"], "out when the Talker had 24 frames, while it wrote on"
            else:
                assert not pieces[0]["early"]
            await conv.close()
        finally:
            hook.remove()
            backend.close()
    assert lengths[1] == lengths[0] > 0


async def test_a_spoken_reply_is_the_same_audio_on_either_path(qwen25_model):
    """The backend end to end: one text turn, its reply spoken piece by piece, with the Talker on
    transformers' generate and Token2Wav, and on the static cache and solve: the same text and the
    same audio. (A greedy Thinker: its sampling draws from the generator the vocoder's noise comes
    from, on another thread, so a sampled reply's audio differs run to run on either path.)"""
    from core.processors import create_backend

    heard = {}
    for decode in ("eager", "static"):
        backend = create_backend("qwen_omni", options(qwen25_model) | {"warm_up": False, "speech_decode": decode})
        await asyncio.to_thread(backend.load)
        try:
            conv, events, done = await one_reply(backend, max_output_tokens=24, temperature=0.0)
            audio = b"".join(e.pcm for e in events.of("audio_chunk"))
            text = "".join(e.delta for e in events.of("text_delta"))
            heard[decode] = (text, audio, done.audio_ms)
            await conv.close()
        finally:
            backend.close()
    assert heard["eager"][1], "the reply was spoken"
    assert heard["static"] == heard["eager"]


async def test_talker_never_writes_a_code_the_vocoder_cannot_take(tmp_path):
    """Qwen2.5's vocoder has fewer codes than the Talker has ids (8193 against 8448); a Talker that
    wrote one of the others crashed the vocoder's embedding (on a GPU: a device-side assert that
    leaves the worker unusable). Here 56 of the tiny Talker's 64 ids have no vocoder code: every
    piece is still spoken, and the session's reply ends normally."""
    from core.processors import create_backend
    from core.processors.qwen_loading import codec_suppressed

    assert codec_suppressed(8448, 8193, 8293, (8292, 8294)) == [i for i in range(8193, 8448) if i not in (8292, 8294)]
    model = build_qwen2_5_omni(tmp_path / "model", vocoder_codes=8)
    backend = create_backend("qwen_omni", options(model) | {"warm_up": False})
    await asyncio.to_thread(backend.load)
    try:
        conv, _, done = await one_reply(backend, max_output_tokens=12)
        assert done.audio_ms > 0
        segments = conv.replies.segments(done.item_id)
        assert segments and all(s.emitted_samples > 0 for s in segments), "a piece was not spoken"
        await conv.close()
    finally:
        backend.close()


async def test_chat_completions_rest_api_on_this_backend(qwen_stack):
    """Our own OpenAI REST API fronts the omni model too: streamed text + pcm16 speech."""
    body = {"model": "omniduplex-qwen_omni", "stream": True, "max_tokens": 16, "modalities": ["text", "audio"],
            "temperature": 0,  # random weights: sampling could stop at once and leave nothing to check
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
    # The overlap judge's reader (SmolLM2 and its head) loads from the shared cache, not converted again.
    data_dir = share_model_cache(tmp_path / "data")
    config = AppConfig.model_validate({"data_dir": str(data_dir), "recording": {"enabled": False},
                                       "workers": {"secret": "s" * 24},
                                       "backend": {"name": "qwen_omni", "options": options(model)}})
    with TestClient(create_app(config), headers={"Authorization": f"Bearer {'s' * 24}"}) as client:
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
            ws.send_json({"type": "response.create", "response": {"max_output_tokens": 12}})
            seen = []
            while True:
                ev = ws.receive_json()
                seen.append(ev)
                if ev["type"] == "response.done":
                    break
            assert not [e for e in seen if e["type"] == "error"], seen
            done, events = seen[-1], seen
    assert done["response"]["status"] in ("completed", "incomplete")
    assert [e for e in events if e["type"] == "response.output_audio_transcript.delta"]
    assert audio_of(events)


def test_supervisor_plans_one_worker_per_visible_gpu(tmp_path):
    """start_all.sh -> supervisor: a GPU backend gets one worker per visible GPU (workers.per_gpu
    each), each pinned with CUDA_VISIBLE_DEVICES; a CPU device, the cascade, or no GPU leave the
    config alone."""
    from core.config import AppConfig
    from launcher.supervisor import gpu_plan

    (tmp_path / "config.json").write_text("{}")
    gpu = AppConfig.model_validate({"backend": {"name": "qwen_omni", "options": {"model_path": str(tmp_path)}}})
    count, env = gpu_plan(gpu, None, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert count == 2 and env == {"worker 0": {"CUDA_VISIBLE_DEVICES": "2"}, "worker 1": {"CUDA_VISIBLE_DEVICES": "3"}}
    count, env = gpu_plan(gpu, 3, {"CUDA_VISIBLE_DEVICES": "0,1"})  # --workers wins; GPUs shared in turn
    assert count is None and [e["CUDA_VISIBLE_DEVICES"] for e in env.values()] == ["0", "1", "0"]
    assert gpu_plan(gpu, None, {"CUDA_VISIBLE_DEVICES": ""}) == (None, {})
    two_each = gpu.model_copy(update={"workers": gpu.workers.model_copy(update={"per_gpu": 2})})
    count, env = gpu_plan(two_each, None, {"CUDA_VISIBLE_DEVICES": "4,5"})  # workers.per_gpu: a card's side by side
    assert count == 4 and [e["CUDA_VISIBLE_DEVICES"] for e in env.values()] == ["4", "4", "5", "5"]
    cpu = AppConfig.model_validate({"backend": {"name": "qwen_omni", "options": {"device": "cpu"}}})
    assert gpu_plan(cpu, None, {"CUDA_VISIBLE_DEVICES": "0"}) == (None, {})
    assert gpu_plan(AppConfig(), None, {"CUDA_VISIBLE_DEVICES": "0"}) == (None, {})


# --------------------------------------------------------------------------- function calling

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


class _CallJob:
    """What ``ToolCallFilter`` needs of a ``ReplyJob``: the tools and ``function_call``."""

    def __init__(self, *names: str) -> None:
        from core.conversation.config import FunctionTool

        self.tools = [FunctionTool(name=n) for n in names]
        self.calls: list[tuple[str, dict]] = []

    def function_call(self, name: str, arguments: str) -> None:
        self.calls.append((name, json.loads(arguments)))


def _filtered(pieces: list[str], job: _CallJob, prefill: str = "") -> str:
    from core.processors.qwen_tools import ToolCallFilter

    f = ToolCallFilter(job, prefill)
    return "".join(f.push(p) for p in pieces) + f.finish()


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_tool_call_parser_on_streamed_pieces(size):
    """A ``<tool_call>`` block, however it is cut into pieces, is held back from the text and
    becomes one call; text before it goes out, nothing after it is spoken."""
    text = "Let me check. " + CALL_TEXT + "\n" + CALL_TEXT.replace("Paris", "Rome") + " trailing words"
    job = _CallJob("get_weather")
    out = _filtered([text[i:i + size] for i in range(0, len(text), size)], job)
    assert out == "Let me check. "
    assert job.calls == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    # a plain reply (with a '<' that is no tool call) passes whole
    job = _CallJob("get_weather")
    plain = "Two < three, and <tool is not a call. <tool_cal"
    assert _filtered([plain[i:i + size] for i in range(0, len(plain), size)], job) == plain and not job.calls


def test_tool_call_parser_edge_cases(caplog):
    # an unterminated block at the end is parsed; arguments given as a JSON string are accepted
    job = _CallJob("get_weather")
    assert _filtered(['<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}'], job) == ""
    assert job.calls == [("get_weather", {"city": "Oslo"})]
    # forced calls: the prompt's prefill is the block's start
    job = _CallJob("get_weather")
    assert _filtered(['"city": "Paris"}}\n</tool_call>'], job,
                     prefill='<tool_call>\n{"name": "get_weather", "arguments": {') == ""
    assert job.calls == [("get_weather", {"city": "Paris"})]
    # invalid JSON, an unknown tool: no call, a warning, the text before stays
    for bad in ('<tool_call>\n{"name": "get_weather", "arguments": {"city": </tool_call>',
                '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>'):
        job = _CallJob("get_weather")
        caplog.clear()
        assert _filtered(["Sure. ", bad, " more"], job) == "Sure. " and not job.calls
        assert "malformed tool call" in caplog.text


def _prompt_backend(path):
    from core.processors.qwen_loading import load_processor
    from core.processors.qwen_omni import QwenOmniBackend, QwenOmniOptions
    from transformers import Qwen2_5OmniProcessor

    backend = QwenOmniBackend(QwenOmniOptions(**options(path)))
    backend.processor = load_processor(path, Qwen2_5OmniProcessor)
    return backend


def test_prompt_renders_tools_calls_and_results(qwen25_model):
    """Tools are in the templated prompt (the template's own rendering when it has one, else
    Qwen's tool block in the system turn); past calls are assistant <tool_call> text, results
    a user turn of <tool_response>s; "required" and a named choice prefill the call."""
    from types import SimpleNamespace

    from core.conversation import Item
    from core.conversation.config import FunctionTool
    from core.processors.qwen_tools import tool_prefill

    backend = _prompt_backend(qwen25_model)
    try:
        tool = FunctionTool(**WEATHER)
        items = [Item("user", "Weather in Paris?"),
                 Item("assistant", type="function_call", call_id="c1", name="get_weather",
                      arguments='{"city": "Paris"}'),
                 Item("user", type="function_call_output", call_id="c1", output='{"temp": 21}')]
        job = SimpleNamespace(system="Be brief.", items=items, frames=[])
        messages = backend._messages(job)[0]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        text = backend.prompt_text(messages, [tool])
        system = text.split("<|im_end|>")[0]
        assert "# Tools" in system and '"name": "get_weather"' in system and "Be brief." in system
        assert "<|im_start|>assistant\n" + CALL_TEXT + "<|im_end|>" in text
        assert '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>' in text
        assert "# Tools" not in backend.prompt_text(messages, [])
        # a template that renders tools itself is used as it is
        backend.processor.chat_template = (
            "{% if tools %}<tools>{% for t in tools %}{{ t['function']['name'] }};{% endfor %}</tools>{% endif %}"
            + backend.processor.chat_template)
        text = backend.prompt_text(messages, [tool])
        assert text.startswith("<tools>get_weather;</tools>") and "# Tools" not in text
        assert tool_prefill("auto") == "" and tool_prefill("required") == "<tool_call>\n"
        assert backend.prompt_text(messages, [tool], tool_prefill("get_weather")).endswith(
            '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": ')
    finally:
        backend.close()


async def test_streamed_tool_call_becomes_a_function_call(qwen25_model):
    """In-process, the real streamer: the Thinker's tokens (scripted here: random weights write
    no calls) carry a <tool_call>; the reply's text stops before it and the call is made."""
    from core.conversation import ConversationConfig
    from core.conversation.config import FunctionTool
    from core.processors import create_backend
    from tests.support.helpers import Collector

    backend = create_backend("qwen_omni", options(qwen25_model) | {"warm_up": False})
    await asyncio.to_thread(backend.load)
    tokenizer = backend.processor.tokenizer
    scripted = tokenizer.encode("Let me look. " + CALL_TEXT, add_special_tokens=False)

    def thinker(inputs, *, streamer, **kwargs):
        import torch

        streamer.put(inputs["input_ids"])
        for token in scripted:
            streamer.put(torch.tensor([token]))
        streamer.put(torch.tensor([tokenizer.convert_tokens_to_ids("<|im_end|>")]))
        streamer.end()

    backend._thinker_generate = thinker
    try:
        conv = backend.open_conversation(ConversationConfig(turn_detection=None, tools=[FunctionTool(**WEATHER)]))
        events = Collector(conv)
        await conv.add_text("Weather in Paris?")
        await conv.create_response(output_audio=False)
        done = await events.wait_for("response_done", timeout=60)
        assert done.status == "completed" and done.text == "Let me look. "
        assert [(c.name, json.loads(c.arguments)) for c in done.calls] == [("get_weather", {"city": "Paris"})]
        assert "".join(e.delta for e in events.of("text_delta")) == "Let me look. "
        await conv.close()
    finally:
        backend.close()


async def test_session_update_with_tools_is_accepted(qwen_stack):
    """qwen_omni takes tools (minicpm_o refuses them); a forced call on random weights writes
    no valid call, so the reply ends without one and the session goes on."""
    async with websockets.connect(ws_url(qwen_stack), max_size=None) as ws:
        await turn_based(ws)
        await send(ws, "session.update", session={"type": "realtime", "tools": [WEATHER], "tool_choice": "required"})
        updated = await recv_until(ws, "session.updated")
        assert [t["name"] for t in updated["session"]["tools"]] == ["get_weather"]
        assert updated["session"]["tool_choice"] == "required"
        await send(ws, "conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]})
        await send(ws, "response.create", response={"max_output_tokens": 12})
        events: list[dict] = []
        done = await recv_until(ws, "response.done", log=events)
    assert done["response"]["status"] in ("completed", "incomplete")
    assert not audio_of(events), "a forced call is not spoken"
