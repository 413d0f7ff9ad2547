"""The OpenAI Agents SDK for JavaScript (``@openai/agents-realtime``, pinned in
``tests/js/package-lock.json``) against a real gateway and cascade worker, as an app built on it
would use it (issue 33):

- in Node, over WebSocket (``tests/js/node_ws_session.mjs``): a ``RealtimeSession`` with
  ``transport: 'websocket'``, the service's API key, a typed question; the spoken answer arrives
  (its transcript fits the question, its audio as the SDK's ``audio`` events), with no error the
  session emitted and no warning the SDK logged;
- in headless Chromium, over WebRTC (``tests/js/webrtc_page.html`` on the SDK's own browser
  bundle): the page, served by a small app server on another origin than the gateway's, gets an
  ephemeral key that its app server minted with the service's key, the SDK posts its offer to
  ``/v1/realtime/calls`` with it (a CORS request), the fake microphone asks the question, and the
  answer plays on the call's audio track with its transcript in the session's history and
  ``output_audio_buffer.started``/``stopped`` on the data channel; the page never held the
  service's key, and the SDK refused a key that is not ephemeral before making any request.

``scripts/install.sh --with-browser`` installs the packages with ``npm ci``; without Node (or
before that install) these tests are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from devtools.browser_call import JS, JS_STAMP, SDK_BUNDLE, AgentsApp, sdk_call_results
from tests.support.stack import Stack

KEY = "sk-test-agents-js-0123456789"
QUESTION = "What is the capital of France?"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not JS_STAMP.exists(),
    reason="the Agents SDK for JavaScript is not installed (tests/js/node_modules): needs Node.js 20+ and "
    "npm, then scripts/install.sh --with-browser (npm ci in tests/js)",
)


@pytest.fixture(scope="module")
def app_server():
    server = AgentsApp(KEY)
    yield server
    server.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, app_server):
    """A service with an API key; the app's page origin (another port) may call it from a browser."""
    s = Stack(tmp_path_factory.mktemp("agents_js"), workers=1,
              auth={"api_keys": [KEY], "allowed_origins": [app_server.origin]})
    try:
        yield s.start()
    finally:
        s.stop()
    app_server.gateway = None


def wait_idle(stack: Stack, timeout: float = 10.0) -> None:
    """One worker: a test must not queue behind the last one's teardown."""
    deadline = time.monotonic() + timeout
    while (h := stack.health())["slots_busy"] or h["queue_length"]:
        assert time.monotonic() < deadline, f"stack not idle: {h}"
        time.sleep(0.05)


def show(summary: dict) -> str:
    return json.dumps(summary, indent=1)


def test_node_websocket_typed_question_gets_a_spoken_answer(stack):
    wait_idle(stack)
    env = {**os.environ, "OMNIDUPLEX_API_KEY": KEY}
    proc = subprocess.run(
        ["node", str(JS / "node_ws_session.mjs"),
         "--url", f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-cascade",
         "--text", QUESTION, "--timeout", "40"],
        cwd=JS, env=env, capture_output=True, text=True, timeout=90)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}")
    s = json.loads(lines[-1])
    print(show(s))
    assert not s["errors"] and not s["log_warnings"] and not s["failure"], (
        "the Agents SDK reported problems:\n"
        + show({k: s[k] for k in ("errors", "log_warnings", "failure")}))
    assert s["reply_done"], show(s)
    # The history the app shows: the question, then an answer that fits it.
    assert [i["role"] for i in s["items"]] == ["user", "assistant"], show(s)
    assert s["items"][0]["text"] == QUESTION
    assert s["items"][1]["status"] == "completed" and "paris" in s["answer"].lower(), show(s)
    # Its audio, as the SDK hands it to the app to play.
    assert s["audio_events"] > 0 and s["empty_audio_events"] == 0, show(s)
    assert s["audio_s"] > 0.5, show(s)
    events = s["session_event_types"]
    assert events.get("audio_start") == 1 and events.get("audio_stopped") == 1, show(s)


def test_browser_webrtc_with_a_minted_key_spoken_question_spoken_answer(stack, app_server, launch, tts,
                                                                         tmp_path):
    from tests.support.browser import dump_console, require_browser, spoken_wav, wait_until

    require_browser()
    if not (SDK_BUNDLE / "openai-realtime-agents.mjs").is_file():
        pytest.fail(f"the SDK's browser bundle is missing: {SDK_BUNDLE}")
    wait_idle(stack)
    app_server.gateway = stack.url
    # The fake microphone starts playing when the SDK opens it, before its offer is even sent, and
    # a call's microphone audio counts from session.created on (as a user speaks once the app says
    # it is connected): the question comes after 4 s of silence, once, and then silence long
    # enough that the device's loop does not ask again.
    wav = spoken_wav(tmp_path / "question.wav", tts, QUESTION, lead_s=4.0, total_s=40.0)

    def answered(r: dict) -> bool:
        types = [e["type"] for e in r.get("events", [])]
        said = [i for i in r.get("history", []) if i["role"] == "assistant" and i["text"].strip()]
        return bool(r.get("failure") or r.get("errors")) or (
            bool(said) and "output_audio_buffer.stopped" in types and "response.done" in types)

    # One call, asked once: the question must be heard as asked. (It was heard as "... capital of
    # friends?" in about a third of calls until issue 44: the bundled Whisper's transcript turned
    # on where a 32 ms VAD window cut the clip, which a call's random timing moves; core/cascade/asr.py.)
    app_server.minted.clear()
    browser = launch(wav)
    browser.get(f"{app_server.origin}/?gateway={stack.url}")
    r = wait_until(lambda: answered(sdk_call_results(browser)) and sdk_call_results(browser),
                   timeout=60) or sdk_call_results(browser)
    try:
        heard = browser.execute_async_script("window.__inboundAudio().then(arguments[arguments.length - 1])")
        r["inbound_audio"] = heard
        print(show(r))
        assert not r.get("failure"), show(r)
        assert not r["errors"], "the SDK reported errors:\n" + show(r["errors"])
        assert not [e for e in r["events"] if e["type"] == "error"], show(r)
        assert r["status"] == "connected" and r["callId"] and r["callId"].startswith("rtc_"), show(r)
        # The user's words, then the assistant's answer that fits them, as the app's history shows them.
        history = r["history"]
        assert [i["role"] for i in history][-2:] == ["user", "assistant"], show(r)
        assert "france" in history[-2]["text"].lower(), show(r)
        assert "paris" in history[-1]["text"].lower(), show(r)
        # The answer was played on the call's audio track: the SDK saw the server start and stop it,
        # and the page's peer connection received audible audio.
        types = [e["type"] for e in r["events"]]
        assert types.index("output_audio_buffer.started") < types.index("output_audio_buffer.stopped"), (
            show(r))
        done = next(e for e in r["events"] if e["type"] == "response.done")
        assert done["status"] == "completed", show(r)
        assert "response.output_audio.delta" not in types, "audio rides the track, not the data channel"
        # (totalAudioEnergy sums level² x seconds: 0.01 is 1 s at an RMS of 0.1; the idle track's
        # silence frames add nothing)
        assert heard and heard["packets"] > 50 and heard["energy"] > 0.01, show(r)
        # The page only ever held the ephemeral key: one minted, and every request it made that
        # carried a key carried that one (the service's key never reached the browser).
        assert len(app_server.minted) == 1 and r["keyPrefix"] == "ek_", show(r)
        keyed = [q for q in r["requests"] if q["authorization"]]
        assert keyed and all(q["authorization"] == f"Bearer {app_server.minted[0]}" for q in keyed), show(r)
        assert all(q["url"].startswith(f"{stack.url}/v1/realtime/calls") for q in keyed), show(r)
        assert KEY not in browser.page_source and KEY not in json.dumps(r)
        # The SDK refused a key that is not ephemeral, before it made any request with it: the page's
        # one request through the SDK is the call with the minted key.
        refused = r["refusedNonEphemeral"]
        assert refused["refused"] and "ephemeral" in refused["message"], show(r)
        assert len(r["requests"]) == 1, show(r)
    except BaseException:
        dump_console(browser)
        raise
    finally:
        browser.execute_script("window.__session && window.__session.close()")
    wait_until(lambda: stack.health()["slots_busy"] == 0, timeout=10)
