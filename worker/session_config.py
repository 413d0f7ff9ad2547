"""Mapping between the protocol's session object (GA or beta shape) and ``ConversationConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from core.conversation import ConversationConfig, TurnDetection
from core.config import McpConfig
from core.conversation.config import FunctionTool, McpServerTool, Truncation
from core.conversation.mcp_tools import SEPARATOR
from core.protocol import MAX_OUTPUT_TOKENS, SPEED_RANGE, TEMPERATURE_RANGE, Dialect, ProtocolError
from worker.audio_formats import AudioFormat, parse_format
from worker.mcp_client import url_refusal

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
    if kind != "server_vad" and value.get("idle_timeout_ms") is not None:
        raise ProtocolError(f"{param}.idle_timeout_ms is supported with server_vad only, not {kind}",
                            param=f"{param}.idle_timeout_ms")
    fields = {k: v for k, v in value.items() if k in TurnDetection.model_fields and v is not None}
    try:
        return TurnDetection.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise ProtocolError(f"{param}.{loc}: {err['msg']}", param=f"{param}.{loc}") from None


NOISE_REDUCTION_TYPES = ("near_field", "far_field")
ECHO_CANCELLATION_TYPES = ("server",)


def _typed_or_null(value: Any, param: str, types: tuple[str, ...]) -> str | None:
    """``{"type": one of types}`` or ``null`` (OpenAI's shape for ``noise_reduction``)."""
    if value is None:
        return None
    kinds = " or ".join(f'{{"type": "{t}"}}' for t in types)
    if not isinstance(value, dict) or value.get("type") not in types:
        raise ProtocolError(f"{param} must be {kinds} or null", param=param)
    return value["type"]


def room_update(inp: dict[str, Any], noise_key: str, echo_key: str, where: str) -> dict[str, Any]:
    """Noise suppression (OpenAI's ``noise_reduction``) and our ``echo_cancellation``, when given."""
    update: dict[str, Any] = {}
    if noise_key in inp:
        update["noise_reduction"] = _typed_or_null(inp[noise_key], f"{where}{noise_key}", NOISE_REDUCTION_TYPES)
    if echo_key in inp:
        update["echo_cancellation"] = _typed_or_null(inp[echo_key], f"{where}{echo_key}",
                                                     ECHO_CANCELLATION_TYPES) is not None
    return update


def room_object(cfg: ConversationConfig) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The session's ``noise_reduction`` and ``echo_cancellation`` as the protocol shows them."""
    return ({"type": cfg.noise_reduction} if cfg.noise_reduction else None,
            {"type": "server"} if cfg.echo_cancellation else None)


def parse_truncation(value: Any, param: str) -> Truncation:
    """GA ``session.truncation``: ``"auto"``, ``"disabled"`` or ``{"type": "retention_ratio",
    "retention_ratio": 0..1, "token_limits": {"post_instructions": N}}``."""
    if value in ("auto", "disabled"):
        return Truncation(type=value)
    if not isinstance(value, dict) or value.get("type") != "retention_ratio":
        raise ProtocolError(f"{param} must be 'auto', 'disabled' or "
                            '{"type": "retention_ratio", "retention_ratio": 0..1}', param=param)
    ratio = value.get("retention_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise ProtocolError(f"{param}.retention_ratio must be a number from 0 to 1", param=f"{param}.retention_ratio")
    limits = value.get("token_limits")
    post = None
    if limits is not None:
        if not isinstance(limits, dict):
            raise ProtocolError(f"{param}.token_limits must be an object", param=f"{param}.token_limits")
        post = limits.get("post_instructions")
        if post is not None and (isinstance(post, bool) or not isinstance(post, int) or post < 1):
            raise ProtocolError(f"{param}.token_limits.post_instructions must be a positive integer",
                                param=f"{param}.token_limits.post_instructions")
    return Truncation(type="retention_ratio", retention_ratio=float(ratio), post_instructions=post)


def parse_max_tokens(value: Any, param: str) -> int | None:
    if value is None:
        return None
    if value == "inf":
        return 1024
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_OUTPUT_TOKENS:
        return value
    raise ProtocolError(f"{param} must be an integer 1..{MAX_OUTPUT_TOKENS} or 'inf'", param=param)


def parse_modalities(value: Any, param: str) -> bool | None:
    """Returns whether audio is produced."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(v in ("text", "audio") for v in value):
        raise ProtocolError(f"{param} must be a list drawn from 'text' and 'audio'", param=param)
    return "audio" in value


@dataclass(slots=True)
class SessionSettings:
    """What the protocol keeps beside the conversation's config: the session type and the wire
    audio formats (the core always works on PCM16)."""

    kind: str = "realtime"  # or "transcription"
    input_format: AudioFormat = field(default_factory=AudioFormat)
    output_format: AudioFormat = field(default_factory=AudioFormat)
    transcription: dict[str, Any] = field(default_factory=lambda: {"model": TRANSCRIPTION_MODEL})


def _transcription(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"{param} must be an object", param=param)
    out = {"model": TRANSCRIPTION_MODEL}
    for key in ("language", "prompt"):
        if isinstance(value.get(key), str):
            out[key] = value[key]
    return out


MCP_IGNORED = ("allowed_callers", "defer_loading")  # accepted; they change nothing here


def _validation_error(exc: ValidationError, where: str) -> ProtocolError:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith(("function-", "literal[")))
    at = f"{where}.{loc}" if loc else where
    return ProtocolError(f"{at}: {err['msg']}", param=at)


def parse_mcp_tool(tool: dict[str, Any], where: str, mcp: McpConfig | None) -> McpServerTool:
    """A ``type: "mcp"`` tool (GA): a server URL the operator allows; connectors are not offered."""
    for key in ("connector_id", "tunnel_id"):
        if tool.get(key) is not None:
            raise ProtocolError(f"{where}.{key}: connectors are not offered here; give the MCP server's server_url",
                                code="unsupported_value", param=f"{where}.{key}")
    if not isinstance(tool.get("server_url"), str) or not tool["server_url"]:
        raise ProtocolError(f"{where}.server_url: an MCP tool needs the server's URL", code="missing_required_parameter",
                            param=f"{where}.server_url")
    try:
        server = McpServerTool.model_validate({k: v for k, v in tool.items() if k not in MCP_IGNORED})
    except ValidationError as exc:
        raise _validation_error(exc, where) from None
    refusal = url_refusal(server.server_url, mcp or McpConfig())
    if refusal is not None:
        raise ProtocolError(f"{where}.server_url: {refusal}", code="mcp_server_not_allowed", param=f"{where}.server_url")
    return server


def parse_tools(tools: Any, tool_choice: Any, param: str, mcp: McpConfig | None = None,
                allow_mcp: bool = False) -> dict[str, Any]:
    """``tools`` and ``tool_choice`` (either dialect's shape) as config fields; only those given.
    ``allow_mcp``: the GA dialect, where ``type: "mcp"`` tools are allowed (under ``mcp``)."""
    out: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            raise ProtocolError(f"{param}.tools must be a list", param=f"{param}.tools")
        parsed = []
        servers: list[McpServerTool] = []
        for i, tool in enumerate(tools):
            if isinstance(tool, dict) and tool.get("type") == "mcp" and allow_mcp:
                servers.append(parse_mcp_tool(tool, f"{param}.tools.{i}", mcp))
                continue
            if not isinstance(tool, dict) or tool.get("type", "function") != "function":
                kinds = "function and mcp tools" if allow_mcp else "only function tools"
                raise ProtocolError(f"{param}.tools.{i}: {kinds} are supported",
                                    param=f"{param}.tools.{i}.type")
            try:
                parsed.append(FunctionTool.model_validate(tool))
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(str(x) for x in err["loc"])
                raise ProtocolError(f"{param}.tools.{i}.{loc}: {err['msg']}", param=f"{param}.tools.{i}.{loc}") from None
            if not isinstance(parsed[-1].parameters, dict):
                raise ProtocolError(f"{param}.tools.{i}.parameters must be a JSON schema object",
                                    param=f"{param}.tools.{i}.parameters")
        limit = (mcp or McpConfig()).max_servers
        if len(servers) > limit:
            raise ProtocolError(f"{param}.tools: at most {limit} MCP servers in a session", param=f"{param}.tools")
        out["tools"] = parsed
        out["mcp_servers"] = servers
    if tool_choice is not None:
        if isinstance(tool_choice, dict) and tool_choice.get("type") == "mcp" and allow_mcp:
            label, name = tool_choice.get("server_label"), tool_choice.get("name")
            if not isinstance(label, str) or not label or (name is not None and not isinstance(name, str)):
                raise ProtocolError(f"{param}.tool_choice: an mcp choice needs server_label (and may name a tool)",
                                    param=f"{param}.tool_choice")
            tool_choice = f"{label}{SEPARATOR}{name}" if name else "required"
        elif isinstance(tool_choice, dict):
            if tool_choice.get("type") != "function" or not isinstance(tool_choice.get("name"), str):
                raise ProtocolError(f"{param}.tool_choice must be auto, none, required or "
                                    '{"type": "function", "name": ...}', param=f"{param}.tool_choice")
            tool_choice = tool_choice["name"]
        elif not isinstance(tool_choice, str) or not tool_choice:
            raise ProtocolError(f"{param}.tool_choice must be auto, none, required or a function's name",
                                param=f"{param}.tool_choice")
        # any other string names one function (the beta's shape); checked against the tools
        out["tool_choice"] = tool_choice
    return out


def tools_object(cfg: ConversationConfig, beta: bool) -> dict[str, Any]:
    """The session's tools as echoed: functions, then MCP servers (never their headers)."""
    choice: Any = cfg.tool_choice
    if choice not in ("auto", "none", "required"):
        label, sep, name = choice.partition(SEPARATOR)
        if sep and not beta and label in {s.server_label for s in cfg.mcp_servers}:
            choice = {"type": "mcp", "server_label": label, "name": name}
        else:
            choice = choice if beta else {"type": "function", "name": choice}
    return {"tools": [t.model_dump() for t in cfg.tools] + [s.wire() for s in cfg.mcp_servers], "tool_choice": choice}


def apply_session_update(cfg: ConversationConfig, s: dict[str, Any], dialect: Dialect,
                         turn_types: tuple[str, ...] = ("server_vad",),
                         settings: SessionSettings | None = None,
                         mcp: McpConfig | None = None) -> tuple[ConversationConfig, SessionSettings]:
    """A new config and settings with the fields the client set; everything else unchanged.
    ``turn_types``: the turn detection types the backend supports; ``mcp``: the operator's MCP
    limits (None: MCP tools refused)."""
    settings = replace(settings) if settings is not None else SessionSettings()
    update: dict[str, Any] = {}
    kind = s.get("type")
    if kind is not None:
        if kind not in ("realtime", "transcription"):
            raise ProtocolError(f"session.type {kind!r} must be 'realtime' or 'transcription'", param="session.type")
        settings.kind = kind
    if "instructions" in s:
        if s["instructions"] is not None and not isinstance(s["instructions"], str):
            raise ProtocolError("session.instructions must be a string", param="session.instructions")
        update["instructions"] = s["instructions"] or None
    if "temperature" in s and s["temperature"] is not None:
        t = s["temperature"]
        low, high = TEMPERATURE_RANGE
        if not isinstance(t, (int, float)) or not low <= t <= high:
            raise ProtocolError(f"session.temperature must be a number {low:g}..{high:g}", param="session.temperature")
        update["temperature"] = float(t)
    if dialect.beta:
        audio = parse_modalities(s.get("modalities"), "session.modalities")
        in_fmt = parse_format(s.get("input_audio_format"), "session.input_audio_format")
        out_fmt = parse_format(s.get("output_audio_format"), "session.output_audio_format", output=True)
        if "turn_detection" in s:
            update["turn_detection"] = _turn_detection(s["turn_detection"], "session.turn_detection", turn_types)
        tokens = parse_max_tokens(s.get("max_response_output_tokens"), "session.max_response_output_tokens")
        speed = s.get("speed")
        voice = s.get("voice")
        transcription = _transcription(s.get("input_audio_transcription"), "session.input_audio_transcription")
        update.update(room_update(s, "input_audio_noise_reduction", "input_audio_echo_cancellation", "session."))
    else:
        audio = parse_modalities(s.get("output_modalities"), "session.output_modalities")
        a = s.get("audio") or {}
        if not isinstance(a, dict):
            raise ProtocolError("session.audio must be an object", param="session.audio")
        inp = a.get("input") or {}
        out = a.get("output") or {}
        if not isinstance(inp, dict) or not isinstance(out, dict):
            raise ProtocolError("session.audio.input and .output must be objects", param="session.audio")
        in_fmt = parse_format(inp.get("format"), "session.audio.input.format")
        out_fmt = parse_format(out.get("format"), "session.audio.output.format", output=True)
        if "turn_detection" in inp:
            update["turn_detection"] = _turn_detection(inp["turn_detection"], "session.audio.input.turn_detection",
                                                      turn_types)
        tokens = parse_max_tokens(s.get("max_output_tokens"), "session.max_output_tokens")
        if s.get("truncation") is not None:
            update["truncation"] = parse_truncation(s["truncation"], "session.truncation")
        speed = out.get("speed")
        voice = out.get("voice")
        transcription = _transcription(inp.get("transcription"), "session.audio.input.transcription")
        update.update(room_update(inp, "noise_reduction", "echo_cancellation", "session.audio.input."))
    update.update(parse_tools(s.get("tools"), s.get("tool_choice"), "session", mcp, allow_mcp=not dialect.beta))
    if transcription is not None:
        settings.transcription = transcription
        update["transcribe_input"] = True  # always on; the model is fixed
    if in_fmt is not None:
        settings.input_format = in_fmt
        update["input_sample_rate"] = in_fmt.rate
    if out_fmt is not None:
        settings.output_format = out_fmt
    if audio is not None:
        update["output_audio"] = audio
    if tokens is not None:
        update["max_output_tokens"] = tokens
    if isinstance(voice, dict):  # GA also allows {"id": ...}
        voice = voice.get("id")
    if voice is not None:
        if not isinstance(voice, str) or not 0 < len(voice) <= 128:
            raise ProtocolError("voice must be a non-empty string", param="session.voice")
        update["voice"] = voice  # the backend maps it to one of its voices (or its default)
    if speed is not None:
        low, high = SPEED_RANGE
        if not isinstance(speed, (int, float)) or not low <= speed <= high:
            raise ProtocolError(f"speed must be a number {low:.1f}..{high:.1f}", param="session.speed")
        update["speed"] = float(speed)
    cfg = cfg.model_copy(update=update)
    if settings.kind == "transcription" and cfg.turn_detection is not None:
        # No replies in a transcription session: turns are only transcribed.
        td = cfg.turn_detection.model_copy(update={"create_response": False, "interrupt_response": False})
        cfg = cfg.model_copy(update={"turn_detection": td, "transcribe_input": True})
    return cfg, settings


def session_object(cfg: ConversationConfig, dialect: Dialect, session_id: str, model: str,
                   settings: SessionSettings | None = None) -> dict[str, Any]:
    settings = settings or SessionSettings()
    td = cfg.turn_detection.wire() if cfg.turn_detection else None
    noise, echo = room_object(cfg)
    if settings.kind == "transcription":
        return _transcription_object(td, dialect, session_id, settings, noise, echo)
    if dialect.beta:
        return {
            "id": session_id, "object": "realtime.session", "model": model,
            "modalities": ["text", "audio"] if cfg.output_audio else ["text"],
            "instructions": cfg.instructions or "", "voice": cfg.voice or VOICE,
            "input_audio_format": settings.input_format.beta(), "output_audio_format": settings.output_format.beta(),
            "input_audio_transcription": settings.transcription,
            "input_audio_noise_reduction": noise, "input_audio_echo_cancellation": echo,
            "turn_detection": td, "temperature": cfg.temperature,
            "max_response_output_tokens": cfg.max_output_tokens, "speed": cfg.speed,
            **tools_object(cfg, True),
        }
    return {
        "type": "realtime", "object": "realtime.session", "id": session_id, "model": model,
        "output_modalities": ["audio"] if cfg.output_audio else ["text"],
        "instructions": cfg.instructions or "",
        "audio": {
            "input": {
                "format": settings.input_format.ga(),
                "transcription": settings.transcription,
                "turn_detection": td,
                "noise_reduction": noise,
                "echo_cancellation": echo,  # our extension
            },
            "output": {"format": settings.output_format.ga(), "voice": cfg.voice or VOICE, "speed": cfg.speed},
        },
        "max_output_tokens": cfg.max_output_tokens,
        "truncation": cfg.truncation.wire(),
        **tools_object(cfg, False),
    }


def _transcription_object(td: dict[str, Any] | None, dialect: Dialect, session_id: str,
                          settings: SessionSettings, noise: dict[str, str] | None,
                          echo: dict[str, str] | None) -> dict[str, Any]:
    if td is not None:
        td = {k: v for k, v in td.items() if k not in ("create_response", "interrupt_response")}
    if dialect.beta:
        return {
            "id": session_id, "object": "realtime.transcription_session",
            # Only sessions made over REST carry a key; a WebSocket session has none to give.
            "client_secret": {"value": "", "expires_at": 0},
            "input_audio_format": settings.input_format.beta(), "input_audio_transcription": settings.transcription,
            "input_audio_noise_reduction": noise, "input_audio_echo_cancellation": echo,
            "turn_detection": td, "modalities": ["text"],
        }
    return {
        "type": "transcription", "object": "realtime.transcription_session", "id": session_id,
        "audio": {"input": {"format": settings.input_format.ga(), "transcription": settings.transcription,
                            "turn_detection": td, "noise_reduction": noise, "echo_cancellation": echo}},
        "include": [],
    }
