"""Pipecat client (``OpenAIRealtimeLLMService``) with a registered function: the server's model
calls it, Pipecat runs the handler and sends the result back, and the model speaks a follow-up.

Runs in ``.venv-frameworks``, launched by ``tests/e2e/test_frameworks.py``. The pipeline is the one
Pipecat documents for realtime services: ``[user aggregator, service, collector, assistant
aggregator]`` over one ``LLMContext`` that carries the tool schema. Errors are kept as in
``pipecat_text.py``; the last line of stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService

from pipecat_text import Collector, ErrorFrames, capture_logs, run_until_reply  # same folder


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
    calls: list[dict] = []

    async def get_weather(params) -> None:
        calls.append({"name": params.function_name, "arguments": dict(params.arguments)})
        await params.result_callback({"city": params.arguments.get("city"), "temperature_c": 21, "sky": "sunny"})

    llm.register_function("get_weather", get_weather)
    weather = FunctionSchema(name="get_weather", description="Get the current weather in a city.",
                             properties={"city": {"type": "string", "description": "The city"}},
                             required=["city"])
    context = LLMContext(messages=[{"role": "user", "content": question}], tools=ToolsSchema(standard_tools=[weather]))
    aggregators = LLMContextAggregatorPair(context)
    collector = Collector()
    observer = ErrorFrames()
    problems = await run_until_reply([aggregators.user(), llm, collector, aggregators.assistant()], context,
                                     collector, observer, timeout)
    return {
        "framework": "pipecat",
        "calls": calls,
        "reply_done": collector.done.is_set(),
        "audio_s": round(len(collector.audio) / 2 / 24000, 3),
        "error_frames": observer.errors,
        "log_errors": [line for line in logged if not line.startswith("WARNING")],
        "problems": problems,
        "frame_types": dict(collector.kinds),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, help="ws://HOST:PORT/v1/realtime (no query)")
    parser.add_argument("--model", default="omniduplex-cascade")
    parser.add_argument("--question", default="What's the weather like in London today?")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.base_url, args.model, args.question, args.timeout))), flush=True)


if __name__ == "__main__":
    main()
