"""Where a turn's time goes (issue 36): each reply's ``session.metrics`` says how long each stage
took (the wait after speech until the turn was decided, recognition, the model's first words,
its first audio), the worker's Prometheus histograms count them per stage and backend, and the
recording keeps them with the turn. A real ``RealtimeSession`` on a scripted backend (a test
double) with a real-time microphone."""

from __future__ import annotations

import asyncio

from core.config import LimitsConfig
from core.protocol import TURN_STAGES, Dialect
from tests.support.scripted_backend import ScriptedBackend, tone
from tests.support.session_channel import SessionChannel
from tests.unit.test_idle_timeout import microphone
from worker.metrics import WorkerMetrics
from worker.session import RealtimeSession


class _State:
    def __init__(self, backend) -> None:
        self.backend, self.state, self.sessions, self.slots = backend, "IDLE", {}, 1

        class _Progress:
            fraction = 1.0

        self.progress = _Progress()


async def test_a_spoken_turn_reports_its_stages_in_order():
    backend = ScriptedBackend(["Hello", "there."], step_s=0.05)
    channel = SessionChannel()
    session = RealtimeSession(channel, backend, Dialect(False), LimitsConfig(), extensions=frozenset({"session.metrics"}))
    metrics = WorkerMetrics(_State(backend))
    session.on_turn_metrics = metrics.turn
    task = asyncio.create_task(session.run())
    await channel.until("session.created")
    channel.client("session.update", session={"type": "realtime", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 24000},
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 400}}}})
    await channel.until("session.updated")
    async with microphone(session.conv, tone(1.0, 24000), rate=24000):
        m = (await channel.until("session.metrics", timeout=20))["metrics"]
    stages = m["stages"]
    assert list(stages) == [f"{stage}_ms" for stage in TURN_STAGES]  # in the order the protocol names them
    # the turn ends after server_vad's 400 ms of silence after the voice
    assert 350 <= stages["end_of_turn_ms"] <= 1500, stages
    assert stages["asr_ms"] is not None and stages["asr_ms"] >= 0
    assert stages["llm_ms"] is not None and stages["tts_ms"] is not None and stages["tts_ms"] >= 0
    assert m["interrupted"] is False and m["start_epoch"] > 1.7e9
    # after the end-of-turn wait, the stages account for the voice-to-voice time (from speech_stopped)
    assert stages["asr_ms"] + stages["llm_ms"] + stages["tts_ms"] <= m["v2v_ms"] + 5
    text = metrics.render().decode()
    assert 'omniduplex_worker_stage_seconds_count{backend="scripted",stage="end_of_turn"} 1.0' in text
    assert 'omniduplex_worker_stage_seconds_count{backend="scripted",stage="tts"} 1.0' in text
    channel.inbox.put_nowait(None)
    await task


async def test_a_typed_turn_has_no_speech_stages():
    backend = ScriptedBackend(["Hi."])
    channel = SessionChannel()
    session = RealtimeSession(channel, backend, Dialect(False), LimitsConfig(), extensions=frozenset({"session.metrics"}))
    task = asyncio.create_task(session.run())
    await channel.until("session.created")
    channel.client("conversation.item.create", item={"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": "Hi"}]})
    channel.client("response.create")
    stages = (await channel.until("session.metrics"))["metrics"]["stages"]
    assert stages["end_of_turn_ms"] is None and stages["asr_ms"] is None and stages["llm_ms"] >= 0
    channel.inbox.put_nowait(None)
    await task
