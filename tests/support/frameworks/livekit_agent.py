"""LiveKit Agents client: an ``AgentSession`` on ``livekit-plugins-openai``'s realtime
``RealtimeModel``, asked a typed question, a spoken question, or a question its registered
function tool answers; each must get a spoken reply.

Runs in ``.venv-frameworks`` (see ``requirements-frameworks.txt``), launched by
``tests/e2e/test_frameworks.py``. No LiveKit server or room: ``AgentSession.start`` takes no room, and
the session gets its own audio input and output instead (as the framework's console mode does).
The model is the plugin's, unchanged, with ``base_url="ws://HOST:PORT/v1"`` (the plugin adds
``/realtime?model=``), the plugin's defaults otherwise (semantic_vad, ``gpt-4o-mini-transcribe``,
voice ``marin``, ``max_output_tokens: "inf"``), and the agent's instructions left empty so the
server's own voice prompt answers.

- ``--mode text``: ``session.generate_reply(user_input=...)``: the plugin creates a user message
  item (its own id, ``previous_item_id: "root"``), waits for the ``conversation.item.added`` that
  carries that id, sends ``response.create`` with ``metadata.client_event_id`` and waits for the
  ``response.created`` that echoes it.
- ``--mode audio``: the session's audio input streams PCM16 24 kHz mono speech from ``--audio``
  at real-time pace, then silence; the plugin forwards it with ``input_audio_buffer.append``
  under ``server_vad``, and the server's VAD starts the reply.
- ``--mode tools``: ``get_weather(city)`` is a ``function_tool`` of the agent (the plugin sends it
  in ``session.tools``); the question's reply is asked with ``tool_choice: "required"`` (the test
  is about the call's round trip, not the 135M model's choice between calling and answering:
  Pipecat's tools test covers "auto"). The session runs the tool, sends its output as a
  ``function_call_output`` item and asks for the spoken follow-up (``tool_choice: "auto"``).

Every error is kept: the session's ``error`` events (server ``error`` events, failed responses,
connection errors), a ``close`` that carries an error, and every warning or error logged (a
server event the plugin fails to handle is logged with its exception, not raised; a rejected
item or an unknown previous item is a logged warning). The last line of stdout is a JSON
summary; logs go to stderr (``--debug``: every event but audio, both ways).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections import Counter

from livekit import rtc
from livekit.agents import Agent, AgentSession, ChatMessage, RunContext, function_tool
from livekit.agents.voice import io
from livekit.plugins.openai.realtime import RealtimeModel
from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad

RATE = 24000
CHUNK_MS = 20
QUESTIONS = {"text": "What is the capital of France?", "tools": "What's the weather like in Paris?"}


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({record.exc_info[1]!r})"
        self.records.append(text[:2000])


class CaptureAudio(io.AudioOutput):
    """The agent's speaker: keeps the frames; each segment counts as played out once flushed."""

    def __init__(self) -> None:
        super().__init__(label="capture", capabilities=io.AudioOutputCapabilities(pause=False))
        self.audio = bytearray()
        self.frames = 0
        self.empty_frames = 0
        self.sample_rates: set[int] = set()
        self.segments = 0
        self._segment_s = 0.0
        self._capturing = False
        self.t0 = time.monotonic()
        self.first_audio_s: float | None = None

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if not self._capturing:
            self._capturing = True
            self._segment_s = 0.0
            self.on_playback_started(created_at=time.time())
        data = bytes(frame.data)
        self.frames += 1
        self.empty_frames += not data
        self.audio.extend(data)
        self.sample_rates.add(frame.sample_rate)
        self._segment_s += frame.duration
        if self.first_audio_s is None:
            self.first_audio_s = time.monotonic() - self.t0

    def flush(self) -> None:
        super().flush()
        if self._capturing:
            self._capturing = False
            self.segments += 1
            self.on_playback_finished(playback_position=self._segment_s, interrupted=False)

    def clear_buffer(self) -> None:
        if self._capturing:
            self._capturing = False
            self.on_playback_finished(playback_position=self._segment_s, interrupted=True)


class StreamAudio(io.AudioInput):
    """The user's microphone: ``pcm`` at real-time pace, then silence for as long as it is read."""

    def __init__(self, pcm: bytes) -> None:
        super().__init__(label="stream")
        self.pcm = pcm
        self.pos = 0
        self.t0: float | None = None
        self.samples = RATE * CHUNK_MS // 1000

    async def __anext__(self) -> rtc.AudioFrame:
        if self.t0 is None:
            self.t0 = time.monotonic()
        chunk = self.pcm[self.pos : self.pos + self.samples * 2]
        chunk += b"\x00\x00" * (self.samples - len(chunk) // 2)
        self.pos += self.samples * 2
        ahead = self.t0 + self.pos / 2 / RATE - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        return rtc.AudioFrame(data=chunk, sample_rate=RATE, num_channels=1, samples_per_channel=self.samples)


class Model(RealtimeModel):
    """The plugin's model, unchanged; its sessions' raw server events are counted, the turn
    detection each ``session.updated`` reports is kept (and, with ``debug``, every event but
    audio is printed to stderr)."""

    def __init__(self, debug: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.server_events: Counter[str] = Counter()
        self.turn_detection: list = []
        self.debug = debug

    def _seen(self, ev: dict) -> None:
        self.server_events[str(ev.get("type"))] += 1
        if ev.get("type") == "session.updated":
            session = ev.get("session") or {}
            self.turn_detection.append(((session.get("audio") or {}).get("input") or {}).get("turn_detection"))

    def session(self, **kwargs):
        sess = super().session(**kwargs)
        sess.on("openai_server_event_received", self._seen)
        if self.debug:
            def dump(direction: str, ev: dict) -> None:
                if ev.get("type") not in ("input_audio_buffer.append", "response.output_audio.delta"):
                    print(direction, json.dumps(ev)[:3000], file=sys.stderr, flush=True)
            sess.on("openai_client_event_queued", lambda ev: dump(">>>", ev))
            sess.on("openai_server_event_received", lambda ev: dump("<<<", ev))
        return sess


async def run(base_url: str, model_name: str, mode: str, pcm: bytes | None, timeout: float,
              drain_s: float = 1.0, debug: bool = False) -> dict:
    calls: list[dict] = []

    @function_tool
    async def get_weather(context: RunContext, city: str) -> dict:
        """Get the current weather in a city.

        Args:
            city: The city.
        """
        calls.append({"name": "get_weather", "arguments": {"city": city}})
        return {"city": city, "temperature_c": 21, "sky": "sunny"}

    options = {}
    if mode == "audio":
        options["turn_detection"] = ServerVad(type="server_vad", silence_duration_ms=500, create_response=True,
                                              interrupt_response=True)
    model = Model(debug, model=model_name, base_url=base_url, api_key="unused", **options)
    agent = Agent(instructions="", tools=[get_weather] if mode == "tools" else [])
    # The speaker cannot pause: no resuming after a false interruption (the framework warns otherwise).
    session = AgentSession(llm=model, turn_handling={"interruption": {"resume_false_interruption": False}})
    speaker = CaptureAudio()
    session.output.audio = speaker
    if mode == "audio":
        session.input.audio = StreamAudio(pcm or b"")

    errors: list[dict] = []
    closed: list[dict] = []
    problems: list[str] = []
    kinds: Counter[str] = Counter()
    transcripts: list[str] = []
    items: list[dict] = []
    executed: list[dict] = []
    replied = asyncio.Event()

    def count(name: str):
        return lambda ev: kinds.update([name])

    for name in ("agent_state_changed", "user_state_changed", "speech_created"):
        session.on(name, count(name))

    @session.on("error")
    def _on_error(ev) -> None:
        err = ev.error
        errors.append({"source": type(ev.source).__name__, "kind": type(err).__name__,
                       "recoverable": getattr(err, "recoverable", None),
                       "error": repr(getattr(err, "error", err))[:2000]})

    @session.on("close")
    def _on_close(ev) -> None:
        if ev.error:
            closed.append({"reason": str(ev.reason), "error": repr(ev.error)[:2000]})

    @session.on("user_input_transcribed")
    def _on_transcript(ev) -> None:
        kinds["user_input_transcribed"] += 1
        if ev.is_final:
            transcripts.append(ev.transcript)

    @session.on("function_tools_executed")
    def _on_tools(ev) -> None:
        kinds["function_tools_executed"] += 1
        executed.extend({"name": call.name, "arguments": call.arguments, "output": out.output if out else None}
                        for call, out in ev.zipped())

    @session.on("conversation_item_added")
    def _on_item(ev) -> None:
        kinds["conversation_item_added"] += 1
        item = ev.item
        if not isinstance(item, ChatMessage):
            return
        items.append({"role": item.role, "text": (item.text_content or "")[:300], "interrupted": item.interrupted})
        # An assistant message is added once its speech has played out (response.done and the
        # speaker's flush); in tools mode it must follow the tool's execution.
        if item.role == "assistant" and speaker.audio and (mode != "tools" or executed):
            replied.set()

    t0 = time.monotonic()
    try:
        await asyncio.wait_for(session.start(agent), 20)
        if mode == "text":
            session.generate_reply(user_input=QUESTIONS["text"])
        elif mode == "tools":
            session.generate_reply(user_input=QUESTIONS["tools"], tool_choice="required")
        try:
            await asyncio.wait_for(replied.wait(), timeout)
        except TimeoutError:
            problems.append(f"no complete spoken reply within {timeout}s")
        if replied.is_set():
            await asyncio.sleep(drain_s)  # what the server sends after the reply counts too
    except Exception as e:  # noqa: BLE001
        problems.append(f"raised: {e!r}"[:2000])
    finally:
        try:
            await asyncio.wait_for(session.aclose(), 15)
        except Exception as e:  # noqa: BLE001
            problems.append(f"aclose: {e!r}"[:2000])
        await model.aclose()
    return {
        "framework": "livekit-agents",
        "mode": mode,
        "reply_done": replied.is_set(),
        "audio_frames": speaker.frames,
        "empty_audio_frames": speaker.empty_frames,
        "audio_bytes": len(speaker.audio),
        "audio_s": round(len(speaker.audio) / 2 / RATE, 3),
        "sample_rates": sorted(speaker.sample_rates),
        "first_audio_s": None if speaker.first_audio_s is None else round(speaker.first_audio_s, 3),
        "elapsed_s": round(time.monotonic() - t0, 3),
        "calls": calls,
        "executed": executed,
        "user_transcripts": transcripts,
        "items": items,
        "errors": errors,
        "closed": closed,
        "problems": problems,
        "event_types": dict(kinds),
        "server_event_types": dict(model.server_events),
        "turn_detection": model.turn_detection,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, help="ws://HOST:PORT/v1 (the plugin adds /realtime?model=)")
    parser.add_argument("--model", default="omniduplex-cascade")
    parser.add_argument("--mode", choices=("text", "audio", "tools"), required=True)
    parser.add_argument("--audio", help="--mode audio: raw PCM16 24 kHz mono speech")
    parser.add_argument("--timeout", type=float, default=40.0)
    parser.add_argument("--debug", action="store_true", help="every event but audio, both ways, to stderr")
    args = parser.parse_args()
    pcm = None
    if args.mode == "audio":
        if not args.audio:
            parser.error("--mode audio needs --audio")
        with open(args.audio, "rb") as f:
            pcm = f.read()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    collect = _Collect()
    logging.getLogger().addHandler(collect)
    summary = asyncio.run(run(args.base_url, args.model, args.mode, pcm, args.timeout, debug=args.debug))
    summary["log_warnings"] = collect.records
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
