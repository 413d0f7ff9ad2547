"""The contract every model backend implements: only what differs by model.

A ``Backend`` is loaded once per worker (slow; done in a thread, reporting progress) and opens
one ``Conversation`` per session: the model-independent core in ``core/conversation/`` (items,
turn-taking, responses, the ordered event stream). The core sees a backend only through the
``ConversationModel`` protocol it defines (``core/conversation/model.py``): a reply
(``generate_reply``: a ``ReplyJob`` in, text deltas and segmented audio out), transcripts of user
speech, images prepared the way its model takes them, and ``capabilities`` (one frozen
``ModelCapabilities``: what it takes and gives, and how it takes part in turns). Model work runs
on the threads the runtime hands it (``ModelThreads``), so a worker's event loop never stalls.
"""

from __future__ import annotations

import abc
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.conversation import Conversation, ConversationConfig, ReplyJob, ReplyStats
from core.conversation.end_of_turn import MessageEnd
from core.conversation.items import Item
from core.conversation.model import Capability, ConversationModel, ModelCapabilities
from core.conversation.truncation import (
    AUDIO_TOKENS_PER_S,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    estimate_item_tokens,
    estimate_text_tokens,
)
from core.errors import BackendNotLoadedError
from core.processors.threads import ModelThreads

__all__ = [
    "Backend", "Capability", "LoadProgress", "ModelCapabilities", "ModelThreads", "ProgressCallback",
    "TranscriptSegment", "Transcription",
]


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


class Backend(ConversationModel, abc.ABC):
    """A loaded model stack. ``load`` is blocking: call it via ``asyncio.to_thread``.

    Built with the runtime's ``ModelThreads`` (its own when none is given, then closed by
    ``close``); subclasses name the threads they need from it and set ``io_pool`` (decoding, VAD,
    resampling) and ``transcribe_pool`` (where ``transcribe_turn`` runs), and ``vad_model``
    (Silero, for turn detection) when they load.
    """

    name: str
    capabilities: ModelCapabilities = ModelCapabilities()
    voices: tuple[str, ...] = ()
    default_voice: str | None = None
    vad_model: Any = None
    io_pool: concurrent.futures.Executor
    transcribe_pool: concurrent.futures.Executor

    def __init__(self, threads: ModelThreads | None = None) -> None:
        self.threads = threads if threads is not None else ModelThreads()
        self._owns_threads = threads is None

    @abc.abstractmethod
    def load(self, progress: ProgressCallback | None = None) -> None: ...

    @property
    @abc.abstractmethod
    def loaded(self) -> bool: ...

    def open_conversation(self, config: ConversationConfig | None = None) -> Conversation:
        """Open a conversation bound to the running event loop."""
        if not self.loaded:
            raise BackendNotLoadedError("backend is not loaded yet")
        return Conversation(self, config or ConversationConfig())

    def close(self) -> None:
        """Release the model. Its threads are the runtime's: closed here only when the backend
        made them itself (built without ``threads``)."""
        if self._owns_threads:
            self.threads.close()

    def health_detail(self) -> dict[str, Any]:
        """Extra fields for the worker's ``/health`` (a remote server's state, say). Cheap: no I/O."""
        return {}

    # What the conversation core asks of a backend.

    options: Any  # the backend's own validated ``backend.options``

    @property
    def audio_chunk_ms(self) -> int:
        """Reply audio leaves in pieces of this length."""
        return self.options.audio_chunk_ms

    @property
    def default_instructions(self) -> str | None:
        """The system prompt when the session sets none."""
        return self.options.instructions

    @abc.abstractmethod
    async def generate_reply(self, job: ReplyJob) -> ReplyStats:
        """Stream one reply through ``job`` (text deltas, segmented audio) until done or
        ``job.cancel`` is set; see ``core/conversation/reply.py``."""

    def read_ahead(self, job: ReplyJob) -> None:
        """Read the user's words heard so far (``job``'s last item; the voice went on) into the
        conversation's model state, so the reply made when the turn ends prefills only the rest.
        Returns at once (the work is queued where replies run); ``job.cancel`` drops it if it has
        not begun. Default: nothing to read ahead into."""

    def transcribe_turn(self, audio: np.ndarray) -> str | None:
        """Transcript of one user utterance (16 kHz float32), or None when this backend gives
        none; a ``HeardText`` also says how sure the recogniser is of the last word
        (semantic_vad reads it). Blocking: the core runs it in ``transcribe_pool``."""
        return None

    def transcribe_glance(self, audio: np.ndarray) -> str | None:
        """The first words of a short clip, fast (tens of ms): what the overlap judge reads while
        someone speaks over the reply (``core/conversation/overlap.py``); None when this backend
        has no fast recogniser (the judge then goes by the voice's length alone)."""
        return None

    def interruption_probability(self, words: str) -> float | None:
        """How likely ``words``, said over the assistant's reply, take the floor (an interruption,
        not a backchannel), read by meaning; None when this backend has no reader (the judge then
        uses its word list). Blocking: runs in ``glance_pool`` after the glance."""
        return None

    def completion_probability(self, words: str) -> float | None:
        """How likely a user message ending with ``words`` is complete, read by meaning
        (``semantic_vad`` joins it with its score); None without a reader. Blocking: runs in
        ``glance_pool``, beside the turn's scoring, when ``reads_completion``."""
        return None

    @property
    def reads_completion(self) -> bool:
        return False

    def end_of_message_probability(self, text: str) -> MessageEnd | float | None:
        """The model's probability that a user message ending with ``text`` is complete
        (``semantic_vad``; a ``MessageEnd`` adds the probability without the last word), or None
        without a language model to ask. Blocking: the core runs it in ``turn_scorer_pool``."""
        return None

    @property
    def turn_scorer_pool(self) -> concurrent.futures.Executor:
        return self.transcribe_pool

    @property
    def glance_pool(self) -> concurrent.futures.Executor:
        """Where ``transcribe_glance`` runs (it must not wait behind a reply)."""
        return self.transcribe_pool

    def prepare_image(self, data: bytes) -> Any:
        """An image (JPEG/PNG bytes) as the model takes it. Blocking: runs in ``io_pool``."""
        raise NotImplementedError(f"backend {self.name} takes no images")

    def image_text(self, prepared: Any) -> str:
        """The text an image item stands for in the history (a text model's note on it)."""
        return ""

    # Truncation (``core/conversation/truncation.py``): the context a reply's prompt and output share,
    # and what each item costs of it. Without a tokenizer at hand, an estimate: ~4 characters a
    # token, ``audio_tokens_per_s`` of speech, ``image_tokens`` an image.
    context_tokens: int | None = None
    audio_tokens_per_s: float = AUDIO_TOKENS_PER_S
    image_tokens: int = IMAGE_TOKENS
    message_tokens: int = MESSAGE_OVERHEAD  # the chat template's markers around each message

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text``: ~4 characters a token unless the backend has its tokenizer."""
        return estimate_text_tokens(text)

    def item_tokens(self, item: Item) -> int:
        """Tokens a history item costs: its text by ``count_tokens``, plus its speech and images."""
        return estimate_item_tokens(item, self.count_tokens, audio_tokens_per_s=self.audio_tokens_per_s,
                                    image_tokens=self.image_tokens, message_tokens=self.message_tokens)

    def check_context(self, system: str, last_message: str) -> None:
        """Raise ``ContextLengthError`` when a reply to ``last_message`` with this system prompt
        cannot fit the model's context at all (older turns are dropped to fit; these two cannot
        be). Blocking (it may tokenize): call it from a thread. Default: no known limit."""

    def check_tools(self, tools: list) -> None:
        """Raise ``InvalidInputError`` for tools this backend cannot honour (checked on update)."""

    def resolve_voice(self, voice: str | None) -> str | None:
        """A voice this model has: case-insensitive match, else the default (clients such as the
        official SDK send OpenAI voice names like 'alloy'; refusing them would break the session)."""
        if voice:
            for name in self.voices:
                if name.lower() == voice.lower():
                    return name
            if not self.voices:
                return voice
        return self.default_voice

    def new_model_state(self) -> Any:
        """Per-conversation model state the replies share (a KV cache, say); ``job.state``."""
        return None

    def release_model_state(self, state: Any) -> None:
        """The conversation closed: free its state."""

    def turn_policy(self, parts: Any) -> Any:
        """This model's own turn policy for a conversation (``ConversationParts``), or None: the
        standard one (``VadTurns``: the VAD, the overlap judge, barge-in, resume)."""
        return None

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

