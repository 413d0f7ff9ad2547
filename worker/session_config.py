"""Mapping between the protocol's session object (GA or beta shape) and ``ConversationConfig``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from core.conversation import ConversationConfig, TurnDetection
from core.protocol import Dialect, ProtocolError

VOICE = "joe"
TRANSCRIPTION_MODEL = "whisper-tiny.en"


def _turn_detection(value: Any, param: str, types: tuple[str, ...] = ("server_vad",)) -> TurnDetection | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"{param} must be an object or null", param=param)
    kind = value.get("type", "server_vad")
    if kind not in types:
        allowed = ", ".join(repr(t) for t in types)
        raise ProtocolError(f"{param}.type {kind!r} is not supported; use {allowed} or null", param=param)
    fields = {k: v for k, v in value.items() if k in TurnDetection.model_fields and v is not None}
    try:
        return TurnDetection.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ProtocolError(f"{param}.{loc}: {err['msg']}", param=f"{param}.{loc}") from None


def _rate(fmt: Any, param: str) -> int | None:
    if fmt is None:
        return None
    if isinstance(fmt, str):  # beta: "pcm16" (24 kHz)
        if fmt == "pcm16":
            return 24000
        raise ProtocolError(f"{param} {fmt!r} is not supported; use 'pcm16'", param=param)
    if isinstance(fmt, dict):
        if fmt.get("type", "audio/pcm") != "audio/pcm":
            raise ProtocolError(f"{param}.type {fmt.get('type')!r} is not supported; use 'audio/pcm'", param=param)
        rate = fmt.get("rate", 24000)
        if rate not in (16000, 24000):
            raise ProtocolError(f"{param}.rate {rate!r} is not supported; use 16000 or 24000", param=f"{param}.rate")
        return rate
    raise ProtocolError(f"{param} must be an object", param=param)


def _max_tokens(value: Any, param: str) -> int | None:
    if value is None:
        return None
    if value == "inf":
        return 1024
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 4096:
        return value
    raise ProtocolError(f"{param} must be an integer 1..4096 or 'inf'", param=param)


def _modalities(value: Any, param: str) -> bool | None:
    """Returns whether audio is produced."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not set(value) <= {"text", "audio"}:
        raise ProtocolError(f"{param} must be a list drawn from 'text' and 'audio'", param=param)
    return "audio" in value


def apply_session_update(cfg: ConversationConfig, s: dict[str, Any], dialect: Dialect,
                         turn_types: tuple[str, ...] = ("server_vad",)) -> ConversationConfig:
    """A new config with the fields the client set; everything else unchanged. ``turn_types``:
    the turn detection types the backend supports."""
    update: dict[str, Any] = {}
    if "instructions" in s:
        if s["instructions"] is not None and not isinstance(s["instructions"], str):
            raise ProtocolError("session.instructions must be a string", param="session.instructions")
        update["instructions"] = s["instructions"] or None
    if "temperature" in s and s["temperature"] is not None:
        t = s["temperature"]
        if not isinstance(t, (int, float)) or not 0 <= t <= 2:
            raise ProtocolError("session.temperature must be a number 0..2", param="session.temperature")
        update["temperature"] = float(t)
    if dialect.beta:
        audio = _modalities(s.get("modalities"), "session.modalities")
        rate = _rate(s.get("input_audio_format"), "session.input_audio_format")
        _rate(s.get("output_audio_format"), "session.output_audio_format")
        if "turn_detection" in s:
            update["turn_detection"] = _turn_detection(s["turn_detection"], "session.turn_detection", turn_types)
        tokens = _max_tokens(s.get("max_response_output_tokens"), "session.max_response_output_tokens")
        speed = s.get("speed")
        voice = s.get("voice")
        if "input_audio_transcription" in s:
            update["transcribe_input"] = True  # always on; the model is fixed
    else:
        audio = _modalities(s.get("output_modalities"), "session.output_modalities")
        a = s.get("audio") or {}
        if not isinstance(a, dict):
            raise ProtocolError("session.audio must be an object", param="session.audio")
        inp = a.get("input") or {}
        out = a.get("output") or {}
        rate = _rate(inp.get("format"), "session.audio.input.format")
        _rate(out.get("format"), "session.audio.output.format")
        if "turn_detection" in inp:
            update["turn_detection"] = _turn_detection(inp["turn_detection"], "session.audio.input.turn_detection",
                                                      turn_types)
        tokens = _max_tokens(s.get("max_output_tokens"), "session.max_output_tokens")
        speed = out.get("speed")
        voice = out.get("voice")
    if audio is not None:
        update["output_audio"] = audio
    if rate is not None:
        update["input_sample_rate"] = rate
    if tokens is not None:
        update["max_output_tokens"] = tokens
    if isinstance(voice, dict):  # GA also allows {"id": ...}
        voice = voice.get("id")
    if voice is not None:
        if not isinstance(voice, str) or not 0 < len(voice) <= 128:
            raise ProtocolError("voice must be a non-empty string", param="session.voice")
        update["voice"] = voice  # the backend maps it to one of its voices (or its default)
    if speed is not None:
        if not isinstance(speed, (int, float)) or not 0.5 <= speed <= 2.0:
            raise ProtocolError("speed must be a number 0.5..2.0", param="session.speed")
        update["speed"] = float(speed)
    return cfg.model_copy(update=update)


def session_object(cfg: ConversationConfig, dialect: Dialect, session_id: str, model: str) -> dict[str, Any]:
    td = cfg.turn_detection.model_dump() if cfg.turn_detection else None
    if dialect.beta:
        return {
            "id": session_id, "object": "realtime.session", "model": model,
            "modalities": ["text", "audio"] if cfg.output_audio else ["text"],
            "instructions": cfg.instructions or "", "voice": cfg.voice or VOICE,
            "input_audio_format": "pcm16", "output_audio_format": "pcm16",
            "input_audio_transcription": {"model": TRANSCRIPTION_MODEL},
            "turn_detection": td, "temperature": cfg.temperature,
            "max_response_output_tokens": cfg.max_output_tokens, "speed": cfg.speed,
            "tools": [], "tool_choice": "auto",
        }
    return {
        "type": "realtime", "object": "realtime.session", "id": session_id, "model": model,
        "output_modalities": ["audio"] if cfg.output_audio else ["text"],
        "instructions": cfg.instructions or "",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": cfg.input_sample_rate},
                "transcription": {"model": TRANSCRIPTION_MODEL},
                "turn_detection": td,
            },
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": cfg.voice or VOICE, "speed": cfg.speed},
        },
        "max_output_tokens": cfg.max_output_tokens,
        "tools": [], "tool_choice": "auto",
    }
