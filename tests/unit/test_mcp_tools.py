"""MCP tools in a realtime session (issue 35), against a real MCP server (the ``mcp`` package's
own, over streamable HTTP): the worker's session on a scripted tool-calling backend (a test
double that calls the function it is told to), every server event checked against the
``openai`` package's types. The cascade end to end is in ``tests/e2e/test_mcp_e2e.py``."""

from __future__ import annotations

import asyncio
import json

import pytest

from core.config import LimitsConfig, McpConfig
from core.protocol import Dialect
from tests.support.mcp_server import TOKEN, mcp_server, start_mcp_server, unused_url  # noqa: F401 - mcp_server: a fixture
from tests.support.scripted_backend import ScriptedToolBackend
from tests.support.session_channel import SessionChannel
from worker.recorder import RecorderPool
from worker.session import RealtimeSession

ALLOW_LOOPBACK = McpConfig(allowed_hosts=["127.0.0.1"], call_timeout_s=1.0, list_timeout_s=3.0, max_result_chars=400)


@pytest.fixture(scope="module")
def gated_server():
    server = start_mcp_server(needs_token=True)
    yield server
    server.stop()


class Session:
    """One in-memory session: the channel, the task, helpers for the steps every test takes."""

    def __init__(self, backend, config: McpConfig = ALLOW_LOOPBACK, recorder=None) -> None:
        self.channel = SessionChannel()
        self.session = RealtimeSession(self.channel, backend, Dialect(False), LimitsConfig(), recorder=recorder,
                                       mcp_config=config)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Session:
        self.task = asyncio.create_task(self.session.run())
        await self.channel.until("session.created")
        return self

    async def __aexit__(self, *exc) -> None:
        self.channel.inbox.put_nowait(None)
        await asyncio.wait_for(self.task, 10)
        assert not self.channel.invalid, self.channel.invalid

    async def update(self, *tools: dict, **session) -> dict:
        n = len(self.channel.of("session.updated"))
        self.channel.client("session.update", session={"type": "realtime", "tools": list(tools),
                                                       "audio": {"input": {"turn_detection": None}}, **session})
        return (await self.channel.until("session.updated", count=n + 1))["session"]

    async def ask(self, text: str, count: int = 1) -> dict:
        """A typed question and ``response.create``; the ``count``-th ``response.done`` overall."""
        self.channel.client("conversation.item.create", item={"type": "message", "role": "user",
                                                              "content": [{"type": "input_text", "text": text}]})
        self.channel.client("response.create")
        return (await self.channel.until("response.done", count=count, timeout=20))["response"]

    def of(self, kind: str) -> list[dict]:
        return self.channel.of(kind)


def mcp(url: str, **fields) -> dict:
    return {"type": "mcp", "server_label": "shop", "server_url": url, **fields}


def spoken(response: dict) -> str:
    return " ".join(part.get("transcript") or part.get("text") or ""
                    for item in response["output"] if item["type"] == "message" for part in item["content"])


async def test_listing_at_session_update_shows_the_allowed_tools_and_echoes_no_secret(gated_server):
    backend = ScriptedToolBackend(["ok"])
    async with Session(backend) as s:
        tool = mcp(gated_server.url, allowed_tools=["get_weather", "add_event"], require_approval="never",
                   headers={"Authorization": f"Bearer {TOKEN}"}, server_description="a test shop")
        echoed = await s.update(tool)
        assert echoed["tools"] == [{k: v for k, v in tool.items() if k != "headers"}]
        done = await s.channel.until("conversation.item.done")
        added = s.of("conversation.item.added")[0]["item"]
        assert added["type"] == "mcp_list_tools" and added["tools"] == [] and added["server_label"] == "shop"
        assert s.of("mcp_list_tools.in_progress")[0]["item_id"] == added["id"]
        await s.channel.until("mcp_list_tools.completed")
        assert [t["name"] for t in done["item"]["tools"]] == ["get_weather", "add_event"]
        assert done["item"]["tools"][0]["input_schema"]["properties"]["city"]["type"] == "string"
        assert TOKEN not in json.dumps(s.channel.events)


async def test_a_call_runs_on_the_server_and_its_result_is_spoken(mcp_server):
    before = mcp_server.calls["get_weather"]
    backend = ScriptedToolBackend(["It", "says"], call=("shop__get_weather", '{"city": "Paris"}'))
    async with Session(backend) as s:
        await s.update(mcp(mcp_server.url, require_approval="never"))
        await s.channel.until("mcp_list_tools.completed")
        first = await s.ask("What is the weather in Paris?")
        call = first["output"][0]
        assert call["type"] == "mcp_call" and call["name"] == "get_weather" and call["server_label"] == "shop"
        assert call["output"] == "The weather in Paris is sunny, 21 degrees." and call["error"] is None
        assert mcp_server.calls["get_weather"] == before + 1
        assert mcp_server.last_arguments["get_weather"] == {"city": "Paris"}
        kinds = [e["type"] for e in s.channel.events if e.get("item_id") == call["id"] or
                 e.get("item", {}).get("id") == call["id"]]
        assert kinds == ["response.output_item.added", "conversation.item.added",
                         "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
                         "response.mcp_call.in_progress", "response.mcp_call.completed",
                         "response.output_item.done", "conversation.item.done"]
        # the server starts the reply that speaks the result: no response.create from the client
        second = (await s.channel.until("response.done", count=2))["response"]
        assert "sunny, 21 degrees" in spoken(second) and second["status"] == "completed"
        retrieved = s.session.conv.item(call["id"])
        assert retrieved.type == "mcp_call" and retrieved.output == call["output"]


async def test_approval_asked_then_given_runs_the_call(mcp_server):
    before = mcp_server.calls["add_event"]
    backend = ScriptedToolBackend(["Done:"], call=("shop__add_event", '{"title": "dentist", "day": "Friday"}'))
    async with Session(backend) as s:
        await s.update(mcp(mcp_server.url, require_approval={"never": {"read_only": True}}))
        await s.channel.until("mcp_list_tools.completed")
        asked = await s.ask("Book the dentist on Friday.")
        request = asked["output"][0]
        assert request["type"] == "mcp_approval_request" and request["name"] == "add_event"
        assert json.loads(request["arguments"]) == {"title": "dentist", "day": "Friday"}
        assert asked["status"] == "completed" and mcp_server.calls["add_event"] == before  # not run yet
        await asyncio.sleep(0.2)
        assert len(s.of("response.done")) == 1  # nothing runs until the user answers
        n = len(s.of("conversation.item.done"))
        s.channel.client("conversation.item.create", item={"type": "mcp_approval_response",
                                                           "approval_request_id": request["id"], "approve": True})
        answer = (await s.channel.until("conversation.item.done", count=n + 1))["item"]
        assert answer == {"id": answer["id"], "type": "mcp_approval_response", "approval_request_id": request["id"],
                          "approve": True}
        s.channel.client("response.create")
        ran = (await s.channel.until("response.done", count=2))["response"]
        call, message = ran["output"][0], ran["output"][1]
        assert call["type"] == "mcp_call" and call["approval_request_id"] == request["id"]
        assert call["output"] == "Added 'dentist' on Friday." and mcp_server.calls["add_event"] == before + 1
        assert "Added 'dentist' on Friday." in spoken(ran) and message["type"] == "message"
        # answering the same request twice is an error, and runs nothing
        s.channel.client("conversation.item.create", item={"type": "mcp_approval_response",
                                                           "approval_request_id": request["id"], "approve": True})
        err = await s.channel.until("error")
        assert err["error"]["param"] == "item.approval_request_id" and "already answered" in err["error"]["message"]


async def test_approval_refused_runs_nothing_and_the_model_says_so(mcp_server):
    before = mcp_server.calls["add_event"]
    backend = ScriptedToolBackend(["Okay."], call=("shop__add_event", '{"title": "gym", "day": "Monday"}'))
    async with Session(backend) as s:
        await s.update(mcp(mcp_server.url))  # no require_approval: every call asks
        await s.channel.until("mcp_list_tools.completed")
        request = (await s.ask("Add gym on Monday."))["output"][0]
        assert request["type"] == "mcp_approval_request"
        s.channel.client("conversation.item.create", item={
            "type": "mcp_approval_response", "approval_request_id": request["id"], "approve": False,
            "reason": "not now"})
        s.channel.client("response.create")
        reply = (await s.channel.until("response.done", count=2))["response"]
        assert [o["type"] for o in reply["output"]] == ["message"]
        assert "declined" in spoken(reply) and "not now" in spoken(reply)
        assert mcp_server.calls["add_event"] == before
        assert not s.of("response.mcp_call.in_progress")


async def test_a_tool_error_is_spoken_as_a_failure(mcp_server):
    backend = ScriptedToolBackend(["Sorry."], call=("shop__broken", '{"reason": "stock"}'))
    async with Session(backend) as s:
        await s.update(mcp(mcp_server.url, require_approval="never"))
        await s.channel.until("mcp_list_tools.completed")
        call = (await s.ask("Is it in stock?"))["output"][0]
        assert call["output"] is None and call["error"]["type"] == "tool_execution_error"
        assert s.of("response.mcp_call.failed")[0]["item_id"] == call["id"]
        reply = (await s.channel.until("response.done", count=2))["response"]
        assert "The tool failed" in spoken(reply)


async def test_a_slow_tool_times_out_and_a_long_result_is_cut(mcp_server):
    slow = ScriptedToolBackend(["Hm."], call=("shop__slow", '{"seconds": 5}'))
    async with Session(slow) as s:
        await s.update(mcp(mcp_server.url, require_approval="never"))
        await s.channel.until("mcp_list_tools.completed")
        call = (await s.ask("Wait for it."))["output"][0]
        assert call["error"] == {"type": "tool_execution_error", "message": "the tool did not answer within 1 s"}
        await s.channel.until("response.done", count=2)
    big = ScriptedToolBackend(["Here."], call=("shop__big", '{"size": 5000}'))
    async with Session(big) as s:
        await s.update(mcp(mcp_server.url, require_approval="never"))
        await s.channel.until("mcp_list_tools.completed")
        call = (await s.ask("Long one."))["output"][0]
        assert call["output"].startswith("x" * 400) and call["output"].endswith("[cut: 4600 more characters]")


async def test_an_unreachable_server_fails_its_listing_and_the_session_goes_on():
    backend = ScriptedToolBackend(["Hello."], call=("shop__get_weather", '{"city": "Oslo"}'))
    async with Session(backend) as s:
        await s.update(mcp(unused_url(), require_approval="never"))
        failed = await s.channel.until("mcp_list_tools.failed")
        err = (await s.channel.until("error"))["error"]
        assert err["code"] == "mcp_list_tools_failed" and "could not connect" in err["message"]
        assert s.of("conversation.item.done")[-1]["item"] == {"id": failed["item_id"], "type": "mcp_list_tools",
                                                              "server_label": "shop", "tools": []}
        reply = await s.ask("Hi?")  # no tools to call: the model answers
        assert [o["type"] for o in reply["output"]] == ["message"] and spoken(reply).strip() == "Hello."


async def test_a_server_that_wants_a_token_fails_without_it(gated_server):
    async with Session(ScriptedToolBackend(["Hi."])) as s:
        await s.update(mcp(gated_server.url))
        await s.channel.until("mcp_list_tools.failed")
        assert "refused" in (await s.channel.until("error"))["error"]["message"]


@pytest.mark.parametrize("config,url,why", [
    (McpConfig(), "http://127.0.0.1:9/mcp", "not enabled on this server"),
    (ALLOW_LOOPBACK, "http://example.com/mcp", "example.com:80 is not allowed"),
    (McpConfig(allowed_hosts=["tools.example.com:8443"]), "https://tools.example.com/mcp", "not allowed"),
    (ALLOW_LOOPBACK, "http://user:pw@127.0.0.1/mcp", "user name or password"),
    (ALLOW_LOOPBACK, "ftp://127.0.0.1/mcp", "http:// or https://"),
], ids=["default-off", "other-host", "other-port", "userinfo", "scheme"])
async def test_a_disallowed_server_is_refused_before_any_connection(config, url, why):
    async with Session(ScriptedToolBackend(["Hi."]), config) as s:
        s.channel.client("session.update", session={"type": "realtime", "tools": [mcp(url)]}, event_id="evt_mcp")
        err = (await s.channel.until("error"))["error"]
        assert err["param"] == "session.tools.0.server_url" and err["code"] == "mcp_server_not_allowed"
        assert err["event_id"] == "evt_mcp"  # the client can tell which update was refused
        assert why in err["message"] and "pw" not in err["message"]
        assert not s.of("mcp_list_tools.in_progress") and not s.of("session.updated")


async def test_bad_mcp_tools_get_clear_errors(mcp_server):
    async with Session(ScriptedToolBackend(["Hi."])) as s:
        for tool, param in (({"type": "mcp", "server_label": "x", "connector_id": "connector_gmail"},
                             "session.tools.0.connector_id"),
                            ({"type": "mcp", "server_label": "x"}, "session.tools.0.server_url"),
                            (mcp(mcp_server.url, server_label="bad label"), "session.tools.0.server_label"),
                            (mcp(mcp_server.url, require_approval="sometimes"), "session.tools.0.require_approval")):
            n = len(s.of("error"))
            s.channel.client("session.update", session={"type": "realtime", "tools": [tool]})
            assert (await s.channel.until("error", count=n + 1))["error"]["param"].startswith(param)
        s.channel.client("conversation.item.create", item={"type": "mcp_approval_response",
                                                           "approval_request_id": "nope", "approve": True})
        assert (await s.channel.until("error", count=5))["error"]["code"] == "item_not_found"


async def test_a_beta_session_keeps_to_function_tools(mcp_server):
    channel = SessionChannel(beta=True)
    session = RealtimeSession(channel, ScriptedToolBackend(["Hi."]), Dialect(True), LimitsConfig(),
                              mcp_config=ALLOW_LOOPBACK)
    task = asyncio.create_task(session.run())
    await channel.until("session.created")
    channel.client("session.update", session={"tools": [mcp(mcp_server.url)]})
    err = (await channel.until("error"))["error"]
    assert err["param"] == "session.tools.0.type" and "only function tools" in err["message"]
    channel.inbox.put_nowait(None)
    await task


async def test_the_recording_shows_each_call_and_never_the_headers(gated_server, tmp_path):
    pool = RecorderPool(tmp_path)
    recorder = pool.open("sess_mcp", {"app": "test", "model": "scripted", "dialect": "ga", "worker_id": "w0"})
    backend = ScriptedToolBackend(["Right."], call=("shop__get_weather", '{"city": "Rome"}'))
    async with Session(backend, recorder=recorder) as s:
        await s.update(mcp(gated_server.url, require_approval="never", authorization=TOKEN))
        await s.channel.until("mcp_list_tools.completed")
        await s.ask("Weather in Rome?")
        await s.channel.until("response.done", count=2)
    await asyncio.to_thread(pool.shutdown)  # the session finished its recording: wait for the writes
    stored = "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.json"))
    assert TOKEN not in stored
    events = json.loads((tmp_path / "sessions" / "sess_mcp" / "recording.json").read_text())["events"]
    listed = next(e for e in events if e["type"] == "tool_list")
    assert listed["server_label"] == "shop" and "get_weather" in listed["tools"] and not listed["failed"]
    call = next(e for e in events if e["type"] == "tool_call")
    assert (call["kind"], call["name"], call["output"]) == ("mcp_call", "get_weather",
                                                          "The weather in Rome is cloudy, 17 degrees.")
    spoken_reply = [e for e in events if e["type"] == "response_done"][-1]
    assert "cloudy, 17 degrees" in spoken_reply["text"]


async def test_a_cancel_during_a_call_cancels_it_and_the_session_goes_on(mcp_server):
    config = ALLOW_LOOPBACK.model_copy(update={"call_timeout_s": 30.0})
    backend = ScriptedToolBackend(["Fine."], call=("shop__slow", '{"seconds": 20}'))
    async with Session(backend, config) as s:
        await s.update(mcp(mcp_server.url, require_approval="never"))
        await s.channel.until("mcp_list_tools.completed")
        s.channel.client("conversation.item.create", item={"type": "message", "role": "user",
                                                           "content": [{"type": "input_text", "text": "Slow one."}]})
        s.channel.client("response.create")
        await s.channel.until("response.mcp_call.in_progress")
        s.channel.client("response.cancel")
        done = (await s.channel.until("response.done", timeout=5))["response"]
        assert done["status"] == "cancelled" and not s.of("response.mcp_call.completed")
        await asyncio.sleep(0.3)
        assert len(s.of("response.created")) == 1  # no follow-up for a cancelled call
        backend.call = None
        reply = await s.ask("Hello?", count=2)
        assert spoken(reply).startswith("Fine.")


async def test_mcp_tools_for_one_response_only(mcp_server):
    backend = ScriptedToolBackend(["So:"], call=("shop__get_weather", '{"city": "Oslo"}'))
    async with Session(backend) as s:
        await s.update()  # no tools in the session
        s.channel.client("conversation.item.create", item={"type": "message", "role": "user",
                                                           "content": [{"type": "input_text", "text": "Oslo?"}]})
        s.channel.client("response.create", response={"tools": [mcp(mcp_server.url, require_approval="never")]})
        first = (await s.channel.until("response.done", timeout=20))["response"]
        assert first["output"][0]["type"] == "mcp_call" and "snowing" in first["output"][0]["output"]
        assert s.of("mcp_list_tools.completed")
        second = (await s.channel.until("response.done", count=2))["response"]
        assert "snowing" in spoken(second)
        assert s.session.conv.config.mcp_servers == []  # the session's own tools are unchanged


def test_approval_rules_and_allowed_tools():
    from core.conversation.config import McpServerTool

    def server(**kw):
        return McpServerTool(server_label="s", server_url="http://127.0.0.1/mcp", **kw)

    assert server().needs_approval("a", False) and server().needs_approval("a", True)  # OpenAI's default
    assert not server(require_approval="never").needs_approval("a", False)
    mixed = server(require_approval={"always": {"tool_names": ["pay"]}, "never": {"read_only": True}})
    assert mixed.needs_approval("pay", True) and not mixed.needs_approval("look", True)
    assert mixed.needs_approval("write", False)  # named by neither: asks
    only_always = server(require_approval={"always": {"tool_names": ["pay"]}})
    assert only_always.needs_approval("pay", False) and not only_always.needs_approval("look", False)
    only_never = server(require_approval={"never": {"tool_names": ["look"]}})
    assert not only_never.needs_approval("look", False) and only_never.needs_approval("pay", False)
    assert server(allowed_tools=["a"]).offers("a", False) and not server(allowed_tools=["a"]).offers("b", True)
    read_only = server(allowed_tools={"read_only": True})
    assert read_only.offers("b", True) and not read_only.offers("b", False)
    assert "headers" not in server(headers={"X": "y"}, authorization="t").model_dump()


def test_a_model_reads_mcp_items_as_calls_and_results():
    from core.conversation.items import Item
    from core.conversation.mcp_tools import DECLINED, FAILED, for_model

    items = [Item("user", "hi"),
             Item("assistant", type="mcp_list_tools", server_label="s", tools=[], parts=[]),
             Item("assistant", item_id="c1", type="mcp_call", server_label="s", name="look", arguments="{}",
                  output="42", parts=[]),
             Item("assistant", item_id="c2", type="mcp_call", server_label="s", name="look", arguments="{}",
                  error={"type": "tool_execution_error", "message": "down"}, parts=[]),
             Item("assistant", item_id="r1", type="mcp_approval_request", server_label="s", name="pay",
                  arguments='{"x": 1}', parts=[]),
             Item("user", type="mcp_approval_response", approval_request_id="r1", approve=False, reason="no",
                  parts=[])]
    seen = for_model(items)
    assert [(i.type, i.name, i.output) for i in seen] == [
        ("message", None, None), ("function_call", "s__look", None), ("function_call_output", None, "42"),
        ("function_call", "s__look", None), ("function_call_output", None, FAILED + "down"),
        ("function_call", "s__pay", None), ("function_call_output", None, DECLINED + " (no)")]
    assert len({i.item_id for i in seen}) == len(seen)


def test_a_recorded_client_event_keeps_no_mcp_secret():
    from worker.mcp_client import without_secrets

    event = {"type": "session.update", "session": {"type": "realtime", "tools": [
        {"type": "function", "name": "f"},
        {"type": "mcp", "server_label": "s", "server_url": "https://x/mcp", "headers": {"X-Key": "k1"},
         "authorization": "k2"}]}}
    kept = without_secrets(event)
    assert "k1" not in json.dumps(kept) and "k2" not in json.dumps(kept)
    assert kept["session"]["tools"][1]["headers"] == {"X-Key": "[redacted]"} and kept["session"]["tools"][0] == {
        "type": "function", "name": "f"}
    assert event["session"]["tools"][1]["headers"] == {"X-Key": "k1"}  # the session's own copy is untouched
    create = {"type": "response.create", "response": {"tools": [{"type": "mcp", "authorization": "k3"}]}}
    assert "k3" not in json.dumps(without_secrets(create))


async def test_a_token_in_the_url_or_headers_never_reaches_an_error_or_a_log(caplog):
    caplog.set_level("DEBUG")
    url = unused_url() + "?api_key=secret-in-query"
    async with Session(ScriptedToolBackend(["Hi."])) as s:
        await s.update(mcp(url, headers={"Authorization": "Bearer secret-in-header"}))
        await s.channel.until("mcp_list_tools.failed")
        err = (await s.channel.until("error"))["error"]
        assert "could not connect" in err["message"]
        assert "secret-in-header" not in json.dumps(s.channel.events)  # the URL is echoed as given, the header never
        assert "secret" not in json.dumps(s.of("error")) and "secret" not in caplog.text
