"""Pydantic models of the OpenAI REST requests the gateway accepts, and their translation into
the internal worker jobs (``core/rest_jobs.py``).

Fields OpenAI defines but this server cannot honour in a way that changes the answer (stop
sequences, logprobs, n > 1, JSON response formats, tools on a backend that cannot call them)
are refused with a 400 naming the field; fields that only tune sampling or bookkeeping
(``top_p``, ``seed``, ``user``, ``metadata``, ``store``, penalties, ``parallel_tool_calls``:
the models make at most one call per reply) are accepted and ignored, as are unknown fields.

Function calling: ``tools`` (function tools; ``strict`` is accepted, and arguments always
validate against the schema anyway), ``tool_choice``; an assistant message's ``tool_calls``
and the ``tool`` messages answering them become the conversation's function call items.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.rest_jobs import (
    ChatAudioFormat,
    ChatJob,
    ChatMessage,
    ChatPart,
    ChatTool,
    ChatToolCall,
    SpeechFormat,
)

MAX_TOKENS = 4096  # ConversationConfig.max_output_tokens' ceiling
DEFAULT_CHAT_TOKENS = 512  # when the request names no limit; replies end earlier on their own


class ApiError(Exception):
    """A 4xx/5xx in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.kind = kind or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------- chat


class TextPart(_Model):
    type: Literal["text"]
    text: str


class ImageUrl(_Model):
    url: str = Field(description="a data URL (data:image/png;base64,...); remote URLs are not fetched")
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Model):
    type: Literal["image_url"]
    image_url: ImageUrl


class InputAudio(_Model):
    data: str = Field(description="base64 of a whole audio file")
    format: Literal["wav", "mp3", "ogg", "webm", "flac", "m4a", "mp4", "aac"]


class AudioPart(_Model):
    type: Literal["input_audio"]
    input_audio: InputAudio


ContentPart = Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]


class SystemMessage(_Model):
    role: Literal["system", "developer"]
    content: str | list[TextPart]


class UserMessage(_Model):
    role: Literal["user"]
    content: str | list[ContentPart]


class CalledFunction(_Model):
    name: str = Field(min_length=1, max_length=64)
    arguments: str = Field("", max_length=64 * 1024, description="a JSON string")


class ToolCall(_Model):
    id: str = Field(min_length=1, max_length=256)
    type: Literal["function"] = "function"
    function: CalledFunction


class AssistantMessage(_Model):
    role: Literal["assistant"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None


class ToolMessage(_Model):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str = Field(min_length=1, max_length=256)


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]


class FunctionDefinition(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field("", max_length=4096)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = Field(None, description="accepted: arguments always validate against the schema")


class Tool(_Model):
    type: str = Field(description="only 'function'")
    function: FunctionDefinition | None = None


class NamedFunction(_Model):
    name: str = Field(min_length=1, max_length=64)


class NamedToolChoice(_Model):
    type: Literal["function"]
    function: NamedFunction


class VoiceId(_Model):
    id: str = Field(min_length=1, max_length=128)


class AudioOutput(_Model):
    voice: Annotated[str, Field(min_length=1, max_length=128)] | VoiceId
    format: ChatAudioFormat


class StreamOptions(_Model):
    include_usage: bool = False


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionRequest(_Model):
    model: str = Field(min_length=1, max_length=256)
    messages: list[Message] = Field(min_length=1, max_length=1024)
    modalities: list[Literal["text", "audio"]] | None = None
    audio: AudioOutput | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=1, description="only 1")
    stop: str | list[str] | None = Field(None, description="not supported: must be empty")
    tools: list[Tool] | None = Field(None, max_length=64)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = Field(None, description="accepted; replies make at most one call")
    logprobs: bool | None = Field(None, description="not supported: must be false")
    response_format: ResponseFormat | None = Field(None, description="only {\"type\": \"text\"}")

    @property
    def wants_audio(self) -> bool:
        return bool(self.modalities and "audio" in self.modalities)

    def check(self) -> None:
        """Rules that span fields, or refuse what this server cannot do."""
        if self.max_tokens is not None and self.max_completion_tokens is not None:  # as OpenAI answers
            raise ApiError(400, "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not "
                           "supported.", "invalid_parameter_combination", "max_tokens")
        if self.stop:
            raise ApiError(400, "stop sequences are not supported", "unsupported_parameter", "stop")
        self._check_tools()
        if self.logprobs:
            raise ApiError(400, "logprobs are not supported", "unsupported_parameter", "logprobs")
        if self.response_format is not None and self.response_format.type != "text":
            raise ApiError(400, "only response_format {\"type\": \"text\"} is supported", "unsupported_parameter",
                           "response_format")
        if self.wants_audio and self.audio is None:
            raise ApiError(400, "modalities includes 'audio', so the 'audio' parameter (voice, format) is "
                           "required", "missing_required_parameter", "audio")
        if self.wants_audio and self.stream and self.audio.format != "pcm16":
            raise ApiError(400, "streamed audio output is pcm16 only (24 kHz mono); set audio.format to 'pcm16'",
                           "unsupported_value", "audio.format")
        for i, message in enumerate(self.messages):
            parts = [] if message.content is None or isinstance(message.content, str) else message.content
            for j, part in enumerate(parts):
                if isinstance(part, ImagePart) and not part.image_url.url.startswith("data:"):
                    raise ApiError(400, "image_url must be a data URL (data:image/...;base64,...); this server "
                                   "does not fetch remote images", "invalid_image_url",
                                   f"messages[{i}].content[{j}].image_url.url")

    def _check_tools(self) -> None:
        names: set[str] = set()
        for i, tool in enumerate(self.tools or []):
            if tool.type != "function":
                raise ApiError(400, f"tools[{i}] has type {tool.type!r}; only 'function' tools are supported",
                               "invalid_value", f"tools[{i}].type")
            if tool.function is None:
                raise ApiError(400, f"Missing required parameter: 'tools[{i}].function'.",
                               "missing_required_parameter", f"tools[{i}].function")
            if tool.function.name in names:
                raise ApiError(400, f"tools[{i}] repeats the function name {tool.function.name!r}", "invalid_value",
                               f"tools[{i}].function.name")
            names.add(tool.function.name)
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise ApiError(400, f"tool_choice names the function {choice.function.name!r}, which is not among the "
                           f"tools ({', '.join(sorted(names)) or 'none given'})", "invalid_value", "tool_choice")
        if choice == "required" and not names:
            raise ApiError(400, "tool_choice 'required' needs at least one tool in 'tools'", "invalid_value",
                           "tool_choice")
        calls: set[str] = set()
        for i, message in enumerate(self.messages):
            if isinstance(message, AssistantMessage):
                calls.update(call.id for call in message.tool_calls or [])
            elif isinstance(message, ToolMessage) and message.tool_call_id not in calls:
                raise ApiError(400, f"messages[{i}] is a tool message whose tool_call_id {message.tool_call_id!r} "
                               "answers no tool call of an earlier assistant message", "invalid_value",
                               f"messages[{i}].tool_call_id")

    def requirements(self) -> frozenset[str]:
        caps = {"text_output"}
        if self.wants_audio:
            caps.add("audio_output")
        for message in self.messages:
            for part in [] if isinstance(message.content, str | None) else message.content:
                if isinstance(part, ImagePart):
                    caps.add("image_input")
                elif isinstance(part, AudioPart):
                    caps.add("audio_input")
        return frozenset(caps)

    def to_job(self) -> ChatJob:
        instructions: list[str] = []
        messages: list[ChatMessage] = []
        for i, message in enumerate(self.messages):
            if isinstance(message, SystemMessage):
                texts = [message.content] if isinstance(message.content, str) else [p.text for p in message.content]
                instructions += [t.strip() for t in texts if t.strip()]
                continue
            if isinstance(message, ToolMessage):
                texts = [message.content] if isinstance(message.content, str) else [p.text for p in message.content]
                messages.append(ChatMessage(role="tool", call_id=message.tool_call_id, parts=[
                    ChatPart(type="text", text="".join(texts), param=f"messages[{i}].content")]))
                continue
            parts = [ChatPart(type="text", text=message.content, param=f"messages[{i}].content")] \
                if isinstance(message.content, str) else []
            for j, part in enumerate([] if isinstance(message.content, str | None) else message.content):
                param = f"messages[{i}].content[{j}]"
                if isinstance(part, TextPart):
                    parts.append(ChatPart(type="text", text=part.text, param=param))
                elif isinstance(part, ImagePart):
                    parts.append(ChatPart(type="image", data=_data_url_payload(part.image_url.url, param),
                                          param=param + ".image_url.url"))
                else:
                    parts.append(ChatPart(type="audio", data=part.input_audio.data, param=param + ".input_audio"))
            calls = [ChatToolCall(call_id=c.id, name=c.function.name, arguments=c.function.arguments)
                     for c in message.tool_calls or []] if isinstance(message, AssistantMessage) else []
            messages.append(ChatMessage(role=message.role, parts=parts, tool_calls=calls))
        if not messages:
            raise ApiError(400, "messages must include at least one user or assistant message",
                           "invalid_value", "messages")
        voice = None
        if self.audio is not None:
            voice = self.audio.voice if isinstance(self.audio.voice, str) else self.audio.voice.id
        return ChatJob(
            messages=messages,
            instructions="\n\n".join(instructions) or None,
            output_audio=self.wants_audio,
            audio_format=self.audio.format if self.audio is not None else "wav",
            voice=voice,
            stream=bool(self.stream),
            max_output_tokens=self.max_completion_tokens or self.max_tokens or DEFAULT_CHAT_TOKENS,
            temperature=0.3 if self.temperature is None else self.temperature,
            tools=[ChatTool(name=t.function.name, description=t.function.description, parameters=t.function.parameters)
                   for t in self.tools or [] if t.function is not None],
            tool_choice=self.tool_choice.function.name if isinstance(self.tool_choice, NamedToolChoice)
            else self.tool_choice or "auto",
        )


def _data_url_payload(url: str, param: str) -> str:
    """The base64 payload of ``data:<mime>;base64,<payload>`` (decoded later, on the worker)."""
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise ApiError(400, "image_url must be a base64 data URL (data:image/png;base64,...)", "invalid_image_url",
                       param + ".image_url.url")
    mime = head[5:-7].lower()
    if mime and not mime.startswith("image/"):
        raise ApiError(400, f"image_url holds {mime!r}, not an image", "invalid_image_url", param + ".image_url.url")
    return payload


# --------------------------------------------------------------------------- audio


class SpeechRequest(_Model):
    model: str = Field(min_length=1, max_length=256)
    input: str = Field(min_length=1, max_length=4096)
    voice: Annotated[str, Field(min_length=1, max_length=128)] | VoiceId
    instructions: str | None = Field(None, max_length=4096, description="accepted; the embedded voice ignores it")
    response_format: SpeechFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio"] | None = Field(None, description="only 'audio' (raw bytes, chunked)")


TranscriptionFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]


class TranscriptionForm(_Model):
    """The multipart form of ``POST /v1/audio/transcriptions`` (``file`` is checked apart)."""

    model: str = Field(min_length=1, max_length=256)
    language: str | None = Field(None, max_length=16)
    prompt: str | None = Field(None, max_length=2000)
    response_format: TranscriptionFormat = "json"
    temperature: float = Field(0.0, ge=0.0, le=1.0)
    timestamp_granularities: list[Literal["segment", "word"]] = Field(default_factory=list, alias="timestamp_granularities[]")
    stream: bool = False

    def check(self) -> None:
        if "word" in self.timestamp_granularities:
            raise ApiError(400, "word timestamps are not supported; use timestamp_granularities[]=segment",
                           "unsupported_value", "timestamp_granularities[]")
        if self.stream:
            raise ApiError(400, "streamed transcription is not supported", "unsupported_parameter", "stream")


# --------------------------------------------------------------------------- OpenAPI


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with every ``$ref`` inlined, for ``openapi_extra`` request bodies.

    The routes read their bodies themselves (size limits, threads for big ones) so FastAPI does
    not see the models; an inlined schema still documents them and lets schemathesis fuzz them.
    """
    schema = model.model_json_schema(by_alias=True)
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = copy.deepcopy(defs[ref.removeprefix("#/$defs/")])
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return resolve({**target, **rest})
            return {k: resolve(v) for k, v in node.items() if k != "discriminator"}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)
