"""OpenAI's Live dialect end to end (issue 48): the official ``openai`` SDK's ``client.live`` on
``/v1/live/sessions`` through the real gateway and a cascade worker. The microphone stays open
(silence streams before, during and after the answer) and the model decides when to speak, as a
Live client expects; every server event validates against ``openai.types.live``."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest
from openai import AsyncOpenAI

from core.live_events import server_event_error
from tests.support.reliability import wait_meta

RATE = 24000
QUESTION = "What is the capital of France?"


# ``stack``: the suite's shared default stack (``tests/conftest.py``).


@pytest.fixture(scope="module")
def question():
    from core.cascade.tts import PiperTts

    return b"".join(PiperTts().synthesize(QUESTION, deterministic=True))


def sdk(stack) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="unused", base_url=f"{stack.url}/v1", websocket_base_url=f"ws://127.0.0.1:{stack.port}/v1")


class OpenMicrophone:
    """Streams 20 ms appends at real time: silence, unless something is being said."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.queue: list[bytes] = []
        self.task = asyncio.create_task(self._run())

    def say(self, pcm: bytes) -> None:
        step = RATE * 2 // 50
        self.queue.extend(pcm[i:i + step] for i in range(0, len(pcm), step))

    async def _run(self) -> None:
        start, n = time.monotonic(), 0
        while True:
            piece = self.queue.pop(0) if self.queue else b"\x00\x00" * (RATE // 50)
            await self.conn.session.input_audio.append(audio=base64.b64encode(piece).decode())
            n += 1
            await asyncio.sleep(max(0.0, start + n * 0.02 - time.monotonic()))

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_the_sdk_live_client_hears_a_spoken_question_and_the_answer_is_spoken(stack, question):
    events: list[dict] = []
    async with sdk(stack).live.connect() as conn:
        await conn.session.start(session={"model": "omniduplex-cascade", "instructions": "Answer in one sentence."},
                                 event_id="c_start")
        started = await conn.recv()
        assert started.type == "session.started" and started.client_event_id == "c_start", started
        events.append(started.to_dict())
        mic = OpenMicrophone(conn)
        await asyncio.sleep(0.5)
        mic.say(question)
        heard, said, audio_bytes = "", "", 0
        async with asyncio.timeout(60):
            async for ev in conn:
                events.append(ev.to_dict())
                if ev.type == "session.input_transcript.delta":
                    heard += ev.delta
                elif ev.type == "session.output_transcript.delta":
                    said += ev.delta
                elif ev.type == "session.output_audio.delta":
                    audio_bytes += len(base64.b64decode(ev.delta))
                elif ev.type == "session.usage.updated":  # the answer is over
                    break
                elif ev.type == "error":
                    raise AssertionError(ev)
        await conn.send({"type": "session.fly", "event_id": "c_bad"})
        async for ev in conn:
            events.append(ev.to_dict())
            if ev.type == "error":
                assert ev.client_event_id == "c_bad" and ev.error.code == "unknown_event", ev
                break
        await mic.stop()
        await conn.session.close(event_id="c_close")
        async for ev in conn:
            events.append(ev.to_dict())
            if ev.type == "session.closed":
                break
    assert "capital" in heard.lower() and "france" in heard.lower(), heard
    assert "paris" in said.lower(), said
    assert audio_bytes > RATE * 2 // 2, "at least half a second of spoken answer"
    closed = events[-1]
    assert closed["type"] == "session.closed" and closed["reason"] == "close_requested"
    assert closed["usage"]["seconds"] > 1.0
    invalid = [f"{e['type']}: {why}" for e in events if (why := server_event_error(e))]
    assert not invalid, invalid[:3]
    # the slot is free again
    async with asyncio.timeout(5):
        while stack.health()["slots_busy"]:
            await asyncio.sleep(0.05)
    # recorded as any session, saying its dialect: the user's turn and the spoken answer
    meta = await wait_meta(stack, started.session.id)
    assert meta["dialect"] == "live" and meta["counts"]["user_audio"] >= 1 and meta["counts"]["ai_audio"] >= 1, meta
