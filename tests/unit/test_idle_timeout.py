"""``turn_detection.idle_timeout_ms`` (core/conversation/idle_timeout.py) on the scripted backend: after
the last reply has been heard, a silence of that length is committed and answered; speech stops the
wait; the settings' checks and echo; and the events through the worker's ``RealtimeSession``,
validated against the ``openai`` package's types.

The protocol takes 5 to 30 s; these tests set 300 ms on the config directly (``model_copy`` does
not validate) to stay fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from pydantic import ValidationError

from core.config import LimitsConfig
from core.conversation import ConversationConfig, TurnDetection
from core.protocol import Dialect, ProtocolError
from gateway.realtime.minted_session import SessionConfigError, check_session
from tests.support.helpers import Collector
from tests.support.scripted_backend import SEGMENT_S, ScriptedBackend, quiet, tone
from tests.support.session_channel import SessionChannel
from worker.session import RealtimeSession
from worker.session_config import apply_session_update, session_object

IDLE_MS = 300


def idle_config(ms: int = IDLE_MS, **turn) -> ConversationConfig:
    td = TurnDetection(**turn).model_copy(update={"idle_timeout_ms": ms})
    return ConversationConfig(input_sample_rate=16000, turn_detection=td, output_audio=True)


@contextlib.asynccontextmanager
async def microphone(conv, pcm: bytes = b"", rate: int = 16000):
    """Streams ``pcm`` then silence in real time (20 ms pieces), as a client's microphone does."""

    async def run() -> None:
        step = rate * 20 // 1000 * 2
        start = time.perf_counter()
        data, i = pcm, 0
        while True:
            piece = data[i:i + step] if i < len(data) else quiet(0.02, rate)
            i += step
            await conv.append_audio(piece)
            await asyncio.sleep(max(0.0, start + i / (2 * rate) - time.perf_counter()))

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def stamp(col: Collector, kind: str, n: int = 1) -> float:
    return [t for t, e in col.events if e.type == kind][n - 1]


async def test_a_silence_after_the_reply_is_committed_and_answered():
    backend = ScriptedBackend(["one"])  # 0.2 s of reply audio
    conv = backend.open_conversation(idle_config())
    col = Collector(conv)
    async with microphone(conv):
        await conv.add_text("Hello")
        await conv.create_response()
        await col.wait_for("response_done")
        fired = await col.wait_for("timeout_triggered", timeout=5)
        await col.wait_for("response_done", count=2)
    after = [e.type for _, e in col.events][[e.type for _, e in col.events].index("timeout_triggered"):]
    assert after[:4] == ["timeout_triggered", "input_committed", "input_transcript", "response_started"]
    committed, transcript = col.of("input_committed")[0], col.of("input_transcript")[0]
    assert committed.item_id == transcript.item_id == fired.item_id and transcript.transcript == ""
    # the wait began once the reply's audio had played, and lasted the timeout (input offsets agree)
    waited = stamp(col, "timeout_triggered") - stamp(col, "response_done")
    assert SEGMENT_S + IDLE_MS / 1000 - 0.05 < waited < SEGMENT_S + IDLE_MS / 1000 + 0.3, waited
    assert IDLE_MS - 60 <= fired.audio_end_ms - fired.audio_start_ms <= IDLE_MS + 100
    assert committed.audio_ms == fired.audio_end_ms - fired.audio_start_ms
    # a text model reads a note; the client sees an audio item with an empty transcript
    item = conv.item(fired.item_id)
    assert item.role == "user" and item.parts[0].kind == "audio" and item.parts[0].text == ""
    assert item.text == "[The user has said nothing for 0 seconds.]"
    assert backend.jobs[-1].items[-1] is item
    await conv.close()
    backend.close()


async def test_after_each_reply_again_and_not_before_the_first():
    backend = ScriptedBackend(["one"])
    conv = backend.open_conversation(idle_config())
    col = Collector(conv)
    async with microphone(conv):
        await asyncio.sleep(0.8)
        assert not col.of("timeout_triggered")  # nothing was said yet: nothing to follow up
        await conv.add_text("Hello")
        await conv.create_response()
        await col.wait_for("timeout_triggered", count=2, timeout=5)
    assert stamp(col, "timeout_triggered", 2) > stamp(col, "response_done", 2)  # after the prompt's reply
    await conv.close()
    backend.close()


async def test_speech_stops_the_wait():
    backend = ScriptedBackend(["one"], transcript="")  # a turn with no words gets no reply ...
    conv = backend.open_conversation(idle_config(600, silence_duration_ms=200))
    col = Collector(conv)
    await conv.add_text("Hello")
    await conv.create_response()
    await col.wait_for("response_done")
    async with microphone(conv, quiet(0.35) + tone(0.6)):  # after the reply was heard, before the wait ends
        await col.wait_for("speech_stopped", timeout=5)
        stopped = stamp(col, "speech_stopped")
        fired = await col.wait_for("timeout_triggered", timeout=5)
    # ... so the silence counts from the end of that speech, not from the reply
    assert stamp(col, "timeout_triggered") - stopped >= 0.6 - 0.02
    assert stamp(col, "speech_started") < stamp(col, "timeout_triggered")
    assert fired.audio_start_ms >= col.of("speech_stopped")[0].audio_end_ms
    await conv.close()
    backend.close()


async def test_without_create_response_the_silence_is_committed_once_and_not_answered():
    backend = ScriptedBackend(["one"])
    conv = backend.open_conversation(idle_config(create_response=False))
    col = Collector(conv)
    async with microphone(conv):
        await conv.add_text("Hello")
        await conv.create_response()
        await col.wait_for("timeout_triggered", timeout=5)
        await asyncio.sleep(3 * IDLE_MS / 1000)
    assert len(col.of("timeout_triggered")) == 1 and len(col.of("input_committed")) == 1
    assert len(col.of("response_started")) == 1
    await conv.close()
    backend.close()


async def test_an_audio_model_hears_the_silence():
    backend = ScriptedBackend(["one"], transcript_first=False)
    conv = backend.open_conversation(idle_config())
    col = Collector(conv)
    async with microphone(conv):
        await conv.add_text("Hello")
        await conv.create_response()
        fired = await col.wait_for("timeout_triggered", timeout=5)
        await col.wait_for("response_done", count=2)
    item = conv.item(fired.item_id)
    assert item.audio is not None and item.audio.size > 0 and float(abs(item.audio).max()) == 0.0
    assert item.text == "" and backend.jobs[-1].items[-1] is item
    await conv.close()
    backend.close()


# ---------------------------------------------------------------------------------------- settings


def test_the_setting_is_server_vad_only_an_integer_in_range_and_echoed_only_when_set():
    assert TurnDetection(idle_timeout_ms=6000).wire()["idle_timeout_ms"] == 6000
    assert "idle_timeout_ms" not in TurnDetection().wire()
    for bad in (dict(idle_timeout_ms=4999), dict(idle_timeout_ms=30001), dict(idle_timeout_ms="6000"),
                dict(idle_timeout_ms=True), dict(type="semantic_vad", idle_timeout_ms=6000)):
        with pytest.raises(ValidationError):
            TurnDetection(**bad)

    def update(turn: dict, beta: bool = False):
        body = {"turn_detection": turn} if beta else {"type": "realtime", "audio": {"input": {"turn_detection": turn}}}
        cfg, settings = apply_session_update(ConversationConfig(), body, Dialect(beta), ("server_vad", "semantic_vad"))
        return session_object(cfg, Dialect(beta), "sess_1", "omniduplex-cascade", settings)

    ga = update({"type": "server_vad", "idle_timeout_ms": 6000})
    assert ga["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 6000
    assert update({"type": "server_vad", "idle_timeout_ms": 6000}, beta=True)["turn_detection"]["idle_timeout_ms"] == 6000
    param = "session.audio.input.turn_detection.idle_timeout_ms"
    for turn in ({"type": "semantic_vad", "idle_timeout_ms": 6000}, {"type": "server_vad", "idle_timeout_ms": 100},
                 {"type": "server_vad", "idle_timeout_ms": 6000.5}):
        with pytest.raises(ProtocolError) as err:
            update(turn)
        assert err.value.param == param, err.value.message


def test_mint_time_accepts_it_for_server_vad_only():
    def session(turn: dict) -> dict:
        return {"type": "realtime", "audio": {"input": {"turn_detection": turn}}}

    check_session(session({"type": "server_vad", "idle_timeout_ms": 6000}), beta=False)
    check_session({"turn_detection": {"type": "server_vad", "idle_timeout_ms": 6000}}, beta=True)
    param = "session.audio.input.turn_detection.idle_timeout_ms"
    for turn, code in [({"type": "server_vad", "idle_timeout_ms": 100}, "invalid_value"),
                       ({"type": "server_vad", "idle_timeout_ms": "6000"}, "invalid_type"),
                       ({"type": "semantic_vad", "idle_timeout_ms": 6000}, "unknown_parameter")]:
        with pytest.raises(SessionConfigError) as err:
            check_session(session(turn), beta=False)
        assert (err.value.param, err.value.code) == (param, code)
    with pytest.raises(SessionConfigError) as err:
        check_session({"turn_detection": {"type": "semantic_vad", "idle_timeout_ms": 6000}}, beta=True)
    assert err.value.param == "session.turn_detection.idle_timeout_ms"


# ---------------------------------------------------------------------------------------- the protocol


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_the_events_of_an_idle_timeout_validate(beta):
    backend = ScriptedBackend(["Hello", "there."])
    channel = SessionChannel(beta)
    session = RealtimeSession(channel, backend, Dialect(beta), LimitsConfig())
    task = asyncio.create_task(session.run())
    await channel.until("session.created")
    turn = {"type": "server_vad", "idle_timeout_ms": 5000}
    channel.client("session.update", session={"turn_detection": turn} if beta else {
        "type": "realtime", "audio": {"input": {"turn_detection": turn}}})
    updated = (await channel.until("session.updated"))["session"]
    echoed = updated["turn_detection"] if beta else updated["audio"]["input"]["turn_detection"]
    assert echoed["idle_timeout_ms"] == 5000
    conv = session.conv  # the wait shortened (the protocol's minimum is 5 s)
    conv.update(conv.config.model_copy(update={
        "turn_detection": conv.config.turn_detection.model_copy(update={"idle_timeout_ms": IDLE_MS})}))
    channel.client("conversation.item.create", item={"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": "Hi"}]})
    channel.client("response.create")
    await channel.until("response.done")
    async with microphone(conv, rate=24000):
        await channel.until("response.done", count=2)
    kinds = [e["type"] for e in channel.events]
    tail = kinds[kinds.index("response.done") + 1:]
    expected = ["input_audio_buffer.committed", "conversation.item.created" if beta else "conversation.item.added",
                "conversation.item.input_audio_transcription.delta",
                "conversation.item.input_audio_transcription.completed"]
    if not beta:
        expected = ["input_audio_buffer.timeout_triggered", *expected, "conversation.item.done"]
    assert [k for k in tail if not k.startswith("response.") and k != "session.metrics"][:len(expected)] == expected
    committed = channel.of("input_audio_buffer.committed")[0]
    if not beta:
        fired = channel.of("input_audio_buffer.timeout_triggered")[0]
        assert fired["item_id"] == committed["item_id"] and fired["audio_end_ms"] > fired["audio_start_ms"]
    assert tail.index("response.created") > tail.index("input_audio_buffer.committed")
    channel.inbox.put_nowait(None)
    await task
    backend.close()
    assert not channel.invalid, channel.invalid
