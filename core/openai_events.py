"""Server events checked against the ``openai`` package's own types (GA and beta).

Standard clients (the OpenAI Agents SDK, LiveKit, Pipecat) parse every server event with these
types, so an event that fails here is an error on their side. The tests validate every event a
scripted session produces; ``validation_error`` is also cheap enough for a debug check.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

from openai.types.beta.realtime import realtime_server_event as beta_events
from openai.types.beta.realtime.transcription_session_updated_event import TranscriptionSessionUpdatedEvent
from openai.types.realtime import realtime_server_event as ga_events
from pydantic import TypeAdapter, ValidationError


def _members(union: Any) -> dict[str, type]:
    """``type`` literal -> model, for each member of an SDK server-event union."""
    args = typing.get_args(union)
    members = typing.get_args(args[0]) if args and typing.get_origin(args[0]) is typing.Union else args
    out: dict[str, type] = {}
    for model in members:
        for kind in typing.get_args(model.model_fields["type"].annotation):
            out[kind] = model
    return out


@cache
def _adapters(beta: bool) -> dict[str, TypeAdapter]:
    models = _members(beta_events.RealtimeServerEvent if beta else ga_events.RealtimeServerEvent)
    if beta:
        # In the beta API's reference but missing from the SDK's union: the same shape as
        # ``transcription_session.updated``.
        models["transcription_session.created"] = TranscriptionSessionUpdatedEvent
    return {kind: TypeAdapter(model) for kind, model in models.items()}


def server_event_types(beta: bool) -> frozenset[str]:
    return frozenset(_adapters(beta))


def validation_error(event: dict[str, Any], beta: bool) -> str | None:
    """Why ``event`` is not a valid server event of the dialect, or None if it is.

    The beta session objects' ``model`` fields are literals of OpenAI's model names; ours are not
    among them, so those are not held against an event."""
    kind = event.get("type")
    adapter = _adapters(beta).get(kind)  # type: ignore[arg-type]
    if adapter is None:
        return f"{kind!r} is not a {'beta' if beta else 'GA'} server event"
    if kind == "transcription_session.created":
        event = {**event, "type": "transcription_session.updated"}
    try:
        adapter.validate_python(event)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if not _model_literal(e, beta)]
        if errors:
            return "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in errors[:5])
    return None


def _model_literal(error: Any, beta: bool) -> bool:
    """A beta model-name literal (the session's model, a transcription session's ASR model)."""
    loc = error["loc"]
    return beta and loc[:1] == ("session",) and loc[-1] == "model" and error["type"] == "literal_error"
