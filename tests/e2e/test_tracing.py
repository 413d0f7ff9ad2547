"""OpenTelemetry tracing (issue 36) through a real gateway and worker: spans exported over
OTLP/HTTP to a receiver this test runs, decoded with ``opentelemetry.proto``.

- one trace per realtime session: the gateway's ``realtime.session`` and, as its child, the
  worker's, which has a ``turn`` per reply with its stage children on the timeline;
- a REST chat completion: the gateway's ``rest /v1/chat/completions`` with the worker's child;
- an MCP tool call: a span under the worker's session;
- GenAI attributes; no text (what was typed, what was answered) on any span by default;
- off (the default): nothing reaches the receiver, and neither process imports the SDK.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.mcp_server import mcp_server  # noqa: F401 - a fixture
from tests.support.realtime_client import Client, close_leftovers
from tests.support.stack import ROOT, Stack

TYPED = "Please tell me the colour of a clear daytime sky"


class Receiver:
    """A tiny OTLP/HTTP collector: POST /v1/traces, protobuf; keeps every span as a dict."""

    def __init__(self) -> None:
        spans, posts = self.spans, self.posts = [], []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                posts.append(self.path)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for rs in request.resource_spans:
                    resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            spans.append({"name": s.name, "trace": s.trace_id.hex(), "id": s.span_id.hex(),
                                          "parent": s.parent_span_id.hex() or None, "start": s.start_time_unix_nano,
                                          "end": s.end_time_unix_nano, "resource": resource,
                                          "attrs": {a.key: _value(a.value) for a in s.attributes}})
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, predicate, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.spans):
                return list(self.spans)
            time.sleep(0.05)
        raise AssertionError(f"spans never matched; got {[(s['name'], s['resource'].get('service.instance.id')) for s in self.spans]}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@pytest.fixture(scope="module")
def env():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        mp.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the batch goes out 0.1 s after a span ends
        yield


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def traced(env, receiver, tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("traced"), workers=1, telemetry={"otlp_endpoint": receiver.url},
              tools={"mcp": {"allowed_hosts": ["127.0.0.1"]}}).start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
async def _close_leftovers():
    yield
    await close_leftovers()


def _by_instance(spans: list[dict], name: str, instance: str) -> list[dict]:
    return [s for s in spans if s["name"] == name and s["resource"].get("service.instance.id") == instance]


async def test_session_trace_spans_gateway_and_worker(traced, receiver):
    c = await Client.open(traced)
    await c.turn_based()
    await c.typed(TYPED)
    response = await c.respond(max_output_tokens=16)
    assert response["status"] == "completed"
    answer = " ".join(p.get("transcript") or p.get("text") or "" for o in response["output"]
                      for p in o.get("content") or [])
    await c.close()
    spans = receiver.wait_for(lambda ss: _by_instance(ss, "realtime.session", "gateway")
                              and _by_instance(ss, "realtime.session", "w0") and _by_instance(ss, "turn", "w0"))
    gw, = _by_instance(spans, "realtime.session", "gateway")
    wk, = _by_instance(spans, "realtime.session", "w0")
    # one trace: the worker's session span is the child of the gateway's
    assert wk["trace"] == gw["trace"] and wk["parent"] == gw["id"] and gw["parent"] is None
    assert gw["resource"]["service.name"] == "omniduplex"
    assert gw["attrs"]["gen_ai.system"] == "omniduplex" and gw["attrs"]["gen_ai.request.model"] == "omniduplex-cascade"
    assert gw["attrs"]["omniduplex.transport"] == "websocket" and gw["attrs"]["omniduplex.worker.id"] == "w0"
    assert gw["attrs"]["omniduplex.queue_wait_ms"] >= 0 and gw["attrs"]["omniduplex.end_reason"] == "client"
    assert wk["attrs"]["omniduplex.backend"] == "cascade" and wk["attrs"]["gen_ai.request.model"] == "omniduplex-cascade"
    assert wk["attrs"]["omniduplex.session_id"] == gw["attrs"]["omniduplex.session_id"]
    # the turn: under the worker's session, its stages as children on its timeline
    turn, = _by_instance(spans, "turn", "w0")
    assert turn["trace"] == gw["trace"] and turn["parent"] == wk["id"]
    a = turn["attrs"]
    assert a["gen_ai.operation.name"] == "chat" and a["omniduplex.status"] == "completed"
    assert a["omniduplex.interrupted"] is False and a["omniduplex.stage.llm_ms"] > 0
    assert a["gen_ai.response.id"] == response["id"]
    usage = response["usage"]  # the turn's tokens, as the client's response.done counted them
    assert a["gen_ai.usage.input_tokens"] == usage["input_tokens"] > 0
    assert a["gen_ai.usage.output_tokens"] == usage["output_tokens"] > 0
    stages = {s["name"]: s for s in spans if s["parent"] == turn["id"]}
    assert {"llm", "tts"} <= set(stages), stages.keys()  # typed: no end-of-turn wait, no recognition
    assert stages["llm"]["end"] <= stages["tts"]["start"] + 1e6  # tts follows the first words
    for stage in stages.values():
        assert turn["start"] <= stage["start"] <= stage["end"] <= turn["end"] + 1e6
        assert abs((stage["end"] - stage["start"]) / 1e6 - stage["attrs"]["omniduplex.stage_ms"]) < 1
        assert a[f"omniduplex.stage.{stage['name']}_ms"] == stage["attrs"]["omniduplex.stage_ms"]
    # the worker's session starts inside the gateway's and holds its turns; it may end a few ms
    # after the gateway's (the gateway stops at the close handshake, the worker after its teardown)
    assert gw["start"] <= wk["start"] <= turn["start"] and turn["end"] <= wk["end"] and wk["start"] <= gw["end"]
    # content absent by default: neither the typed words nor the answer on any span
    texts = [str(v) for s in receiver.spans for v in (*s["attrs"].values(), s["name"])]
    assert not any("colour of a clear" in t for t in texts)
    assert len(answer.strip()) >= 4 and not any(answer.strip() in t for t in texts), answer


async def test_mcp_call_span(traced, receiver, mcp_server):
    """An MCP tool call: a span under the worker's session span, named after the tool, with its
    server and duration, and neither its arguments nor its result (content is off)."""
    c = await Client.open(traced)
    await c.update(audio={"input": {"turn_detection": None}}, tools=[{
        "type": "mcp", "server_label": "weather", "server_url": mcp_server.url, "require_approval": "never",
        "allowed_tools": ["get_weather"]}])
    await c.until("conversation.item.done")  # the server's tools listed
    await c.typed("What is the weather in Paris today?")
    first = await c.respond(max_output_tokens=40)
    call = next(o for o in first["output"] if o["type"] == "mcp_call")
    assert call["output"] == "The weather in Paris is sunny, 21 degrees."
    await c.until("response.done", count=2, timeout=120)
    await c.close()
    spans = receiver.wait_for(lambda ss: _by_instance(ss, "execute_tool get_weather", "w0")
                              and len(_by_instance(ss, "realtime.session", "w0")) >= 2)
    tool, = _by_instance(spans, "execute_tool get_weather", "w0")
    session = next(s for s in _by_instance(spans, "realtime.session", "w0") if s["id"] == tool["parent"])
    assert session["trace"] == tool["trace"]
    a = tool["attrs"]
    assert a["gen_ai.operation.name"] == "execute_tool" and a["gen_ai.tool.name"] == "get_weather"
    assert a["omniduplex.mcp.server_label"] == "weather" and a["omniduplex.duration_ms"] > 0
    assert "error.type" not in a and "gen_ai.tool.call.arguments" not in a and "gen_ai.tool.call.result" not in a
    assert session["start"] <= tool["start"] <= tool["end"] <= session["end"]
    texts = [str(v) for s in spans for v in s["attrs"].values()]
    assert not any("Paris" in t or "sunny" in t for t in texts)


async def test_rest_request_trace(traced, receiver):
    r = httpx.post(f"{traced.url}/v1/chat/completions", timeout=60, json={
        "model": "omniduplex-cascade", "max_tokens": 6, "messages": [{"role": "user", "content": TYPED}]})
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]["message"]["content"]
    route = "rest /v1/chat/completions"
    spans = receiver.wait_for(lambda ss: _by_instance(ss, route, "gateway") and _by_instance(ss, "rest /internal/v1/chat", "w0"))
    gw, = _by_instance(spans, route, "gateway")
    wk, = _by_instance(spans, "rest /internal/v1/chat", "w0")
    assert wk["trace"] == gw["trace"] and wk["parent"] == gw["id"]
    assert gw["attrs"]["http.response.status_code"] == 200 and wk["attrs"]["http.response.status_code"] == 200
    assert gw["attrs"]["gen_ai.operation.name"] == "chat" and gw["attrs"]["gen_ai.request.model"] == "omniduplex-cascade"
    assert gw["attrs"]["gen_ai.usage.input_tokens"] > 0 and gw["attrs"]["gen_ai.usage.output_tokens"] > 0
    assert gw["attrs"]["omniduplex.worker.id"] == "w0"
    texts = [str(v) for s in spans for v in s["attrs"].values()]
    assert not any("colour of a clear" in t for t in texts)
    assert not answer.strip() or not any(answer.strip() in t for t in texts)


async def test_off_exports_nothing(env, tmp_path_factory):
    """Tracing off (no endpoint in the config nor the env): a session and a REST call send the
    receiver nothing."""
    quiet = Receiver()
    plain = Stack(tmp_path_factory.mktemp("plain"), workers=1).start()
    try:
        c = await Client.open(plain)
        await c.turn_based()
        await c.typed(TYPED)
        await c.respond(max_output_tokens=4)
        await c.close()
        r = httpx.post(f"{plain.url}/v1/chat/completions", timeout=60, json={
            "model": "omniduplex-cascade", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200
        time.sleep(0.5)  # 5x the schedule delay the env sets
        assert quiet.posts == [] and receiver_is_alive(quiet)
    finally:
        plain.stop()
        quiet.close()


def receiver_is_alive(r: Receiver) -> bool:
    """The receiver answers (so 'nothing arrived' is not 'nothing could arrive')."""
    out = httpx.post(f"{r.url}/v1/traces", content=ExportTraceServiceRequest().SerializeToString(),
                     headers={"content-type": "application/x-protobuf"}, timeout=5)
    ok = out.status_code == 200 and r.posts == ["/v1/traces"]
    r.posts.clear()
    return ok


def test_config(monkeypatch):
    """The keys are validated with the field and the reason; the env turns tracing on only when
    the config leaves the endpoint unset."""
    from core.config import ConfigError, load_config
    from core.telemetry import resolve_endpoint

    for bad, why in (({"otlp_endpoint": "collector:4318"}, "telemetry.otlp_endpoint: Value error, must be an http://"),
                     ({"otlp_endpoint": "http://c:4318/v1/traces"}, "give the base URL: /v1/traces is added"),
                     ({"sample_ratio": 1.5}, "telemetry.sample_ratio: Input should be less than or equal to 1"),
                     ({"exporter": "grpc"}, "telemetry.exporter: Extra inputs are not permitted")):
        with pytest.raises(ConfigError, match=re.escape(why)):
            load_config(None, {f"telemetry.{k}": v for k, v in bad.items()})
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert resolve_endpoint(load_config(None).telemetry) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318/")
    assert resolve_endpoint(load_config(None).telemetry) == "http://env:4318"
    configured = load_config(None, {"telemetry.otlp_endpoint": "http://cfg:4318"}).telemetry
    assert resolve_endpoint(configured) == "http://cfg:4318"  # the config wins


_PROBE = """
import sys, asyncio
from core.config import AppConfig
from core import telemetry
import gateway.app, worker.app
cfg = AppConfig.model_validate({%s})
gateway.app.create_app(cfg)
worker.app.create_app(cfg)
print(telemetry.enabled(), sorted({m.split('.')[1] for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))}))
"""


@pytest.mark.parametrize("config, on", [("", False), ("'telemetry': {'otlp_endpoint': 'http://127.0.0.1:9'}", True)],
                         ids=["off", "on"])
def test_sdk_imported_only_when_on(config, on):
    """Off, the apps never load the SDK or the exporter; the 'on' case shows the probe can see them."""
    env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT"}
    out = subprocess.run([sys.executable, "-c", _PROBE % config], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    assert line == ("True ['exporter', 'sdk']" if on else "False []"), line
