"""The cascade's LLM stage on an OpenAI-compatible server (``backend.options.llm_url``).

Two servers: ``transformers serve`` on the bundled SmolLM2 directory, a real third-party server,
which holds a spoken realtime turn and a REST chat and is killed mid-reply; and the
chat-completions test double (``tests/support/engine_double.py``) for what a model cannot be made to do
on cue: stream tool calls, stall, stream slowly so a cancel can be seen to close the stream.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from core.cascade.llm import converted_model
from tests.support.engine_double import REPLY, OmniEngineDouble
from tests.support.realtime_client import Client, close_leftovers
from tests.support.stack import ROOT, Stack, free_port


QUESTION = "What is the capital of France?"
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                "unit": {"type": "string", "enum": ["c", "f"]}},
                               "required": ["city"]}}


class TransformersServe:
    """``transformers serve`` (installed with transformers) on a local model directory."""

    def __init__(self, model_dir: Path, log: Path) -> None:
        self.model_dir, self.log = model_dir, log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.cache = log.parent / "hf-cache"
        self.cache.mkdir(exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 120.0) -> TransformersServe:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(self.cache)}
        cli = Path(sys.executable).with_name("transformers")
        self.proc = subprocess.Popen(
            [str(cli), "serve", "--host", "127.0.0.1", "--port", str(self.port), "--device", "cpu",
             "--log-level", "info", str(self.model_dir)],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"transformers serve exited: {self.log.read_text()[-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"transformers serve did not start: {self.log.read_text()[-2000:]}"
            time.sleep(0.3)

    def requests_seen(self) -> int:
        return self.log.read_text(errors="replace").count("POST /v1/chat/completions")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture(scope="module")
def smollm_dir() -> Path:
    """The bundled SmolLM2 as a plain transformers directory (converted once, as the cascade does)."""
    return converted_model(Path(os.environ.get("OMNIDUPLEX_DATA_DIR", ROOT / "data")))


@pytest.fixture(scope="module")
def served(tmp_path_factory, smollm_dir):
    tmp = tmp_path_factory.mktemp("transformers-serve")
    server = TransformersServe(smollm_dir, tmp / "serve.log").start()
    stack = Stack(tmp, workers=1, backend={"name": "cascade", "options": {
        "llm_url": server.url, "llm_model": str(smollm_dir), "llm_read_timeout_s": 30}}).start()
    yield server, stack
    stack.stop()
    server.kill()


@pytest.fixture(scope="module")
def double():
    with OmniEngineDouble() as engine:
        yield engine


@pytest.fixture(scope="module")
def double_stack(tmp_path_factory, double):
    stack = Stack(tmp_path_factory.mktemp("llm-double"), workers=1, backend={"name": "cascade", "options": {
        "llm_url": double.url("openai"), "llm_model": "double-omni", "llm_read_timeout_s": 1.5,
        "llm_headers": {"X-Team": "voice"}, "llm_api_key": "sk-test"}}).start()
    yield stack
    stack.stop()


@pytest.fixture(autouse=True)
async def _close_leftovers():
    yield
    await close_leftovers()


@pytest.fixture(scope="module")
def speech24k():
    from core.cascade.tts import PiperTts

    pcm = b"".join(PiperTts().synthesize(QUESTION, deterministic=True))
    return b"\x00\x00" * 7200 + pcm + b"\x00\x00" * 28800


def worker_health(stack: Stack) -> dict:
    return stack.worker_health(0)


def transcript(c: Client) -> str:
    return "".join(e["delta"] for e in c.events if e["type"] == "response.output_audio_transcript.delta")


# --------------------------------------------------------------------------- transformers serve


def test_rest_chat_through_transformers_serve(served):
    server, stack = served
    before = server.requests_seen()
    client = OpenAI(base_url=f"{stack.url}/v1", api_key="unused")
    reply = client.chat.completions.create(model="omniduplex-cascade", temperature=0, max_tokens=40,
                                           messages=[{"role": "user", "content": QUESTION}])
    assert "Paris" in reply.choices[0].message.content
    assert server.requests_seen() == before + 1, "the answer came from transformers serve"
    health = worker_health(stack)
    assert health["upstream"] == {**health["upstream"], "url": server.url, "ok": True, "error": None}


async def test_spoken_realtime_turn_through_transformers_serve(served, speech24k):
    server, stack = served
    before = server.requests_seen()
    c = await Client.open(stack)
    await c.update(audio={"input": {"transcription": {"model": "whisper-1"}}})
    for i in range(0, len(speech24k), 4800):  # 100 ms pieces, in real time
        await c.send("input_audio_buffer.append", audio=base64.b64encode(speech24k[i:i + 4800]).decode())
        await asyncio.sleep(0.1)
    done = (await c.until("response.done", timeout=90))["response"]
    heard = (await c.until("conversation.item.input_audio_transcription.completed"))["transcript"]
    assert "capital" in heard.lower()
    assert done["status"] == "completed", done
    audio = b"".join(base64.b64decode(e["delta"]) for e in c.of("response.output_audio.delta"))
    assert transcript(c).strip() and len(audio) > 24000, "a spoken answer (over 0.5 s of speech)"
    assert server.requests_seen() > before
    await c.close()


async def test_server_going_away_mid_reply(served):
    """The server dies while it streams: the reply fails at once with a reason, /health says why,
    the session stays usable, the next reply fails fast (not hung), and all recovers when the
    server is back."""
    server, stack = served
    c = await Client.open(stack)
    await c.turn_based()
    await c.typed("Count from one to two hundred, one number per line.")
    await c.send("response.create", response={"max_output_tokens": 600, "output_modalities": ["text"]})
    await c.until("response.output_text.delta")
    killed = time.monotonic()
    server.kill()
    error = (await c.until("error", timeout=15))["error"]
    done = (await c.until("response.done", timeout=15))["response"]
    assert time.monotonic() - killed < 10
    assert done["status"] == "failed"
    assert server.url.removesuffix("/v1") in error["message"] and "LLM server" in error["message"], error
    upstream = worker_health(stack)["upstream"]
    assert upstream["ok"] is False and "LLM server" in upstream["error"]
    # the next reply fails fast with the same kind of reason
    started = time.monotonic()
    second = await c.respond()
    assert second["status"] == "failed" and time.monotonic() - started < 8
    assert "unreachable" in c.of("error")[-1]["error"]["message"]
    deadline = time.monotonic() + 20  # the gateway's /health shows the reason too
    while not any(w.get("upstream", {}).get("ok") is False for w in stack.health()["workers"]):
        assert time.monotonic() < deadline, stack.health()
        await asyncio.sleep(0.2)
    await c.close()
    # back again: /health clears by itself, and replies work
    server.start()
    deadline = time.monotonic() + 15
    while worker_health(stack)["upstream"]["ok"] is not True:
        assert time.monotonic() < deadline, worker_health(stack)
        await asyncio.sleep(0.2)
    client = OpenAI(base_url=f"{stack.url}/v1", api_key="unused")
    reply = client.chat.completions.create(model="omniduplex-cascade", temperature=0, max_tokens=40,
                                           messages=[{"role": "user", "content": QUESTION}])
    assert "Paris" in reply.choices[0].message.content


# --------------------------------------------------------------------------- the double


async def test_reply_streams_from_the_server_and_is_spoken(double, double_stack):
    c = await Client.open(double_stack)
    await c.turn_based()
    await c.typed("Hi there")
    done = await c.respond(max_output_tokens=50)
    assert done["status"] == "completed"
    assert transcript(c) == REPLY
    assert len(b"".join(base64.b64decode(e["delta"]) for e in c.of("response.output_audio.delta"))) > 24000
    body = double.requests[-1]
    assert body["model"] == "double-omni" and body["stream"] is True and body["max_tokens"] == 50
    assert body["messages"][0]["role"] == "system" and body["messages"][-1] == {"role": "user",
                                                                                "content": "Hi there"}
    assert "modalities" not in body, "a plain LLM request: Piper speaks the text"
    await c.close()


async def test_headers_and_key_reach_the_server(double, double_stack):
    seen = []
    original = double.app.middleware_stack

    async def spy(scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            seen.append(dict(scope["headers"]))
        await original(scope, receive, send)

    double.app.middleware_stack = spy
    try:
        client = OpenAI(base_url=f"{double_stack.url}/v1", api_key="unused")
        reply = client.chat.completions.create(model="omniduplex-cascade", messages=[{"role": "user", "content": "Hi"}])
    finally:
        double.app.middleware_stack = original
    assert reply.choices[0].message.content == REPLY
    assert seen and seen[-1][b"authorization"] == b"Bearer sk-test" and seen[-1][b"x-team"] == b"voice"


async def test_tools_pass_through_and_calls_stream_back(double, double_stack):
    c = await Client.open(double_stack)
    await c.update(tools=[WEATHER_TOOL], tool_choice="auto", audio={"input": {"turn_detection": None}})
    await c.typed("What is the weather in Paris?")
    done = await c.respond(max_output_tokens=60)
    call = done["output"][0]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["arguments"] == '{"city": "Paris", "unit": "c"}'
    assert double.requests[-1]["tools"][0]["function"]["parameters"] == WEATHER_TOOL["parameters"]
    assert [e["delta"] for e in c.of("response.function_call_arguments.delta")], "arguments streamed"
    await c.send("conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"],
                                                   "output": '{"sky": "sunny"}'})
    answer = await c.respond(max_output_tokens=60)
    assert answer["status"] == "completed" and answer["output"][0]["type"] == "message"
    messages = double.requests[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": call["arguments"]}
    assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": '{"sky": "sunny"}'}
    await c.close()


async def test_cancel_closes_the_stream_at_once(double, double_stack):
    double.aborted.clear()
    c = await Client.open(double_stack)
    await c.turn_based()
    await c.typed("Say something slow please")
    await c.send("response.create", response={"output_modalities": ["text"]})
    await c.until("response.output_text.delta")
    await c.send("response.cancel")
    cancelled_at = time.monotonic()
    done = (await c.until("response.done"))["response"]
    assert done["status"] == "cancelled"
    assert await asyncio.to_thread(double.aborted.wait, 2.0), "the server saw the stream dropped"
    assert time.monotonic() - cancelled_at < 2.0
    await c.close()


async def test_a_stalled_server_fails_the_reply_with_a_reason(double, double_stack):
    c = await Client.open(double_stack)
    await c.turn_based()
    stalled = (await c.typed("stall now"))["item"]["id"]
    started = time.monotonic()
    done = await c.respond(max_output_tokens=30)
    assert done["status"] == "failed" and time.monotonic() - started < 8
    assert "sent nothing for 1.5 s" in c.of("error")[-1]["error"]["message"]
    await c.send("conversation.item.delete", item_id=stalled)  # else "Hi again" joins the same user turn
    await c.until("conversation.item.deleted")
    await c.typed("Hi again")
    assert (await c.respond(max_output_tokens=30))["status"] == "completed", "the session goes on"
    await c.close()


def test_worker_waits_for_the_server_at_start(double):
    """Start-up waits (with progress) until the server answers; without ``llm_model`` it takes
    the first model the server lists."""
    from core.cascade.remote_llm import RemoteLlm

    port = free_port()
    remote = RemoteLlm(f"http://127.0.0.1:{port}/openai/v1", None, api_key=None, headers={}, extra_body={},
                       connect_timeout_s=1, read_timeout_s=5)
    progress: list[str] = []
    with pytest.raises(RuntimeError, match="did not answer in 1 s"):
        remote.wait_until_up(1.0, progress.append)
    assert progress and "waiting for" in progress[0]
    remote = RemoteLlm(double.url("openai"), None, api_key=None, headers={}, extra_body={},
                       connect_timeout_s=1, read_timeout_s=5)
    remote.wait_until_up(5.0)
    assert remote.model == "double-omni"


def test_bad_llm_options_are_refused_with_the_field():
    from pydantic import ValidationError

    from core.processors.cascade import CascadeOptions

    with pytest.raises(ValidationError, match="llm_url"):
        CascadeOptions(llm_url="localhost:11434")
    with pytest.raises(ValidationError, match="need llm_url"):
        CascadeOptions(llm_model="llama3.2")
    assert CascadeOptions(llm_url="http://localhost:11434/v1/").llm_url == "http://localhost:11434/v1"


def test_rest_chat_with_a_stalled_server_answers_an_error_with_the_reason(double_stack):
    from openai import APIStatusError

    client = OpenAI(base_url=f"{double_stack.url}/v1", api_key="unused", max_retries=0)
    started = time.monotonic()
    with pytest.raises(APIStatusError) as caught:
        client.chat.completions.create(model="omniduplex-cascade", messages=[{"role": "user", "content": "stall"}])
    assert time.monotonic() - started < 8
    assert caught.value.status_code == 502 and "sent nothing for 1.5 s" in caught.value.message
    stream = client.chat.completions.create(model="omniduplex-cascade", stream=True,
                                            messages=[{"role": "user", "content": "stall"}])
    with pytest.raises(Exception, match="sent nothing for 1.5 s"):
        list(stream)
    assert double_stack.health()["workers"][0]["health"] == "healthy", "the worker itself is fine"
