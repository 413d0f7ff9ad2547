"""A Live session's config as the Realtime session under it takes it (``session.start`` /
``session.update`` -> ``session.update``), and its startup items as Realtime messages."""

from __future__ import annotations

from typing import Any

from core.cascade.tool_calls import DELEGATION_TOOL
from core.live_events import DEFAULT_FORMAT, DEFAULT_VOICE
from core.protocol import ProtocolError


def realtime_update(s: dict[str, Any], turn_detection: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """The Realtime ``session.update`` body for a Live session config, and the audio's bytes per
    second. ``turn_detection``: at startup (None: an update, which cannot change the audio).
    Client delegation, asked for explicitly, offers the model the hidden delegation function; a
    session that names no delegation has the model answer everything itself."""
    out: dict[str, Any] = {"type": "realtime"}
    startup = turn_detection is not None
    delegation = s.get("delegation")
    if delegation is not None and delegation.get("type") == "client":
        if startup:  # the model may hand a request to the client's application (worker/live/delegation.py)
            out["tools"] = [DELEGATION_TOOL]
    elif delegation is not None:
        if delegation.get("type") == "decisions":
            raise ProtocolError("Decisions delegation is not supported by this server yet",
                                code="unsupported_value", param="session.delegation.type")
        responses = delegation.get("responses") or {}
        tools = []
        for tool in responses.get("tools") or []:
            if tool.get("type") not in ("function", "mcp"):
                raise ProtocolError(f"tool type {tool.get('type')!r} is not supported by this server; use "
                                    "'function' or 'mcp'", code="unsupported_value",
                                    param="session.delegation.responses.tools")
            tools.append({k: v for k, v in tool.items() if k != "strict"})  # Live refuses strict; we ignore it
        if tools or not startup:
            out["tools"] = tools
        if responses.get("tool_choice") is not None:
            out["tool_choice"] = responses["tool_choice"]
        if responses.get("max_output_tokens") is not None:
            out["max_output_tokens"] = responses["max_output_tokens"]
    bytes_per_s = 0
    if startup:
        audio = s.get("audio") or {}
        realtime_fmt, bytes_per_s = _format(audio.get("format") or DEFAULT_FORMAT)
        voice = (audio.get("output") or {}).get("voice") or DEFAULT_VOICE
        out["audio"] = {
            "input": {"format": realtime_fmt, "transcription": {"model": "whisper-1"}, "turn_detection": turn_detection},
            "output": {"format": realtime_fmt, "voice": voice},
        }
        if s.get("instructions"):
            out["instructions"] = s["instructions"]
    return out, bytes_per_s


def _format(fmt: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The Realtime format for a Live one, and its bytes per second."""
    kind, rate = fmt.get("type"), fmt.get("rate")
    if kind in ("audio/pcmu", "audio/pcma"):
        if rate not in (None, 8000):
            raise ProtocolError(f"session.audio.format: {kind} is 8000 Hz only", code="invalid_value",
                                param="session.audio.format.rate")
        return {"type": kind}, 8000
    if rate != 24000:
        raise ProtocolError("session.audio.format: this server speaks PCM at 24000 Hz only (input and output share "
                            "the format)", code="unsupported_value", param="session.audio.format.rate")
    return {"type": "audio/pcm", "rate": 24000}, 48000


def initial_message(item: dict[str, Any], item_id: str | None = None) -> dict[str, Any]:
    """A startup ``InitialItem`` as a Realtime message item."""
    role = item["role"]
    text = "".join(part.get("text", "") for part in item.get("content") or [])
    out: dict[str, Any] = {"type": "message", "role": "system" if role == "developer" else role,
                           "content": [{"type": "output_text" if role == "assistant" else "input_text", "text": text}]}
    if item_id is not None:
        out["id"] = item_id
    return out
