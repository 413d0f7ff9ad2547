"""Property-based run over the OpenAI REST routes: schemathesis generates requests from the
gateway's own OpenAPI document (valid and deliberately invalid ones) and sends them to a real
stack; no answer may be a 5xx, and the worker must be idle again afterwards (no leaked lease).

Kept short for CI: a bounded number of examples per route, and generated chat requests get a
small ``max_completion_tokens`` (and speech inputs a short text), so valid ones finish fast.
"""

from __future__ import annotations

import base64
import os
import time
import zlib
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from core.media import wav_bytes
from tests.support.stack import Stack

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))  # per route and mode; raise it for a deeper local run
MODEL = "omniduplex-cascade"
FAST_TOKENS = 6


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("fuzz"), workers=1, queue={"max_wait_s": 60}).start()
    yield s
    s.stop()


def _tone_wav(seconds: float = 0.6) -> bytes:
    t = np.arange(int(16000 * seconds)) / 16000
    return wav_bytes((np.sin(2 * np.pi * 220 * t) * 6000).astype("<i2").tobytes(), 16000)


def _png() -> bytes:
    import cv2

    return cv2.imencode(".png", np.full((16, 16, 3), 200, np.uint8))[1].tobytes()


TONE_WAV = _tone_wav()
PNG_URL = "data:image/png;base64," + base64.b64encode(_png()).decode()


def _often(value) -> bool:
    """A stable coin (3 in 4) from the generated value: Hypothesis needs repeatable cases."""
    return zlib.crc32(repr(value).encode()) % 4 != 0


def map_body(context, body):
    """Steer generated requests past the first check so the worker paths get fuzzed too: the real
    model id and real media most of the time, short replies and speech so valid ones stay quick."""
    if not isinstance(body, dict) or context.operation is None:
        return body
    path = context.operation.path
    if isinstance(body.get("model"), str) and _often(body["model"]):
        body["model"] = MODEL
    if path == "/v1/chat/completions":
        for key in ("max_tokens", "max_completion_tokens"):
            # A whole float (2388.0) is a JSON integer too, and the server takes it as one; a
            # fractional one stays, for the negative runs to check the 400.
            value = body.get(key)
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            if whole and not isinstance(value, bool) and value > FAST_TOKENS:
                body[key] = FAST_TOKENS
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_completion_tokens"] = FAST_TOKENS
        messages = body.get("messages")
        for message in messages if isinstance(messages, list) else []:  # negative runs send any type
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str) and not content.strip() and _often(content + repr(message)):
                message["content"] = "Say hi."  # empty turns are a 400; reach the model more often
            for part in content if isinstance(content, list) else []:
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("image_url"), dict) and _often(part["image_url"].get("url")):
                    part["image_url"]["url"] = PNG_URL
                if isinstance(part.get("input_audio"), dict) and _often(part["input_audio"].get("data")):
                    part["input_audio"]["data"] = base64.b64encode(TONE_WAV).decode()
    elif path == "/v1/audio/speech" and isinstance(body.get("input"), str):
        body["input"] = body["input"][:80]
    elif path == "/v1/audio/transcriptions" and "file" in body and _often(body["file"]):
        body["file"] = TONE_WAV
    return body


def test_the_body_hook_takes_any_shape_a_negative_run_draws():
    """Negative runs draw any JSON type for any field (``messages: 1.0`` stopped a full run once)."""
    context = SimpleNamespace(operation=SimpleNamespace(path="/v1/chat/completions"))
    for messages in (1.0, "x", None, {"a": 1}, [1, None, {"content": 2}, {"content": [3, {"image_url": 4}]}]):
        body = map_body(context, {"model": MODEL, "messages": messages})
        assert body["messages"] == messages and body["max_completion_tokens"] == FAST_TOKENS


def map_path_parameters(context, path_parameters):
    if isinstance(path_parameters, dict) and "model_id" in path_parameters and _often(path_parameters["model_id"]):
        path_parameters["model_id"] = MODEL
    return path_parameters


@pytest.fixture(scope="module")
def api_schema(stack):
    schema = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    schema.hook(map_body)
    schema.hook(map_path_parameters)
    return schema


OPERATIONS = [("GET", "/v1/models"), ("GET", "/v1/models/{model_id}"), ("POST", "/v1/chat/completions"),
              ("POST", "/v1/audio/speech"), ("POST", "/v1/audio/transcriptions")]


def test_schema_lists_the_routes(api_schema):
    found = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert set(OPERATIONS) <= found


# schemathesis' own pytest decorator reads a private pytest attribute that pytest 9 removed, so
# each operation's strategy drives a plain Hypothesis test instead.
# Negative data needs a schema to break: the GET routes take at most a free-form path string.
CASES = [(m, p, GenerationMode.POSITIVE) for m, p in OPERATIONS] + [
    (m, p, GenerationMode.NEGATIVE) for m, p in OPERATIONS if m == "POST"]


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {g.value}" for m, p, g in CASES])
def test_no_server_errors(api_schema, method, path, mode):
    operation = api_schema[path][method]
    session = requests.Session()
    statuses: Counter[int] = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate, Phase.shrink])
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:
        response = case.call(session=session, timeout=60)
        statuses[response.status_code] += 1

        assert response.status_code < 500, f"{response.status_code} {response.text[:500]}\n{case.as_curl_command()}"
        if method == "POST" and response.status_code >= 400:
            error = response.json()["error"]  # OpenAI's error shape on every 4xx
            assert {"message", "type", "param", "code"} <= set(error), response.text

    run()
    print(f"{method} {path} {mode.value}: statuses {dict(sorted(statuses.items()))}")
    if mode == GenerationMode.POSITIVE and method == "POST":
        assert statuses[200] > 0, f"no generated request got through to the model: {statuses}"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/audio/speech", "/v1/audio/transcriptions"])
def test_arbitrary_bytes_get_4xx(stack, path):
    """Bodies no schema describes: random bytes under JSON, multipart (with a boundary) or no type."""
    session = requests.Session()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(body=st.binary(max_size=4096) | st.text(max_size=400).map(str.encode),
           content_type=st.sampled_from(["application/json", "multipart/form-data; boundary=xYz", "text/plain", ""]))
    def run(body: bytes, content_type: str) -> None:
        headers = {"content-type": content_type} if content_type else {}
        response = session.post(stack.url + path, data=body, headers=headers, timeout=60)
        assert 400 <= response.status_code < 500, (response.status_code, response.text[:300], body[:100])
        assert {"message", "type", "param", "code"} <= set(response.json()["error"])

    run()


def test_worker_idle_after_fuzzing(stack):
    deadline = time.monotonic() + 5
    while True:
        h = stack.health()
        w = stack.worker_health()
        if h["slots_busy"] == 0 and h["queue_length"] == 0 and w["active_sessions"] == 0:
            return
        assert time.monotonic() < deadline, f"not idle: gateway {h}, worker {w}"
        time.sleep(0.05)
