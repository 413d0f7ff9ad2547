"""Voice-agent frameworks' own clients against the real stack: the OpenAI Agents SDK
(``agents.realtime``) with a spoken question and ``server_vad`` (and once with its default
settings), Pipecat's ``OpenAIRealtimeLLMService`` with a typed question and a registered
function, and LiveKit Agents (an ``AgentSession`` on ``livekit-plugins-openai``'s realtime
``RealtimeModel``, no LiveKit server: the session's audio input and output are the client's own)
with a typed question, a spoken question under ``server_vad`` and a ``function_tool``. Each must
get a spoken reply and report no error at all: every error event, every server event the
framework fails to parse or validate, every ``ErrorFrame``, and for LiveKit every warning it
logs (its plugin logs what it cannot handle rather than raising).

The frameworks pin ``websockets<17`` (Agents SDK), ``soxr~=1.0`` and ``protobuf<7`` (Pipecat),
which clash with ``requirements.txt``, so they live in their own ``.venv-frameworks``
(``requirements-frameworks.txt``, built by ``scripts/install.sh --with-browser``). The clients
are scripts in ``tests/support/frameworks/`` run in that venv; each prints a JSON summary as its last
line of stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.support.stack import ROOT, Stack

FRAMEWORKS_PYTHON = ROOT / ".venv-frameworks" / "bin" / "python"
FRAMEWORKS_STAMP = ROOT / ".venv-frameworks" / ".omniduplex-install"  # written once the install is complete
CLIENTS = ROOT / "tests" / "support" / "frameworks"
RATE = 24000

pytestmark = [
    pytest.mark.skipif(
        not (FRAMEWORKS_PYTHON.exists() and FRAMEWORKS_STAMP.exists()),
        reason=".venv-frameworks missing or incomplete: run scripts/install.sh --with-browser "
        "(builds it from requirements-frameworks.txt)",
    ),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("frameworks_stack"), workers=1)
    try:
        yield s.start()
    finally:  # also when start() fails: no gateway left behind
        s.stop()


@pytest.fixture(scope="module")
def question_pcm(tmp_path_factory) -> str:
    """A spoken question as raw PCM16 24 kHz mono (Piper), after 0.5 s of silence."""
    from core.cascade.tts import PiperTts

    speech = b"".join(PiperTts().synthesize("What is the capital of France?", deterministic=True))
    path = tmp_path_factory.mktemp("speech") / "question.pcm"
    path.write_bytes(b"\x00\x00" * (RATE // 2) + speech)
    return str(path)


def wait_idle(stack: Stack, timeout: float = 10.0) -> None:
    """One worker: the next session must not queue behind the last one's teardown."""
    deadline = time.monotonic() + timeout
    while True:
        h = stack.health()
        if h["slots_busy"] == 0 and h["queue_length"] == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"stack not idle: {h}")
        time.sleep(0.05)


def run_client(script: str, *args: str, timeout: float = 90.0) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the frameworks venv only
    proc = subprocess.run([str(FRAMEWORKS_PYTHON), str(CLIENTS / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, (
        f"{script} exited {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}")
    summary = json.loads(lines[-1])
    print(show(summary))  # shown with -rP, or with the failure
    return summary


def show(summary: dict) -> str:
    return json.dumps(summary, indent=1)


def test_openai_agents_sdk_spoken_question(stack, question_pcm):
    wait_idle(stack)
    s = run_client("agents_voice.py", "--url", f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-cascade",
                   "--audio", question_pcm, "--timeout", "40")
    assert not s["errors"] and not s["exceptions"], (
        "the Agents SDK reported errors:\n" + show({k: s[k] for k in ("errors", "exceptions", "log_warnings")}))
    assert s["reply_done"], show(s)
    assert s["audio_events"] > 0 and s["empty_audio_events"] == 0, show(s)
    assert s["audio_s"] > 0.5, show(s)


def test_openai_agents_sdk_default_settings_hold_a_spoken_turn(stack, question_pcm):
    """RealtimeRunner with no settings at all: the SDK asks for semantic_vad, its own model name
    and voice, and gpt-4o-mini-transcribe; the turn must go through with no error."""
    wait_idle(stack)
    s = run_client("agents_voice.py", "--url", f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-cascade",
                   "--audio", question_pcm, "--timeout", "40", "--defaults")
    assert not s["errors"] and not s["exceptions"], (
        "the Agents SDK reported errors:\n" + show({k: s[k] for k in ("errors", "exceptions", "log_warnings")}))
    assert s["turn_detection"] and s["turn_detection"][-1]["type"] == "semantic_vad", show(s)
    assert s["reply_done"] and s["audio_s"] > 0.5, show(s)


def test_pipecat_typed_question(stack):
    wait_idle(stack)
    s = run_client("pipecat_text.py", "--base-url", f"ws://127.0.0.1:{stack.port}/v1/realtime",
                   "--model", "omniduplex-cascade", "--timeout", "40")
    assert not s["error_frames"] and not s["log_errors"] and not s["problems"], (
        "Pipecat reported errors:\n" + show({k: s[k] for k in ("error_frames", "log_errors", "problems", "log_warnings")}))
    assert s["reply_done"], show(s)
    assert s["audio_frames"] > 0 and s["empty_audio_frames"] == 0, show(s)
    assert s["sample_rates"] == [RATE] and s["audio_s"] > 0.5, show(s)


def test_pipecat_registered_function_gets_the_call_and_a_spoken_follow_up(stack):
    wait_idle(stack)
    s = run_client("pipecat_tools.py", "--base-url", f"ws://127.0.0.1:{stack.port}/v1/realtime",
                   "--model", "omniduplex-cascade", "--timeout", "60")
    assert not s["error_frames"] and not s["log_errors"] and not s["problems"], (
        "Pipecat reported errors:\n" + show({k: s[k] for k in ("error_frames", "log_errors", "problems")}))
    assert [c["name"] for c in s["calls"]] == ["get_weather"], show(s)
    assert isinstance(s["calls"][0]["arguments"].get("city"), str), show(s)
    assert s["reply_done"] and s["audio_s"] > 0.5, show(s)


def run_livekit(stack: Stack, mode: str, *args: str, timeout: float = 40.0) -> dict:
    wait_idle(stack)
    s = run_client("livekit_agent.py", "--base-url", f"ws://127.0.0.1:{stack.port}/v1", "--model", "omniduplex-cascade",
                   "--mode", mode, "--timeout", str(timeout), *args, timeout=timeout + 60)
    # Strict: the plugin logs what it cannot handle (an event's exception, an item it could not
    # place, a rejected item) instead of raising, so any warning counts.
    assert not (s["errors"] or s["closed"] or s["problems"] or s["log_warnings"]), (
        "LiveKit Agents reported errors:\n" + show({k: s[k] for k in ("errors", "closed", "problems", "log_warnings")}))
    assert s["reply_done"], show(s)
    assert s["audio_frames"] > 0 and s["empty_audio_frames"] == 0, show(s)
    assert s["sample_rates"] == [RATE] and s["audio_s"] > 0.5, show(s)
    return s


def test_livekit_agents_typed_question(stack):
    """The plugin's defaults as they are (semantic_vad, max_output_tokens "inf", voice "marin")."""
    s = run_livekit(stack, "text")
    assert s["turn_detection"] and s["turn_detection"][-1]["type"] == "semantic_vad", show(s)
    assert [i["role"] for i in s["items"]] == ["user", "assistant"], show(s)


def test_livekit_agents_spoken_question(stack, question_pcm):
    s = run_livekit(stack, "audio", "--audio", question_pcm)
    assert s["turn_detection"][-1]["type"] == "server_vad", show(s)
    assert s["server_event_types"].get("input_audio_buffer.speech_started") == 1, show(s)
    assert len(s["user_transcripts"]) == 1 and s["user_transcripts"][0].strip(), show(s)


def test_livekit_agents_function_tool_gets_the_call_and_a_spoken_follow_up(stack):
    s = run_livekit(stack, "tools", timeout=90)  # two replies
    assert [c["name"] for c in s["calls"]] == ["get_weather"], show(s)
    assert isinstance(s["calls"][0]["arguments"].get("city"), str), show(s)
    assert len(s["executed"]) == 1 and s["executed"][0]["output"], show(s)
    assert s["server_event_types"].get("response.function_call_arguments.done") == 1, show(s)
    assert s["server_event_types"].get("response.done") == 2, show(s)  # the call, then the spoken follow-up
