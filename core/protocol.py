"""The realtime protocol: client event models, the two dialects' server event names, and
builders for server events.

Client events are parsed into small Pydantic models, one class per event type with a
``Literal`` type field (as the ``openai`` SDK models them); unknown fields are ignored so both
the GA and the beta dialect parse. Server events are plain dicts built here: audio deltas are
the hot path, and the official SDK reads them with its own (non-validating) models.
Our extension server events (``queue.*``, ``session.recording``, ``session.metrics``,
``session.paused|resumed``, ``input_image_buffer.appended``) go only to clients that ask for them
with the query parameter ``extensions``; standard clients (which validate every event against
OpenAI's types) never see them. Extension client events are accepted from anyone.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


def event_id() -> str:
    return f"event_{secrets.token_hex(8)}"


# --------------------------------------------------------------------------- client events


class _Client(BaseModel):
    model_config = ConfigDict(extra="ignore")
    event_id: str | None = None


class SessionUpdate(_Client):
    type: Literal["session.update"]
    session: dict[str, Any] = Field(default_factory=dict)


class TranscriptionSessionUpdate(_Client):
    """Beta: configure a transcription session (``?intent=transcription``)."""

    type: Literal["transcription_session.update"]
    session: dict[str, Any] = Field(default_factory=dict)


class InputAudioBufferAppend(_Client):
    type: Literal["input_audio_buffer.append"]
    audio: str


class InputAudioBufferCommit(_Client):
    type: Literal["input_audio_buffer.commit"]


class InputAudioBufferClear(_Client):
    type: Literal["input_audio_buffer.clear"]


class ConversationItemCreate(_Client):
    type: Literal["conversation.item.create"]
    item: dict[str, Any]
    previous_item_id: str | None = None


class ConversationItemTruncate(_Client):
    type: Literal["conversation.item.truncate"]
    item_id: str
    content_index: int = 0
    audio_end_ms: int = Field(ge=0)


class ConversationItemDelete(_Client):
    type: Literal["conversation.item.delete"]
    item_id: str


class ConversationItemRetrieve(_Client):
    type: Literal["conversation.item.retrieve"]
    item_id: str


class ResponseCreate(_Client):
    type: Literal["response.create"]
    response: dict[str, Any] | None = None


class ResponseCancel(_Client):
    type: Literal["response.cancel"]
    response_id: str | None = None


class OutputAudioBufferClear(_Client):
    type: Literal["output_audio_buffer.clear"]


class InputImageBufferAppend(_Client):
    """Extension: one JPEG/PNG camera frame (base64), at most ~1 per second."""

    type: Literal["input_image_buffer.append"]
    image: str


class SessionPause(_Client):
    type: Literal["session.pause"]


class SessionResume(_Client):
    type: Literal["session.resume"]


# Session values a client may set, checked where a session is configured: by the worker on each
# ``session.update`` and by the gateway when it mints an ephemeral key for one.
MAX_OUTPUT_TOKENS = 4096
TEMPERATURE_RANGE = (0.0, 2.0)
SPEED_RANGE = (0.5, 2.0)
# ``turn_detection.idle_timeout_ms`` (server_vad). The SDK's type states no bounds; 5 to 30 s are
# ours: shorter cuts into a pause to think, and a phone call wants a prompt well before 30 s.
IDLE_TIMEOUT_MS_RANGE = (5000, 30000)

_CLIENT_MODELS = (
    SessionUpdate,
    TranscriptionSessionUpdate,
    InputAudioBufferAppend,
    InputAudioBufferCommit,
    InputAudioBufferClear,
    ConversationItemCreate,
    ConversationItemTruncate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ResponseCreate,
    ResponseCancel,
    OutputAudioBufferClear,
    InputImageBufferAppend,
    SessionPause,
    SessionResume,
)
ClientEvent = Annotated[Union[_CLIENT_MODELS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007
_CLIENT_EVENT = TypeAdapter(ClientEvent)
CLIENT_EVENT_TYPES = frozenset(m.model_fields["type"].annotation.__args__[0] for m in _CLIENT_MODELS)


class ProtocolError(Exception):
    """A client event we cannot accept; becomes an ``error`` event, the session goes on."""

    def __init__(self, message: str, *, code: str = "invalid_request_error", param: str | None = None,
                 event_id: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.param, self.event_id = message, code, param, event_id


def parse_client_event(data: Any) -> ClientEvent:
    """Parse one decoded JSON message; raises ``ProtocolError`` with a precise reason."""
    if not isinstance(data, dict):
        raise ProtocolError("each message must be a JSON object")
    kind = data.get("type")
    ev_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    if not isinstance(kind, str):
        raise ProtocolError("missing string field 'type'", param="type", event_id=ev_id)
    if kind not in CLIENT_EVENT_TYPES:
        raise ProtocolError(f"unknown event type {kind!r}", code="invalid_event_type", param="type", event_id=ev_id)
    try:
        return _CLIENT_EVENT.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"][1:]) or "event"
        raise ProtocolError(f"{kind}: {loc}: {err['msg']}", param=loc, event_id=ev_id) from None


# --------------------------------------------------------------------------- extensions

# ``session.metrics.stages``: where a turn's time went, in the order it passes (each ``<stage>_ms``):
# the wait after the voice until the turn is decided, recognition, the model's first words, its first audio.
TURN_STAGES = ("end_of_turn", "asr", "llm", "tts")

EXTENSION_EVENTS = frozenset({
    "queue.position", "queue.assigned", "session.recording", "session.metrics", "session.paused",
    "session.resumed", "input_image_buffer.appended", "input_audio_buffer.backchannel", "response.resumed",
    "session.resume_token", "session.reattached",
})
# A client that asks for ``resume`` (or ``session.resume_token``) can come back after its connection
# drops (issue 72). Not part of ``all``: a token changes what a drop does (the worker slot is held for
# the grace period), so a client asks for it by name, knowing.
RESUME_EVENTS = frozenset({"session.resume_token", "session.reattached"})
EXTENSION_GROUPS = {"all": EXTENSION_EVENTS - RESUME_EVENTS, "queue": frozenset({"queue.position", "queue.assigned"}),
                    "resume": RESUME_EVENTS}


def parse_extensions(value: str | None) -> tuple[frozenset[str], list[str]]:
    """The extension events a client asked for (``?extensions=queue,session.metrics`` or ``all``),
    and the names it gave that we do not know."""
    wanted: set[str] = set()
    unknown: list[str] = []
    for name in (n.strip() for n in (value or "").split(",")):
        if not name:
            continue
        if name in EXTENSION_GROUPS:
            wanted |= EXTENSION_GROUPS[name]
        elif name in EXTENSION_EVENTS:
            wanted.add(name)
        else:
            unknown.append(name)
    return frozenset(wanted), unknown


def unknown_extensions_error(unknown: list[str]) -> dict[str, Any]:
    known = ", ".join(sorted(EXTENSION_EVENTS | set(EXTENSION_GROUPS)))
    return error_event(f"unknown extension {', '.join(repr(u) for u in unknown)} ignored; known: {known}",
                       "unknown_extension", param="extensions")


# --------------------------------------------------------------------------- dialects


class Dialect:
    """Event names and session shapes of the GA API, or of the beta (``realtime=v1``)."""

    def __init__(self, beta: bool) -> None:
        self.beta = beta
        self.audio_delta = "response.audio.delta" if beta else "response.output_audio.delta"
        self.audio_done = "response.audio.done" if beta else "response.output_audio.done"
        self.transcript_delta = "response.audio_transcript.delta" if beta else "response.output_audio_transcript.delta"
        self.transcript_done = "response.audio_transcript.done" if beta else "response.output_audio_transcript.done"
        self.text_delta = "response.text.delta" if beta else "response.output_text.delta"
        self.text_done = "response.text.done" if beta else "response.output_text.done"
        self.item_added = "conversation.item.created" if beta else "conversation.item.added"

    @property
    def name(self) -> str:
        return "beta" if self.beta else "ga"


def server_event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": event_id(), **fields}


def error_event(message: str, code: str = "invalid_request_error", param: str | None = None,
                client_event_id: str | None = None, kind: str = "invalid_request_error") -> dict[str, Any]:
    return server_event(
        "error",
        error={"type": kind, "code": code, "message": message, "param": param, "event_id": client_event_id},
    )


