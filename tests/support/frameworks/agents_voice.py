"""OpenAI Agents SDK client (``agents.realtime``): a spoken question streamed in real time.

Runs in ``.venv-frameworks`` (see ``requirements-frameworks.txt``), launched by
``tests/e2e/test_frameworks.py``. It connects a ``RealtimeRunner`` to the gateway with
``server_vad`` turn detection (or, with ``--defaults``, the SDK's default settings: semantic_vad), streams PCM16 24 kHz mono speech from ``--audio`` at real-time
pace followed by silence, and waits for the spoken reply. Every error the SDK reports is kept:
``RealtimeError`` events (server ``error`` events and the SDK's own failures to validate a
server event), exceptions the session raises (``RealtimeModelExceptionEvent``: failures to
parse or handle a server event, unexpected closes) and warnings/errors the SDK logs. The last
line of stdout is a JSON summary; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections import Counter

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no trace upload to api.openai.com

from agents.realtime import RealtimeAgent, RealtimeRunner  # noqa: E402

RATE = 24000
CHUNK_MS = 40


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.levelname} {record.name}: {record.getMessage()}"[:2000])


def describe(error: object) -> dict:
    """A RealtimeError's payload as JSON: server errors are pydantic models, SDK-side ones
    pydantic ``ValidationError``s or dicts."""
    if hasattr(error, "model_dump"):
        return {"kind": type(error).__name__, **error.model_dump(exclude_none=True)}
    if hasattr(error, "errors"):  # pydantic.ValidationError: the SDK could not validate a server event
        details = error.errors(include_url=False)
        event = details[0].get("input") if details else None
        return {"kind": type(error).__name__,
                "event_type": event.get("type") if isinstance(event, dict) else None,
                "message": "; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg'][:160]}" for d in details)[:2000]}
    if isinstance(error, dict):
        return {"kind": "dict", **error}
    return {"kind": type(error).__name__, "message": repr(error)[:2000]}


async def stream(session, pcm: bytes, trailing_silence_s: float) -> None:
    pcm = pcm + b"\x00\x00" * int(RATE * trailing_silence_s)
    step = RATE * CHUNK_MS // 1000 * 2
    t0 = time.monotonic()
    for i in range(0, len(pcm), step):
        await session.send_audio(pcm[i : i + step])
        ahead = t0 + (i + step) / 2 / RATE - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)


async def run(url: str, pcm: bytes, timeout: float, defaults: bool = False, drain_s: float = 1.5) -> dict:
    agent = RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant. Answer briefly.")
    # --defaults: the SDK's own session settings (semantic_vad, its default model name and voice).
    runner = RealtimeRunner(agent, config={"tracing_disabled": True}) if defaults else RealtimeRunner(agent, config={
        "tracing_disabled": True,
        "model_settings": {
            "model_name": "omniduplex-cascade",
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": RATE},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500,
                                       "create_response": True, "interrupt_response": True},
                },
                "output": {"format": {"type": "audio/pcm", "rate": RATE}},
            },
        },
    })
    errors: list[dict] = []
    exceptions: list[dict] = []
    kinds: Counter[str] = Counter()
    raw_server: list[str] = []
    audio = bytearray()
    counts = {"audio_events": 0, "empty_audio_events": 0}
    transcript: list[str] = []
    turn_detection: list = []  # as each session.updated reported it
    reply_done = False
    t0 = time.monotonic()
    first_audio_s: list[float] = []

    def handle(event) -> bool:
        """Records one session event; True once the spoken reply is complete."""
        kinds[event.type] += 1
        if event.type == "audio":
            counts["audio_events"] += 1
            if not event.audio.data:
                counts["empty_audio_events"] += 1
            audio.extend(event.audio.data)
            if not first_audio_s:
                first_audio_s.append(time.monotonic() - t0)
        elif event.type == "error":
            errors.append(describe(event.error))
        elif event.type == "raw_model_event":
            data = event.data
            if data.type == "exception":
                exceptions.append({"context": data.context, "exception": repr(data.exception)[:2000]})
            elif data.type == "raw_server_event":
                raw_server.append(str(data.data.get("type")))
                if data.data.get("type") == "session.updated":
                    session = data.data.get("session") or {}
                    turn_detection.append(((session.get("audio") or {}).get("input") or {}).get("turn_detection"))
            elif data.type == "transcript_delta":
                transcript.append(data.delta)
        # agent_end follows response.done: the reply is complete.
        return event.type == "agent_end" and bool(audio)

    sender = None
    session = await runner.run(model_config={"url": url, "api_key": "unused"})
    try:
        async with session:
            sender = asyncio.create_task(stream(session, pcm, trailing_silence_s=2.0))
            try:
                async with asyncio.timeout(timeout):
                    async for event in session:
                        if handle(event):
                            reply_done = True
                            break
            except TimeoutError:
                exceptions.append({"context": "client", "exception": f"no complete spoken reply within {timeout}s"})
            if reply_done:
                # Keep listening a moment: what the server sends after response.done counts too.
                try:
                    async with asyncio.timeout(drain_s):
                        async for event in session:
                            handle(event)
                except TimeoutError:
                    pass
    except Exception as e:  # noqa: BLE001 - the session re-raises what the model layer stored
        exceptions.append({"context": "session raised", "exception": repr(e)[:2000]})
    finally:
        if sender is not None:
            sender.cancel()
    return {
        "framework": "openai-agents",
        "reply_done": reply_done,
        **counts,
        "audio_bytes": len(audio),
        "audio_s": round(len(audio) / 2 / RATE, 3),
        "first_audio_s": round(first_audio_s[0], 3) if first_audio_s else None,
        "transcript": "".join(transcript),
        "errors": errors,
        "exceptions": exceptions,
        "event_types": dict(kinds),
        "server_event_types": dict(Counter(raw_server)),
        "turn_detection": turn_detection,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/realtime?model=...")
    parser.add_argument("--audio", required=True, help="raw PCM16 24 kHz mono speech")
    parser.add_argument("--timeout", type=float, default=40.0)
    parser.add_argument("--defaults", action="store_true", help="RealtimeRunner with its default settings")
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    collect = _Collect()
    logging.getLogger().addHandler(collect)
    with open(args.audio, "rb") as f:
        pcm = f.read()
    summary = asyncio.run(run(args.url, pcm, args.timeout, args.defaults))
    summary["log_warnings"] = collect.records
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
