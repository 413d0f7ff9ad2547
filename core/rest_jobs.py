"""The internal REST contract between gateway and worker (not public; see docs/protocol.md).

The gateway turns OpenAI-shaped requests into these backend-neutral jobs, so the worker needs
no knowledge of the public API and the gateway none of the models or media. Media stays base64
text on the way through: only the worker decodes it, in a thread.

Chat replies come back as NDJSON lines (``ChatEvent`` dicts):
``{"type": "text", "delta"}``, ``{"type": "audio", "data"}`` (base64 PCM16 24 kHz, streamed
jobs), ``{"type": "audio_file", "data", "format"}`` (whole encoded reply, non-streamed jobs),
``{"type": "error", "code", "message"}``, function calls as ``{"type": "call", "index", "call_id",
"name"}`` then ``{"type": "call_arguments", "index", "delta"}`` pieces, then always one final
``{"type": "done", ..., "calls": [{"call_id", "name", "arguments"}]}``.
Errors found before the reply starts are an HTTP 4xx with ``{"error": {...}}`` instead.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Defined here, not in core.media, so the gateway can name formats without importing numpy.
SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


ChatAudioFormat = Literal["wav", "mp3", "flac", "opus", "aac", "pcm16"]
CHAT_PATH = "/internal/v1/chat"
SPEECH_PATH = "/internal/v1/speech"
TRANSCRIPTION_PATH = "/internal/v1/transcriptions"
REQUEST_ID_HEADER = "x-request-id"
# The gateway's word that a request's client left: the worker stops that request's work and
# answers once the request's slot is free (the gateway releases its lease only then).
RELEASE_PATH = "/internal/v1/release"


class _Job(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatPart(_Job):
    """One piece of a message. ``param`` names it in the public request, for error messages."""

    type: Literal["text", "image", "audio"]
    text: str | None = None
    data: str | None = None  # base64 (image: JPEG/PNG/...; audio: a whole file)
    param: str = "messages"


class ChatToolCall(_Job):
    """A function call an earlier assistant message made (``arguments``: a JSON string)."""

    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=64)
    arguments: str = Field("", max_length=64 * 1024)


class ChatTool(_Job):
    """A function the reply may call (``parameters``: its arguments' JSON schema)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field("", max_length=4096)
    parameters: dict = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ChatMessage(_Job):
    """A message; an assistant's may carry ``tool_calls``; a ``tool`` message is the output
    (its text parts) of the call ``call_id``."""

    role: Literal["system", "user", "assistant", "tool"]
    parts: list[ChatPart] = Field(default_factory=list)
    tool_calls: list[ChatToolCall] = Field(default_factory=list)
    call_id: str | None = None


class ChatJob(_Job):
    messages: list[ChatMessage] = Field(min_length=1)
    instructions: str | None = None
    output_audio: bool = False
    audio_format: ChatAudioFormat = "wav"
    voice: str | None = None
    stream: bool = False
    max_output_tokens: int = Field(160, ge=1, le=4096)
    temperature: float = Field(0.3, ge=0.0, le=2.0)
    tools: list[ChatTool] = Field(default_factory=list, max_length=64)
    tool_choice: str = "auto"  # "auto" | "none" | "required" | the name of one function


class SpeechJob(_Job):
    input: str = Field(min_length=1, max_length=4096)
    voice: str | None = None
    speed: float = Field(1.0, ge=0.25, le=4.0)
    response_format: SpeechFormat = "wav"
