"""OpenAI Live events: client events checked against the ``openai`` package's own types, server
events built. Shared: the worker speaks the dialect, the gateway answers its refusals in it.

A client event is checked with the type its ``type`` names (``openai.types.live.ClientEvent``'s
members), so a bad field gets the Live ``error`` naming it, with the client's ``event_id``; the
server events are shaped so ``openai.types.live.ServerEvent`` validates every one (the tests
check it).
"""

from __future__ import annotations

import time
import typing
from functools import cache
from typing import Any

from openai.types.live import ClientEvent, ForkClientEvent, ServerEvent
from pydantic import TypeAdapter, ValidationError

from core.protocol import ProtocolError, event_id
from core.redaction import tools_without_secrets

DEFAULT_FORMAT = {"type": "audio/pcm", "rate": 24000}  # what Pipecat assumes: it never sends a format
DEFAULT_VOICE = "marin"
# The longest a close waits for the reply being spoken. Live drains "for at most 10 seconds", and
# clients wait just that long for session.closed (Pipecat's SESSION_CLOSE_TIMEOUT_SECS is 10 s): a
# full 10 s drain answers after the client gave up, so it stops a second short.
CLOSE_DRAIN_S = 9.0


def _members(union: Any) -> dict[str, type]:
    members = typing.get_args(typing.get_args(union)[0])
    return {typing.get_args(m.model_fields["type"].annotation)[0]: m for m in members}


@cache
def client_types() -> dict[str, TypeAdapter]:
    return {kind: TypeAdapter(model) for kind, model in _members(ClientEvent).items()}


@cache
def fork_client_types() -> dict[str, TypeAdapter]:
    """A fork's events (``ForkClientEvent``): its ``session.start`` holds overrides, no model."""
    return {kind: TypeAdapter(model) for kind, model in _members(ForkClientEvent).items()}


@cache
def server_types() -> dict[str, TypeAdapter]:
    return {kind: TypeAdapter(model) for kind, model in _members(ServerEvent).items()}


def parse_client_event(event: Any, fork: bool = False) -> dict[str, Any]:
    """The event as sent, once its type's model accepts it; ``ProtocolError`` naming the field if not.
    ``fork``: on a fork's connection (``ForkClientEvent``)."""
    if not isinstance(event, dict):
        raise ProtocolError("a client event must be a JSON object", code="invalid_json")
    kind = event.get("type")
    adapter = (fork_client_types() if fork else client_types()).get(kind) if isinstance(kind, str) else None
    if adapter is None:
        raise ProtocolError(f"unknown Live client event type {kind!r}", code="unknown_event", param="type")
    try:
        adapter.validate_python(event)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProtocolError(f"{kind}: {where or 'event'}: {first['msg']}", code="invalid_value",
                            param=where or None) from None
    return event


def server_event_error(event: dict[str, Any]) -> str | None:
    """Why ``event`` is not a valid Live server event (None: valid). For tests and debug checks."""
    adapter = server_types().get(event.get("type"))
    if adapter is None:
        return f"not a Live server event type: {event.get('type')!r}"
    try:
        adapter.validate_python(event)
    except ValidationError as exc:
        return str(exc)
    return None


def live_event(kind: str, client_event_id: str | None = None, **fields: Any) -> dict[str, Any]:
    event = {"type": kind, "event_id": event_id(), **fields}
    if client_event_id is not None:
        event["client_event_id"] = client_event_id
    return event


def live_error(message: str, code: str, param: str | None = None, client_event_id: str | None = None,
               kind: str = "invalid_request_error") -> dict[str, Any]:
    error: dict[str, Any] = {"type": kind, "code": code, "message": message}
    if param is not None:
        error["param"] = param
    if client_event_id is not None:
        error["client_event_id"] = client_event_id
    return live_event("error", client_event_id, error=error)


def session_resource(session_id: str, model: str, config: dict[str, Any], expires_at: int) -> dict[str, Any]:
    """``SessionResource``: the resolved config with the server's defaults, always ``active``; the
    delegation's MCP credentials redacted (they go to the MCP server only, never to a client)."""
    resource = {"id": session_id, "expires_at": expires_at, "model": model, "status": "active",
                "audio": {"format": config.get("format", DEFAULT_FORMAT),
                          "output": {"voice": config.get("voice", DEFAULT_VOICE)}},
                "delegation": _delegation_without_secrets(config.get("delegation"))
                or {"type": "client", "acknowledgement_delay_ms": 0},
                "instructions": config.get("instructions") or "", "store": bool(config.get("store", False))}
    if config.get("input"):
        resource["input"] = config["input"]
    return resource


def _delegation_without_secrets(delegation: Any) -> Any:
    responses = delegation.get("responses") if isinstance(delegation, dict) else None
    if not isinstance(responses, dict) or "tools" not in responses:
        return delegation
    return {**delegation, "responses": {**responses, "tools": tools_without_secrets(responses["tools"])}}


def expires_at(max_session_s: float) -> int:
    return int(time.time() + max_session_s)
