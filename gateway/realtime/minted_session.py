"""The session config an ephemeral key is minted with: checked at mint time, and the session object
the mint answers with.

The check runs in the gateway (which loads no model code), so it uses the ``openai`` package's own
Pydantic models of a session (GA ``RealtimeSessionCreateRequest`` / transcription, beta
``session.update``'s ``Session``), strictly (a string is not a number), plus every field they do
not know refused by name (OpenAI's ``unknown_parameter``), plus the worker's value ranges
(``worker/session_config.py``: tokens 1..4096 or ``inf``, temperature 0..2, speed 0.5..2.0, function
tools only). Our own extensions pass: a 16 kHz PCM input rate, ``turn_detection`` ``model_duplex``,
``temperature`` in GA. What depends on the backend (``model_duplex`` or ``tools`` where the model
has none) is answered by the worker, as an ``error`` event right after ``session.created``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from core.protocol import IDLE_TIMEOUT_MS_RANGE, MAX_OUTPUT_TOKENS, SPEED_RANGE, TEMPERATURE_RANGE
from gateway.realtime.request import DEFAULT_MODEL

_EXTENSION_TURNS = ("model_duplex",)
_TOP = "\x00"  # the path prefix of a config that is the whole body (removed from the error again)
_UNION_LABELS = {"str", "int", "float", "bool", "list", "dict", "none"}
GA_DEFAULTS: dict[str, Any] = {
    "output_modalities": ["audio"],
    "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}},
              "output": {"format": {"type": "audio/pcm", "rate": 24000}}},
    "tools": [], "tool_choice": "auto", "truncation": "auto",
}
BETA_DEFAULTS: dict[str, Any] = {"modalities": ["text", "audio"], "input_audio_format": "pcm16",
                                 "output_audio_format": "pcm16", "tools": [], "tool_choice": "auto"}


class SessionConfigError(Exception):
    """A 400 in OpenAI's shape: ``param`` in OpenAI's notation (``session.audio.input.format.rate``)."""

    def __init__(self, message: str, param: str | None, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


def check_session(session: Any, *, beta: bool, param: str = "session") -> tuple[dict[str, Any], str | None]:
    """(the config as the worker will get it, the model it names). Raises ``SessionConfigError``.
    ``param``: where the config sits in the request (``""``: it is the body, as in the beta's)."""
    if not isinstance(session, dict):
        raise SessionConfigError(f"Invalid type for '{param or 'body'}': expected an object.", param or None,
                                 "invalid_type")
    try:
        return _check(session, beta, param or _TOP)
    except SessionConfigError as exc:
        if not param:  # the fields are top-level: no prefix
            exc.param = (exc.param or "").removeprefix(_TOP + ".") or None
            exc.message = exc.message.replace(_TOP + ".", "")
            exc.args = (exc.message,)
        raise


def _check(session: dict[str, Any], beta: bool, param: str) -> tuple[dict[str, Any], str | None]:
    session = dict(session)
    model = session.pop("model", None)
    if model is not None and (not isinstance(model, str) or not 0 < len(model) <= 200):
        raise SessionConfigError(f"Invalid value for '{param}.model': a model name (a string).", f"{param}.model")
    probe = copy.deepcopy(session)
    temperature = probe.pop("temperature", None) if not beta else None  # GA: our extension
    if beta:
        _neutralise_turn(probe, "turn_detection")
        _idle_timeout(session.get("turn_detection"), f"{param}.turn_detection", probe.get("turn_detection"))
        _validate(_beta_model(), probe, param)
        _range(session.get("temperature"), *TEMPERATURE_RANGE, f"{param}.temperature")
        _range(session.get("speed"), *SPEED_RANGE, f"{param}.speed")
        _tokens(session.get("max_response_output_tokens"), f"{param}.max_response_output_tokens")
        _modalities(session.get("modalities"), f"{param}.modalities")
        session.pop("client_secret", None)  # the lifetime: not part of the session
    else:
        kind = probe.get("type")
        if kind is None:
            raise SessionConfigError(f"Missing required parameter: '{param}.type' ('realtime' or 'transcription').",
                                     f"{param}.type", "missing_required_parameter")
        if kind not in ("realtime", "transcription"):
            raise SessionConfigError(f"Invalid value for '{param}.type': expected 'realtime' or 'transcription'.",
                                     f"{param}.type")
        audio_in = (probe.get("audio") or {}).get("input") if isinstance(probe.get("audio"), dict) else None
        if isinstance(audio_in, dict):
            fmt = audio_in.get("format")
            if isinstance(fmt, dict) and fmt.get("type", "audio/pcm") == "audio/pcm" and fmt.get("rate") == 16000:
                fmt["rate"] = 24000  # our extension: 16 kHz input
            _neutralise_turn(audio_in, "turn_detection")
        _validate(_ga_model(kind), probe, param)
        turn = ((session.get("audio") or {}).get("input") or {}).get("turn_detection")
        _idle_timeout(turn, f"{param}.audio.input.turn_detection")
        _truncation(session.get("truncation"), f"{param}.truncation")
        _range(temperature, *TEMPERATURE_RANGE, f"{param}.temperature")
        out = ((session.get("audio") or {}).get("output") or {})
        _range(out.get("speed"), *SPEED_RANGE, f"{param}.audio.output.speed")
        _tokens(session.get("max_output_tokens"), f"{param}.max_output_tokens")
        _modalities(session.get("output_modalities"), f"{param}.output_modalities")
        choice = session.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") not in ("function", "mcp"):
            raise SessionConfigError(f"'{param}.tool_choice': only function and mcp tools are supported.",
                                     f"{param}.tool_choice.type", "unsupported_value")
    for i, tool in enumerate(session.get("tools") or []):
        if tool.get("type") == "mcp" and not beta:  # the worker checks the host against tools.mcp.allowed_hosts
            _mcp_tool(tool, f"{param}.tools[{i}]")
            continue
        if tool.get("type", "function") != "function":
            kinds = "function tools are" if beta else "function and mcp tools are"
            raise SessionConfigError(f"'{param}.tools[{i}].type': only {kinds} supported here.",
                                     f"{param}.tools[{i}].type", "unsupported_value")
        if "parameters" in tool and not isinstance(tool["parameters"], dict):
            raise SessionConfigError(f"Invalid value for '{param}.tools[{i}].parameters': a JSON schema object.",
                                     f"{param}.tools[{i}].parameters")
    return session, model


def session_object(session: dict[str, Any], *, beta: bool, session_id: str, model: str | None) -> dict[str, Any]:
    """The session as it will start: the minted config over the protocol's defaults (what the
    worker alone decides, such as its default voice and instructions, is left out). An MCP tool's
    ``headers`` and ``authorization`` are not echoed: the key holder never sees them."""
    if session.get("tools"):
        session = {**session, "tools": [{k: v for k, v in t.items() if k not in MCP_SECRETS}
                                        if t.get("type") == "mcp" else t for t in session["tools"]]}
    if beta:
        return {"id": session_id, "object": "realtime.session", "model": model or DEFAULT_MODEL,
                **_merge(BETA_DEFAULTS, session)}
    if session.get("type") == "transcription":
        return {"object": "realtime.transcription_session", "id": session_id,
                **_merge({"audio": {"input": {"format": GA_DEFAULTS["audio"]["input"]["format"]}}}, session)}
    return {"object": "realtime.session", "id": session_id, "model": model or DEFAULT_MODEL,
            **_merge(GA_DEFAULTS, session)}


# --------------------------------------------------------------------------- helpers


MCP_SECRETS = ("headers", "authorization")


def _mcp_tool(tool: dict[str, Any], at: str) -> None:
    """An MCP server by URL (connectors are not offered); the shape was checked by the openai model."""
    for key in ("connector_id", "tunnel_id"):
        if tool.get(key) is not None:
            raise SessionConfigError(f"'{at}.{key}': connectors are not offered here; give server_url.",
                                     f"{at}.{key}", "unsupported_value")
    if not isinstance(tool.get("server_url"), str) or not tool["server_url"]:
        raise SessionConfigError(f"Missing required parameter: '{at}.server_url'.", f"{at}.server_url",
                                 "missing_required_parameter")


def _ga_model(kind: str) -> type[BaseModel]:
    if kind == "transcription":
        from openai.types.realtime.realtime_transcription_session_create_request import (
            RealtimeTranscriptionSessionCreateRequest,
        )

        return RealtimeTranscriptionSessionCreateRequest
    from openai.types.realtime.realtime_session_create_request import RealtimeSessionCreateRequest

    return RealtimeSessionCreateRequest


def _beta_model() -> type[BaseModel]:
    from openai.types.beta.realtime.session_update_event import Session

    return Session


def _neutralise_turn(holder: dict[str, Any], key: str) -> None:
    """``model_duplex`` is ours: checked as a server_vad without options."""
    turn = holder.get(key)
    if isinstance(turn, dict) and turn.get("type") in _EXTENSION_TURNS:
        holder[key] = {"type": "server_vad"}


def _validate(model: type[BaseModel], probe: dict[str, Any], param: str) -> None:
    try:
        parsed = model.model_validate_json(json.dumps(probe), strict=True)
    except ValidationError as exc:
        raise _error(exc, param) from None
    unknown = _unknown_fields(parsed, param)
    if unknown:
        raise SessionConfigError(f"Unknown parameter: '{unknown}'.", unknown, "unknown_parameter")


def _unknown_fields(value: Any, path: str) -> str | None:
    """The first field the model did not declare (``openai``'s models keep extras instead of refusing)."""
    if isinstance(value, BaseModel):
        for name in value.__pydantic_extra__ or {}:
            return f"{path}.{name}"
        for name in type(value).model_fields:
            found = _unknown_fields(getattr(value, name), f"{path}.{name}")
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _unknown_fields(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _error(exc: ValidationError, param: str) -> SessionConfigError:
    errors = exc.errors(include_url=False)
    # A union reports each branch; a branch whose ``type`` tag did not match is the wrong one.
    relevant = [e for e in errors if not (e["type"] == "literal_error" and e["loc"][-1:] == ("type",))] or errors
    err = max(relevant, key=lambda e: len(e["loc"]))
    where = param
    for part in err["loc"]:
        if isinstance(part, int):
            where += f"[{part}]"
        elif not (part[:1].isupper() or "[" in part or "-" in part or part in _UNION_LABELS):
            where += f".{part}"
    if err["type"] == "missing":
        return SessionConfigError(f"Missing required parameter: '{where}'.", where, "missing_required_parameter")
    return SessionConfigError(f"Invalid value for '{where}': {err['msg']}.", where,
                              "invalid_type" if err["type"].endswith("_type") else "invalid_value")


def _idle_timeout(turn: Any, param: str, beta_probe: Any = None) -> None:
    """``idle_timeout_ms``: server_vad only, 5..30 s. The beta's type lacks it (ours there, as in
    the worker's beta ``session.update``): taken out of ``beta_probe`` before that is validated."""
    if not isinstance(turn, dict) or turn.get("idle_timeout_ms") is None:
        return
    value = turn["idle_timeout_ms"]
    where = f"{param}.idle_timeout_ms"
    if turn.get("type", "server_vad") != "server_vad":
        raise SessionConfigError(f"Unknown parameter: '{where}' (server_vad only).", where, "unknown_parameter")
    if isinstance(beta_probe, dict):
        beta_probe.pop("idle_timeout_ms", None)
    low, high = IDLE_TIMEOUT_MS_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SessionConfigError(f"Invalid value for '{where}': expected an integer from {low} to {high}.", where)


def _truncation(value: Any, param: str) -> None:
    """A retention ratio from 0 to 1 and a positive ``post_instructions`` (the type was checked)."""
    if not isinstance(value, dict):
        return
    ratio = value.get("retention_ratio")
    if isinstance(ratio, (int, float)) and not 0 <= ratio <= 1:
        raise SessionConfigError(f"Invalid value for '{param}.retention_ratio': expected a number from 0 to 1.",
                                 f"{param}.retention_ratio")
    post = (value.get("token_limits") or {}).get("post_instructions")
    if isinstance(post, int) and post < 1:
        where = f"{param}.token_limits.post_instructions"
        raise SessionConfigError(f"Invalid value for '{where}': expected a positive integer.", where)


def _range(value: Any, low: float, high: float, param: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise SessionConfigError(f"Invalid value for '{param}': expected a number from {low:g} to {high:g}.", param)


def _tokens(value: Any, param: str) -> None:
    if value is None or value == "inf":
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise SessionConfigError(f"Invalid value for '{param}': expected an integer from 1 to {MAX_OUTPUT_TOKENS}, "
                                 "or 'inf'.", param)


def _modalities(value: Any, param: str) -> None:
    if value is not None and not value:
        raise SessionConfigError(f"Invalid value for '{param}': give 'text' and/or 'audio'.", param)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``; only the ``audio`` sections merge (a format given replaces the default)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if key in ("audio", "input", "output") and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
