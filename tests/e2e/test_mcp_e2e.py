"""MCP tools end to end (issue 35): the real gateway and worker, the embedded cascade, a real MCP
server (the ``mcp`` package's, over streamable HTTP). A spoken question ("What is the weather in
Paris?", espeak-ng) is answered from the tool's result: the cascade calls the server's
``get_weather`` (``tool_choice: auto``), the worker runs it, and the follow-up reply speaks what
it returned. Every event is validated against the ``openai`` package's types."""

from __future__ import annotations

import base64

import pytest

from core.audio import float_to_pcm16
from tests.support.mcp_server import mcp_server  # noqa: F401 - a fixture
from tests.support.realtime_client import Client, close_leftovers
from tests.support.stack import Stack

VOICE = ("en-us", 140, 50)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("mcp"), workers=1, tools={"mcp": {"allowed_hosts": ["127.0.0.1"]}}).start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
async def _close_leftovers():
    yield
    await close_leftovers()


def spoken(text: str) -> str:
    from devtools.espeak import espeak, espeak_path

    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    # espeak gives int16 samples: scaled to floats first (fed as they were, float_to_pcm16 clipped
    # them to a square wave, which Whisper heard as "What is the matter ..." on some machines)
    return base64.b64encode(float_to_pcm16(espeak(text, *VOICE, rate=24000) / 32768)).decode("ascii")


async def test_a_spoken_question_is_answered_from_the_mcp_tools_result(stack, mcp_server):
    before = mcp_server.calls["get_weather"]
    c = await Client.open(stack)
    s = await c.update(audio={"input": {"turn_detection": None}}, tools=[{
        "type": "mcp", "server_label": "weather", "server_url": mcp_server.url, "require_approval": "never",
        "allowed_tools": ["get_weather"]}])
    assert s["tools"][0]["server_label"] == "weather" and "headers" not in s["tools"][0]
    listed = await c.until("conversation.item.done")
    assert listed["item"]["type"] == "mcp_list_tools" and [t["name"] for t in listed["item"]["tools"]] == ["get_weather"]
    await c.send("conversation.item.create", item={"type": "message", "role": "user", "content": [
        {"type": "input_audio", "audio": spoken("What is the weather in Paris today?")}]})
    heard = await c.until("conversation.item.done", count=2)
    assert "weather" in heard["item"]["content"][0]["transcript"].lower()
    first = await c.respond(max_output_tokens=40)
    call = next(o for o in first["output"] if o["type"] == "mcp_call")
    assert call["name"] == "get_weather" and "paris" in call["arguments"].lower(), call
    assert call["output"] == "The weather in Paris is sunny, 21 degrees."
    assert mcp_server.calls["get_weather"] == before + 1
    answer = (await c.until("response.done", count=2, timeout=120))["response"]
    words = " ".join(p.get("transcript") or "" for o in answer["output"] if o["type"] == "message"
                     for p in o["content"]).lower()
    assert "sunny" in words or "21" in words or "twenty" in words, words
    assert any(e["response_id"] == answer["id"] for e in c.of("response.output_audio.delta"))
    await c.close()
