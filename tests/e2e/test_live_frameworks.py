"""Pipecat's ``OpenAILiveLLMService`` (OpenAI's Live dialect, ``/v1/live/sessions``) against the real
gateway and cascade worker (issue 48): a spoken question is heard, transcribed and answered aloud,
a spoken question that needs a function goes out as a Responses delegation whose call
Pipecat runs with its registered handler, and as a client delegation whose backend worker runs it;
the model then says the result.

The client is ``tests/support/frameworks/pipecat_live.py`` in ``.venv-frameworks`` (as in
``test_frameworks.py``); the question is Piper speech (the same source ``test_frameworks.py``
uses), streamed as 20 ms PCM16 24 kHz ``InputAudioRawFrame``s at real time after 0.5 s of
silence and followed by silence. The gateway requires an API key, which Pipecat sends as its
Bearer header. Each run must report no error at all: no ``ErrorFrame``, nothing Pipecat logs at
warning level or above (an event it cannot parse is such a warning), and the graceful end
(``session.close``) answered by ``session.closed``.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_frameworks import FRAMEWORKS_PYTHON, FRAMEWORKS_STAMP, RATE, run_client, show, wait_idle
from tests.support.stack import Stack

KEY = "sk-live-pipecat-test"

pytestmark = [
    pytest.mark.skipif(
        not (FRAMEWORKS_PYTHON.exists() and FRAMEWORKS_STAMP.exists()),
        reason=".venv-frameworks missing or incomplete: run scripts/install.sh --with-browser "
        "(builds it from requirements-frameworks.txt)",
    ),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # Two workers: a client delegation's backend (Chat Completions) runs beside the Live session.
    s = Stack(tmp_path_factory.mktemp("live_frameworks_stack"), workers=2, auth={"api_keys": [KEY]})
    try:
        yield s.start()
    finally:  # also when start() fails: no gateway left behind
        s.stop()


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """Speech as raw PCM16 24 kHz mono (Piper), after 0.5 s of silence: a file per text."""
    from core.cascade.tts import PiperTts

    tts, folder = PiperTts(), tmp_path_factory.mktemp("live_speech")

    def say(text: str) -> str:
        path = folder / ("".join(c for c in text.lower() if c.isalnum() or c == " ").replace(" ", "_") + ".pcm")
        path.write_bytes(b"\x00\x00" * (RATE // 2) + b"".join(tts.synthesize(text, deterministic=True)))
        return str(path)

    return say


def run_live(stack: Stack, mode: str, audio: str, timeout: float) -> dict:
    wait_idle(stack)
    s = run_client("pipecat_live.py", "--base-url", f"ws://127.0.0.1:{stack.port}/v1/live/sessions",
                   "--rest-url", f"http://127.0.0.1:{stack.port}/v1",
                   "--api-key", KEY, "--mode", mode, "--audio", audio, "--timeout", str(timeout),
                   timeout=timeout + 60)
    assert not (s["error_frames"] or s["log_errors"] or s["log_warnings"] or s["problems"]), (
        "Pipecat reported errors:\n" + show({k: s[k] for k in ("error_frames", "log_errors", "log_warnings",
                                                               "problems")}))
    assert s["done"] and len(s["session_started"]) == 1, show(s)
    # The reply is heard: Live output audio, PCM16 24 kHz, as SpeechOutputAudioRawFrames.
    assert s["audio_frames"] > 0 and s["empty_audio_frames"] == 0, show(s)
    assert s["sample_rates"] == [RATE] and s["audio_s"] > 0.5, show(s)
    assert s["frame_types"].get("SpeechOutputAudioRawFrame") == s["audio_frames"], show(s)
    # The user's turn: one final TranscriptionFrame (upstream), after the interim ones.
    assert len(s["user_transcripts"]) == 1 and s["interim_transcripts"] >= 1, show(s)
    # The graceful end: session.close answered by session.closed (Pipecat waits 10 s for it).
    assert s["closed_reason"] == "close_requested" and s["close_s"] is not None and s["close_s"] < 10, show(s)
    return s


def test_pipecat_live_answers_a_spoken_question(stack, speech):
    s = run_live(stack, "speech", speech("What is the capital of France?"), timeout=40)
    assert "france" in s["user_transcripts"][0]["text"].lower(), show(s)
    # One reply, one assistant turn (Pipecat ends a turn after 0.8 s without a transcript delta).
    assert len(s["assistant_turns"]) == 1 and s["assistant_turns"][0]["end"] is not None, show(s)
    assert "paris" in s["assistant_turns"][0]["text"].lower(), show(s)
    assert not s["calls"] and not s["delegations"], show(s)


def test_pipecat_live_responses_delegation_runs_the_registered_function_and_says_the_result(stack, speech):
    """Spoken, not typed: the cascade's small LLM picks the tool itself (tool_choice auto) for this
    question, as it does for the same typed question in test_frameworks.py."""
    s = run_live(stack, "tools", speech("What's the weather like in London today?"), timeout=50)
    assert "weather" in s["user_transcripts"][0]["text"].lower(), show(s)
    # One Responses delegation, its call run by the handler registered with register_function.
    assert [d["target"] for d in s["delegations"]] == ["responses"], show(s)
    assert [c["name"] for c in s["calls"]] == ["get_weather"], show(s)
    assert s["calls"][0]["arguments"].get("city", "").lower() == "london", show(s)
    assert s["response_events"][:3] == ["response.created", "response.output_item.done", "response.completed"], (
        show(s))
    # The function's output went back (response.item.create + response.create) and the model
    # then spoke a reply that carries the result the handler returned (sky "sunny", 21 degrees C).
    after = [t for t in s["assistant_turns"] if t["start"] > s["results_at"][0]]
    assert len(after) == 1 and after[0]["end"] is not None, show(s)
    said = after[0]["text"].lower()
    assert "sunny" in said or "21" in said, show(s)


def test_pipecat_live_client_delegation_runs_the_applications_function_and_says_the_result(stack, speech):
    """Client delegation: the Live model hands the spoken weather question to the application
    (``session.delegation.created``, target ``client``); Pipecat's ``BackendLLMWorker`` reads the
    transcript, its LLM (the server's Chat Completions) calls the registered ``get_weather``, and
    what it writes comes back as commentary under the delegation's id, which the Live model says."""
    s = run_live(stack, "client", speech("What's the weather like in London today?"), timeout=90)
    assert "weather" in s["user_transcripts"][0]["text"].lower(), show(s)
    assert [d["target"] for d in s["delegations"]] == ["client"], show(s)
    assert not s["response_events"], show(s)
    assert [c["name"] for c in s["calls"]] == ["get_weather"], show(s)
    assert s["calls"][0]["arguments"].get("city", "").lower() == "london", show(s)
    after = [t for t in s["assistant_turns"] if t["start"] > s["results_at"][0]]
    assert after and after[-1]["end"] is not None, show(s)
    said = " ".join(t["text"] for t in after).lower()
    assert "sunny" in said or "21" in said, show(s)
