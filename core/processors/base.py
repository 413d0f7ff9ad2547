"""The contract every model backend implements.

A ``Backend`` is loaded once per worker (slow; done in a thread, reporting progress) and opens
one ``Conversation`` per session. A conversation takes audio, text and images and produces a
stream of ``ConversationEvent``s. All public methods are coroutines or cheap synchronous calls:
model work happens in threads, so a worker's event loop never stalls.
"""

from __future__ import annotations

import abc
import enum
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.ids import new_id  # noqa: F401 - re-exported for the backends


class Capability(str, enum.Enum):
    AUDIO_INPUT = "audio_input"
    AUDIO_OUTPUT = "audio_output"
    TEXT_OUTPUT = "text_output"
    IMAGE_INPUT = "image_input"
    VIDEO_INPUT = "video_input"
    DUPLEX = "duplex"




# --------------------------------------------------------------------------- configuration


class TurnDetection(BaseModel):
    """Server-side voice activity detection (``server_vad``), or ``model_duplex``: the model hears
    the stream continuously and decides itself when to speak (MiniCPM-o); VAD then only reports
    speech start/stop. Backends list what they support in ``turn_detection_types``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad", "model_duplex"] = "server_vad"
    threshold: float = Field(0.5, ge=0.05, le=0.95)
    prefix_padding_ms: int = Field(300, ge=0, le=2000)
    silence_duration_ms: int = Field(500, ge=100, le=5000)
    create_response: bool = True
    interrupt_response: bool = True


class ConversationConfig(BaseModel):
    """Per-session settings; the realtime layer maps ``session.update`` onto this."""

    model_config = ConfigDict(extra="forbid")

    instructions: str | None = None
    input_sample_rate: Literal[16000, 24000] = 24000
    turn_detection: TurnDetection | None = Field(default_factory=TurnDetection)
    output_audio: bool = True
    voice: str | None = None
    speed: float = Field(1.0, ge=0.5, le=2.0)
    temperature: float = Field(0.3, ge=0.0, le=2.0)
    max_output_tokens: int = Field(160, ge=1, le=4096)
    max_history_messages: int = Field(16, ge=2, le=256)
    transcribe_input: bool = True


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    item_id: str
    audio_start_ms: int
    type: Literal["speech_started"] = "speech_started"


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    item_id: str
    audio_end_ms: int
    type: Literal["speech_stopped"] = "speech_stopped"


@dataclass(frozen=True, slots=True)
class InputCommitted:
    """A user audio item entered the conversation (after VAD stop or an explicit commit)."""

    item_id: str
    audio_ms: int
    type: Literal["input_committed"] = "input_committed"


@dataclass(frozen=True, slots=True)
class InputTranscript:
    item_id: str
    transcript: str
    type: Literal["input_transcript"] = "input_transcript"


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    response_id: str
    item_id: str
    output_audio: bool  # per response: response.create may turn audio off for one reply
    type: Literal["response_started"] = "response_started"


@dataclass(frozen=True, slots=True)
class TextDelta:
    response_id: str
    item_id: str
    delta: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """PCM16 mono at ``sample_rate`` (always 24 kHz for replies)."""

    response_id: str
    item_id: str
    pcm: bytes
    sample_rate: int = 24000
    type: Literal["audio_chunk"] = "audio_chunk"

    @property
    def duration_ms(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate * 1000.0


@dataclass(frozen=True, slots=True)
class ResponseDone:
    """Final event of a response. ``text``/``audio_ms`` count only what was emitted."""

    response_id: str
    item_id: str
    status: Literal["completed", "cancelled", "incomplete", "failed"]
    reason: str | None
    text: str
    audio_ms: float
    output_tokens: int = 0
    prompt_tokens: int = 0
    type: Literal["response_done"] = "response_done"


@dataclass(frozen=True, slots=True)
class ConversationError:
    """A problem that belongs to the session, not to one call (e.g. ASR failed)."""

    code: str
    message: str
    type: Literal["error"] = "error"


ConversationEvent = (
    SpeechStarted
    | SpeechStopped
    | InputCommitted
    | InputTranscript
    | ResponseStarted
    | TextDelta
    | AudioChunk
    | ResponseDone
    | ConversationError
)


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What the client actually received before a cancel: needed for truncation."""

    response_id: str
    item_id: str
    text: str
    audio_ms: float


@dataclass(slots=True)
class LoadProgress:
    stage: str
    fraction: float  # 0..1 over the whole load
    detail: str = ""


ProgressCallback = Callable[[LoadProgress], None]


@dataclass(frozen=True, slots=True)
class TranscriptSegment:
    """One stretch of a transcription with its times (seconds), as Whisper reports it."""

    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    temperature: float = 0.0


@dataclass(frozen=True, slots=True)
class Transcription:
    text: str
    language: str
    duration: float  # seconds of input audio
    segments: tuple[TranscriptSegment, ...] = ()


@dataclass(slots=True)
class HistoryMessage:
    role: Literal["system", "user", "assistant"]
    content: str
    item_id: str = field(default_factory=lambda: new_id("item"))


# --------------------------------------------------------------------------- interfaces


class Conversation(abc.ABC):
    """One session's model state. Not thread-safe: call from one event loop."""

    config: ConversationConfig

    @abc.abstractmethod
    async def append_audio(self, pcm: bytes) -> None:
        """Feed PCM16 mono at ``config.input_sample_rate``; drives VAD when enabled."""

    @abc.abstractmethod
    async def commit_audio(self) -> str | None:
        """Turn buffered audio into a user item (turn-based mode); returns its item id."""

    @abc.abstractmethod
    def clear_audio(self) -> None:
        """Drop buffered, uncommitted input audio."""

    @abc.abstractmethod
    async def add_text(self, text: str, role: Literal["user", "assistant", "system"] = "user") -> str:
        """Append a text item to the history; returns its item id."""

    @abc.abstractmethod
    async def add_audio_item(self, pcm: bytes) -> tuple[str, str]:
        """Add a whole user audio clip as one item; returns (item id, transcript)."""

    @abc.abstractmethod
    def delete_item(self, item_id: str) -> bool:
        """Remove an item from the history; False if there is none with that id."""

    @abc.abstractmethod
    async def add_image(self, data: bytes, *, frame: bool = False) -> str:
        """Add an image (JPEG/PNG). ``frame`` marks a camera frame (only the latest is kept)."""

    @abc.abstractmethod
    async def create_response(
        self,
        *,
        instructions: str | None = None,
        output_audio: bool | None = None,
        max_output_tokens: int | None = None,
    ) -> str:
        """Start a reply to the history so far (optionally overriding settings for this one
        reply); returns its response id."""

    @abc.abstractmethod
    async def cancel_response(self, reason: str = "client_cancelled") -> CancelResult:
        """Stop the active reply now; raises ``NoActiveResponseError`` if there is none."""

    @abc.abstractmethod
    def truncate(self, item_id: str, audio_end_ms: int) -> str:
        """Cut an assistant item to what was heard; returns the kept text."""

    @abc.abstractmethod
    def update(self, config: ConversationConfig) -> None:
        """Apply new settings (between turns)."""

    @property
    @abc.abstractmethod
    def history(self) -> list[HistoryMessage]: ...

    @property
    @abc.abstractmethod
    def response_active(self) -> bool: ...

    @abc.abstractmethod
    def events(self) -> AsyncIterator[ConversationEvent]:
        """Every event, in order, until ``close``."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Cancel work and free resources; idempotent."""


class Backend(abc.ABC):
    """A loaded model stack. ``load`` is blocking: call it via ``asyncio.to_thread``."""

    name: str
    capabilities: frozenset[Capability]

    @abc.abstractmethod
    def load(self, progress: ProgressCallback | None = None) -> None: ...

    @property
    @abc.abstractmethod
    def loaded(self) -> bool: ...

    @abc.abstractmethod
    def open_conversation(self, config: ConversationConfig | None = None) -> Conversation:
        """Open a conversation bound to the running event loop."""

    def close(self) -> None:  # pragma: no cover - default no-op
        """Release threads and memory."""

    # One-shot requests (the REST API). Optional: a backend without them answers "unsupported".
    # Blocking: call them from a thread.

    def transcribe(
        self, samples: np.ndarray, *, language: str | None = None, prompt: str | None = None,
        temperature: float = 0.0, cancel: threading.Event | None = None,
    ) -> Transcription:
        """Transcribe 16 kHz float32 mono audio into text with timed segments; stop early (at
        the next point the model allows) once ``cancel`` is set."""
        raise NotImplementedError(f"backend {self.name} cannot transcribe")

    def synthesize(self, text: str, *, speed: float = 1.0, voice: str | None = None) -> Iterator[bytes]:
        """Speak ``text``: PCM16 mono 24 kHz chunks, the first one as early as possible."""
        raise NotImplementedError(f"backend {self.name} cannot synthesize speech")
