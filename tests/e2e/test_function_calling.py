"""Function calling through the real gateway and the cascade, both dialects: the model calls a
tool (arguments valid under its schema by construction), the client answers with a
``function_call_output`` item, the model speaks a reply. Every event is validated against the
``openai`` package's types."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.support.realtime_client import Client, close_leftovers


WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city", "unit"]}}
CLOCK = {"type": "function", "name": "get_time", "description": "The current time.",
         "parameters": {"type": "object", "properties": {}}}


# ``stack``: the suite's shared default stack (``tests/conftest.py``).


@pytest.fixture(autouse=True)
async def _close_leftovers():
    yield
    await close_leftovers()


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_call_round_trip(stack, beta):
    c = await Client.open(stack, beta)
    choice = "get_weather" if beta else {"type": "function", "name": "get_weather"}
    session = {"tools": [WEATHER, CLOCK], "tool_choice": choice, "turn_detection": None} if beta else {
        "tools": [WEATHER, CLOCK], "tool_choice": choice, "audio": {"input": {"turn_detection": None}}}
    s = await c.update(**session)
    assert [t["name"] for t in s["tools"]] == ["get_weather", "get_time"] and s["tool_choice"] == choice
    await c.typed("What is the weather in Paris?")
    r = await c.respond(max_output_tokens=60)
    call = r["output"][-1]
    assert r["status"] == "completed" and call["type"] == "function_call" and call["name"] == "get_weather"
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])  # valid by construction
    done = c.of("response.function_call_arguments.done")[-1]
    assert done["call_id"] == call["call_id"] and done["arguments"] == call["arguments"]
    streamed = "".join(e["delta"] for e in c.of("response.function_call_arguments.delta"))
    assert streamed == call["arguments"]
    assert c.of(c.added())[-1]["item"]["id"] == call["id"]  # the call joined the conversation
    # the client runs the function and answers; the model speaks a reply using it
    await c.send("conversation.item.create", item={"type": "function_call_output", "call_id": call["call_id"],
                                                   "output": json.dumps({"temp": 21, "sky": "sunny"})})
    await c.until(c.added(), count=len(c.of(c.added())) + 1)
    await c.update(tool_choice="auto")
    reply = await c.respond(max_output_tokens=24)
    message = reply["output"][0]
    assert reply["status"] == "completed" or reply["status_details"]["reason"] == "max_output_tokens"
    assert message["type"] == "message" and message["content"][0]["transcript"]
    delta = "response.audio.delta" if beta else "response.output_audio.delta"
    assert any(e["response_id"] == reply["id"] for e in c.of(delta))
    await c.close()


async def test_required_choice_and_bad_tools(stack):
    c = await Client.open(stack)
    await c.update(audio={"input": {"turn_detection": None}})
    err = await c.error("session.update", session={"type": "realtime", "tools": [WEATHER],
                                                    "tool_choice": {"type": "function", "name": "nope"}})
    assert err["param"] == "tool_choice" and "nope" in err["message"]
    err = await c.error("session.update", session={"type": "realtime", "tools": [{"type": "web_search"}]})
    assert err["param"] == "session.tools.0.type"
    # MCP tools are supported since issue 35 (tests/unit/test_mcp_tools.py); one without its server's URL is not
    err = await c.error("session.update", session={"type": "realtime", "tools": [{"type": "mcp", "server_label": "x"}]})
    assert err["param"] == "session.tools.0.server_url"
    err = await c.error("session.update", session={"type": "realtime", "tools": [{"name": "bad name!"}]})
    assert err["param"].startswith("session.tools.0.name")
    bad_schema = {**CLOCK, "parameters": {"type": "object", "properties": {"x": {"type": "no-such-type"}}}}
    err = await c.error("session.update", session={"type": "realtime", "tools": [bad_schema]})
    assert err["param"] == "tools" and "cannot be enforced" in err["message"]
    # per response: required with the clock only
    await c.typed("Hello!")
    r = await c.respond(tools=[CLOCK], tool_choice="required")
    assert [o["type"] for o in r["output"]] == ["function_call"] and r["output"][0]["name"] == "get_time"
    assert json.loads(r["output"][0]["arguments"]) == {}
    await c.close()
