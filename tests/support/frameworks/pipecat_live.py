"""Pipecat client (``OpenAILiveLLMService``, OpenAI's Live dialect): a spoken question streamed in
real time as a microphone would, over ``/v1/live/sessions``.

Runs in ``.venv-frameworks``, launched by ``tests/e2e/test_live_frameworks.py``. The pipeline is
the one Pipecat documents for its Live service, ``[user aggregator, service, assistant
aggregator]`` over one ``LLMContext``, with two taps: one between the user aggregator and the
service (the user's ``TranscriptionFrame``s go upstream from the service) and one after it (the
reply's ``SpeechOutputAudioRawFrame``s and text frames). The session starts on the first
``LLMContextFrame``; once ``on_session_started`` fires, ``--audio`` (PCM16 24 kHz mono) goes in as
20 ms ``InputAudioRawFrame``s at real time, then silence for as long as the session runs.

``--mode speech``: no delegation; done when the user's turn is transcribed and an assistant turn
has ended. ``--mode tools``: Responses delegation with a ``get_weather`` function registered with
``register_function``; done when an assistant turn that began after the function's result has
ended. ``--mode client``: client delegation to a ``BackendLLMWorker`` whose ``OpenAILLMService``
(on ``--rest-url``, the server's Chat Completions) calls the registered ``get_weather``, whose
result the app sends back as a spoken output; done the same way. Then an ``EndFrame`` ends the pipeline the graceful way (``session.close``, which the
server answers with ``session.closed``).

Everything that went wrong is kept: every ``ErrorFrame``, every error or warning Pipecat logs (a
server event it fails to parse is a logged warning, then dropped). The last line of stdout is a
JSON summary; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter

from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    FunctionCallResultProperties,
    EndFrame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    SpeechOutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.live.llm import OpenAILiveLLMService
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.openai.responses.llm import OpenAIResponsesLLMService
from pipecat.workers.llm.backend_llm_worker import BackendLLMWorker, BackendOutput
from pipecat.workers.runner import WorkerRunner

from pipecat_text import ErrorFrames, capture_logs  # same folder

RATE = 24000
CHUNK = RATE * 2 // 50  # 20 ms of PCM16
WEATHER_RESULT = {"city": None, "temperature_c": 21, "sky": "sunny"}  # city: the one asked for


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)


class UserTap(FrameProcessor):
    """Between the user aggregator and the service: the user's transcripts, going upstream."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.transcripts: list[dict] = []
        self.interim = 0

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame):
            self.transcripts.append({"text": frame.text, "t": self.clock.now()})
        elif isinstance(frame, InterimTranscriptionFrame):
            self.interim += 1
        await self.push_frame(frame, direction)


class ReplyTap(FrameProcessor):
    """After the service: the reply's audio, and its text grouped into the service's turns."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.audio = bytearray()
        self.audio_frames = 0
        self.empty_audio_frames = 0
        self.sample_rates: set[int] = set()
        self.first_audio_s: float | None = None
        self.kinds: Counter[str] = Counter()
        self.turns: list[dict] = []  # {"text", "start", "end", "audio_at_start_s"}

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.kinds[type(frame).__name__] += 1
            if isinstance(frame, (SpeechOutputAudioRawFrame, TTSAudioRawFrame)):
                self.audio_frames += 1
                self.empty_audio_frames += not frame.audio
                self.audio.extend(frame.audio)
                self.sample_rates.add(frame.sample_rate)
                if self.first_audio_s is None:
                    self.first_audio_s = self.clock.now()
            elif isinstance(frame, LLMFullResponseStartFrame):
                self.turns.append({"text": "", "start": self.clock.now(), "end": None,
                                   "audio_at_start_s": len(self.audio) / 2 / RATE})
            elif isinstance(frame, TTSTextFrame) and self.turns:
                self.turns[-1]["text"] += frame.text
            elif isinstance(frame, LLMFullResponseEndFrame) and self.turns:
                self.turns[-1]["end"] = self.clock.now()
        await self.push_frame(frame, direction)


class RecordingLive(OpenAILiveLLMService):
    """The service as it is, counting the server events it handles (and the Responses events
    inside ``response.event``); nothing else changes."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.server_events: Counter[str] = Counter()
        self.response_events: list[str] = []
        self.closed_reason: str | None = None
        self.appended: list[dict] = []  # the commentary and thinking the service sent

    async def send_client_event(self, event) -> None:
        if event.type in ("session.commentary.append", "session.thinking.append"):
            self.appended.append({"type": event.type, "delegation_id": event.delegation_id, "content": event.content})
        await super().send_client_event(event)

    async def _handle_server_event(self, evt) -> None:
        self.server_events[evt.type] += 1
        if evt.type == "response.event":
            self.response_events.append(str((getattr(evt, "event", None) or {}).get("type")))
        elif evt.type == "session.closed":
            self.closed_reason = getattr(evt, "reason", None)
        await super()._handle_server_event(evt)


async def run(base_url: str, api_key: str, mode: str, pcm: bytes, timeout: float, rest_url: str | None) -> dict:
    logged = capture_logs()
    clock = Clock()
    tools = mode in ("tools", "client")
    calls: list[dict] = []
    results_at: list[float] = []

    async def get_weather(params) -> None:
        calls.append({"name": params.function_name, "arguments": dict(params.arguments), "t": clock.now()})
        result = {**WEATHER_RESULT, "city": params.arguments.get("city")}
        results_at.append(clock.now())
        await params.result_callback(result)

    weather = FunctionSchema(name="get_weather", description="Get the current weather in a city.",
                             properties={"city": {"type": "string", "description": "The city"}},
                             required=["city"])
    if mode == "tools":
        delegation = OpenAILiveLLMService.ResponsesDelegation(settings=OpenAIResponsesLLMService.Settings(model="omni"))
    elif mode == "client":
        # The application's own backend: a Pipecat LLM service with the function registered, on
        # the server's Chat Completions (another worker of the same gateway).
        backend_llm = OpenAILLMService(api_key=api_key, base_url=rest_url,
                                       settings=OpenAILLMService.Settings(model="omniduplex-cascade"))

        async def look_up_weather(params) -> None:
            # This backend exists to look the weather up: its model's one step is the call
            # (tool_choice required: under Pipecat's long transcript request the 135M model
            # answers instead), and the app tells the user the result itself (send_output, no
            # second model step: that model, given the result, wrote "as a chatbot, I don't
            # have the ability to access real-world data").
            calls.append({"name": params.function_name, "arguments": dict(params.arguments), "t": clock.now()})
            city = params.arguments.get("city")
            results_at.append(clock.now())
            await backend.send_output(BackendOutput(
                text=f"In {city} it is {WEATHER_RESULT['sky']} and {WEATHER_RESULT['temperature_c']} degrees."))
            await params.result_callback({**WEATHER_RESULT, "city": city},
                                         properties=FunctionCallResultProperties(run_llm=False))

        backend_llm.register_function("get_weather", look_up_weather)
        backend = BackendLLMWorker(
            llm=backend_llm, context=LLMContext(tools=ToolsSchema(standard_tools=[weather]), tool_choice="required"),
            name="weather-backend")
        delegation = OpenAILiveLLMService.ClientDelegation(backend=backend, timeout_secs=timeout)
    else:
        delegation = None
    llm = RecordingLive(
        api_key=api_key,
        base_url=base_url,
        # No instructions: the server's own voice prompt, made for its small model (a Live
        # session's omitted instructions "use server defaults").
        delegation=delegation,
    )

    started: list[dict] = []
    delegations: list[dict] = []
    session_started = asyncio.Event()

    @llm.event_handler("on_session_started")
    async def on_session_started(_service, session) -> None:
        started.append({"id": getattr(session, "id", None), "t": clock.now()})
        session_started.set()

    @llm.event_handler("on_delegation_created")
    async def on_delegation_created(_service, delegation) -> None:
        delegations.append({"id": delegation.id, "target": delegation.target, "t": clock.now()})

    if mode == "tools":
        llm.register_function("get_weather", get_weather)
        context = LLMContext(tools=ToolsSchema(standard_tools=[weather]))
    else:
        context = LLMContext()
    aggregators = LLMContextAggregatorPair(context)
    user_tap, reply_tap, observer = UserTap(clock), ReplyTap(clock), ErrorFrames()
    worker = PipelineWorker(
        Pipeline([aggregators.user(), user_tap, llm, reply_tap, aggregators.assistant()]),
        params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
        observers=[observer],
        enable_rtvi=False,
        idle_timeout_secs=None,
    )
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await worker.queue_frame(LLMContextFrame(context=context))

    problems: list[str] = []
    microphone: asyncio.Task | None = None

    async def speak() -> None:
        """The question, then silence, 20 ms at a time at real time, as a microphone would."""
        t0, sent = time.monotonic(), 0
        while True:
            chunk = pcm[sent:sent + CHUNK] if sent < len(pcm) else b""
            chunk += b"\x00" * (CHUNK - len(chunk))
            await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=RATE, num_channels=1))
            sent += CHUNK
            ahead = t0 + sent / 2 / RATE - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)

    def done() -> bool:
        if tools:
            return bool(results_at) and any(t["end"] is not None and t["start"] > results_at[0]
                                            for t in reply_tap.turns)
        return bool(user_tap.transcripts) and any(t["end"] is not None for t in reply_tap.turns)

    close_s = None
    try:
        async with asyncio.timeout(timeout):
            waits = [asyncio.create_task(session_started.wait()), asyncio.create_task(observer.failed.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()
            if session_started.is_set():
                microphone = asyncio.create_task(speak())
                while not done() and not observer.failed.is_set():
                    await asyncio.sleep(0.05)
    except TimeoutError:
        problems.append(f"not done within {timeout}s (session started: {session_started.is_set()})")
    finally:
        if microphone is not None:
            microphone.cancel()
    # The graceful end: session.close, and the server's session.closed (Pipecat waits up to 10 s).
    t_end = time.monotonic()
    await worker.queue_frame(EndFrame())
    try:
        await asyncio.wait_for(running, 20)
        close_s = round(time.monotonic() - t_end, 3)
    except Exception as e:  # noqa: BLE001
        problems.append(f"runner did not end after EndFrame: {e!r}")
        await worker.cancel(reason="test done")
    return {
        "framework": "pipecat-live",
        "mode": mode,
        "done": done(),
        "session_started": started,
        "user_transcripts": user_tap.transcripts,
        "interim_transcripts": user_tap.interim,
        "assistant_turns": reply_tap.turns,
        "audio_frames": reply_tap.audio_frames,
        "empty_audio_frames": reply_tap.empty_audio_frames,
        "audio_s": round(len(reply_tap.audio) / 2 / RATE, 3),
        "sample_rates": sorted(reply_tap.sample_rates),
        "first_audio_s": reply_tap.first_audio_s,
        "calls": calls,
        "results_at": results_at,
        "delegations": delegations,
        "server_event_types": dict(llm.server_events),
        "response_events": llm.response_events,
        "appended": llm.appended,
        "closed_reason": llm.closed_reason,
        "close_s": close_s,
        "error_frames": observer.errors,
        "log_errors": [line for line in logged if not line.startswith("WARNING")],
        "log_warnings": [line for line in logged if line.startswith("WARNING")],
        "problems": problems,
        "frame_types": dict(reply_tap.kinds),
        "elapsed_s": clock.now(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, help="ws://HOST:PORT/v1/live/sessions")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--mode", choices=("speech", "tools", "client"), default="speech")
    parser.add_argument("--rest-url", help="http://HOST:PORT/v1: the client delegation backend's Chat Completions")
    parser.add_argument("--audio", required=True, help="raw PCM16 24 kHz mono speech (silence before it included)")
    parser.add_argument("--timeout", type=float, default=40.0)
    args = parser.parse_args()
    with open(args.audio, "rb") as f:
        pcm = f.read()
    summary = asyncio.run(run(args.base_url, args.api_key, args.mode, pcm, args.timeout, args.rest_url))
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
