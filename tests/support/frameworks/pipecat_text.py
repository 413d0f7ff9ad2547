"""Pipecat client (``OpenAIRealtimeLLMService``): a typed question, a spoken reply.

Runs in ``.venv-frameworks`` (see ``requirements-frameworks.txt``), launched by
``tests/e2e/test_frameworks.py``. A minimal pipeline ``[service, collector]`` runs under
Pipecat's own ``PipelineWorker`` and ``WorkerRunner``; the question goes in as the
``LLMContextFrame`` that a user context aggregator would push, and the collector keeps the
``TTSAudioRawFrame``s the service pushes downstream. Every ``ErrorFrame`` (seen by an
observer, wherever it is pushed) and every error Pipecat logs (a server event it fails to
parse ends its receive task with a logged exception, not an ``ErrorFrame``) is kept. The last
line of stdout is a JSON summary; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter

from loguru import logger
from pipecat.frames.frames import (
    ErrorFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner


class Collector(FrameProcessor):
    """Keeps the reply audio; ``done`` is set at the end of a reply that carried audio."""

    def __init__(self) -> None:
        super().__init__()
        self.audio = bytearray()
        self.audio_frames = 0
        self.empty_audio_frames = 0
        self.sample_rates: set[int] = set()
        self.kinds: Counter[str] = Counter()
        self.done = asyncio.Event()
        self.t0 = time.monotonic()
        self.first_audio_s: float | None = None

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.kinds[type(frame).__name__] += 1
        if isinstance(frame, TTSAudioRawFrame):
            self.audio_frames += 1
            if not frame.audio:
                self.empty_audio_frames += 1
            self.audio.extend(frame.audio)
            self.sample_rates.add(frame.sample_rate)
            if self.first_audio_s is None:
                self.first_audio_s = time.monotonic() - self.t0
        elif isinstance(frame, (TTSStoppedFrame, LLMFullResponseEndFrame)) and self.audio:
            self.done.set()
        await self.push_frame(frame, direction)


class ErrorFrames(BaseObserver):
    def __init__(self) -> None:
        super().__init__()
        self.errors: list[dict] = []
        self.failed = asyncio.Event()
        self._seen: set[int] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if isinstance(frame, ErrorFrame) and frame.id not in self._seen:
            self._seen.add(frame.id)
            self.errors.append({"frame": type(frame).__name__, "error": str(frame.error)[:2000],
                                "fatal": bool(getattr(frame, "fatal", False)), "source": str(data.source)})
            self.failed.set()  # the service ends its receive loop on a server error: no reply follows


def capture_logs() -> list[str]:
    """Pipecat's log to stderr; its warnings and errors also into the returned list."""
    logged: list[str] = []
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    logger.add(lambda m: logged.append(f"{m.record['level'].name} {m.record['name']}: {m.record['message']}"[:2000]),
               level="WARNING")
    return logged


async def run_until_reply(processors: list, context: LLMContext, collector: Collector, observer: ErrorFrames,
                          timeout: float) -> list[str]:
    """Run ``processors`` under Pipecat's own worker and runner, send ``context``, wait for a
    spoken reply (or an error frame); returns the problems met."""
    worker = PipelineWorker(
        Pipeline(processors),
        params=PipelineParams(audio_out_sample_rate=24000),
        observers=[observer],
        enable_rtvi=False,
        idle_timeout_secs=None,
    )
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await worker.queue_frame(LLMContextFrame(context=context))
    problems: list[str] = []
    waits = [asyncio.create_task(collector.done.wait()), asyncio.create_task(observer.failed.wait())]
    finished, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for w in pending:
        w.cancel()
    if not finished:
        problems.append(f"no complete spoken reply within {timeout}s")
    await worker.cancel(reason="test done")
    try:
        await asyncio.wait_for(running, 15)
    except Exception as e:  # noqa: BLE001
        problems.append(f"runner: {e!r}")
    return problems


async def run(base_url: str, model: str, question: str, timeout: float) -> dict:
    logged = capture_logs()

    llm = OpenAIRealtimeLLMService(
        api_key="unused",
        base_url=base_url,
        settings=OpenAIRealtimeLLMService.Settings(
            model=model,
            system_instruction="You are a helpful voice assistant. Answer briefly.",
            session_properties=events.SessionProperties(
                output_modalities=["audio"],
                audio=events.AudioConfiguration(
                    input=events.AudioInput(turn_detection=events.TurnDetection(type="server_vad")),
                ),
            ),
        ),
    )
    collector = Collector()
    observer = ErrorFrames()
    context = LLMContext(messages=[{"role": "user", "content": question}])
    problems = await run_until_reply([llm, collector], context, collector, observer, timeout)
    return {
        "framework": "pipecat",
        "reply_done": collector.done.is_set(),
        "audio_frames": collector.audio_frames,
        "empty_audio_frames": collector.empty_audio_frames,
        "audio_bytes": len(collector.audio),
        "audio_s": round(len(collector.audio) / 2 / 24000, 3),
        "sample_rates": sorted(collector.sample_rates),
        "first_audio_s": None if collector.first_audio_s is None else round(collector.first_audio_s, 3),
        "error_frames": observer.errors,
        "log_errors": [line for line in logged if not line.startswith("WARNING")],
        "log_warnings": [line for line in logged if line.startswith("WARNING")],
        "problems": problems,
        "frame_types": dict(collector.kinds),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, help="ws://HOST:PORT/v1/realtime (no query)")
    parser.add_argument("--model", default="omniduplex-cascade")
    parser.add_argument("--question", default="What is the capital of France?")
    parser.add_argument("--timeout", type=float, default=40.0)
    args = parser.parse_args()
    summary = asyncio.run(run(args.base_url, args.model, args.question, args.timeout))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
