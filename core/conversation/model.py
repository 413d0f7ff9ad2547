"""What the conversation core needs of a model: ``ConversationModel``, which every backend
(``core.processors.base.Backend``) implements, and ``ModelCapabilities``, what one can do.

The core depends only on this module, never on ``core.processors``: a backend is handed in.
"""

from __future__ import annotations

import concurrent.futures
import enum
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from core.conversation.end_of_turn import MessageEnd
from core.conversation.items import Item
from core.conversation.reply import ReplyJob, ReplyStats


class Capability(str, enum.Enum):
    """What a model takes and gives, as a worker reports it on ``/health`` (the gateway matches a
    client's ``capabilities=`` requirements against these names)."""

    AUDIO_INPUT = "audio_input"
    AUDIO_OUTPUT = "audio_output"
    TEXT_OUTPUT = "text_output"
    IMAGE_INPUT = "image_input"
    VIDEO_INPUT = "video_input"
    DUPLEX = "duplex"


@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """What a model can do, and how it takes part in a conversation (frozen: a backend sets it
    once, from its options, when it is built).

    The first six fields are the ``Capability`` names; the rest steer the conversation core.
    """

    audio_input: bool = False
    audio_output: bool = False
    text_output: bool = False
    image_input: bool = False
    video_input: bool = False
    duplex: bool = False
    # A text model reads the user's words: each turn is transcribed before the reply (and a turn
    # with no words dropped). An omni model hears the clip itself.
    transcript_first: bool = False
    # Transcript-first: start the reply at a pause in speech, held until the turn ends.
    speculative_reply: bool = False
    # Audio items: the client gets a transcript of the user's speech for display.
    transcribes_input: bool = True
    # semantic_vad: the reply's own prefill scores the user's words (``job.end_of_message``), so
    # the turn costs no extra model pass.
    scores_turn_in_reply: bool = False
    # Replies can call functions (``session.tools``); a model that cannot refuses tools.
    supports_tools: bool = False
    max_frames: int = 1  # latest camera frames given to each reply
    turn_detection_types: tuple[str, ...] = ("server_vad", "semantic_vad")

    @classmethod
    def of(cls, *offered: Capability, **flags: Any) -> ModelCapabilities:
        """``of(Capability.AUDIO_INPUT, ..., transcript_first=True)``."""
        return cls(**{c.value: True for c in offered}, **flags)

    @property
    def offered(self) -> frozenset[Capability]:
        return frozenset(c for c in Capability if getattr(self, c.value))

    def wire(self) -> list[str]:
        """The names a worker's ``/health`` reports (sorted)."""
        return sorted(c.value for c in self.offered)


assert {f.name for f in fields(ModelCapabilities)} >= {c.value for c in Capability}


class ConversationModel(Protocol):
    """The model a ``Conversation`` runs on: only what differs by model.

    Blocking methods run in the executors named here, never on the event loop: ``io_pool``
    (resampling, VAD, image preparation), ``transcribe_pool`` (``transcribe_turn``) and
    ``turn_scorer_pool`` (``end_of_message_probability``).
    """

    name: str
    capabilities: ModelCapabilities
    vad_model: Any  # Silero's ``step`` interface (``core/conversation/vad.py``)

    # Where the core runs the model's blocking calls (executors the runtime owns).
    io_pool: concurrent.futures.Executor
    transcribe_pool: concurrent.futures.Executor
    turn_scorer_pool: concurrent.futures.Executor
    glance_pool: concurrent.futures.Executor  # ``transcribe_glance``
    audio_chunk_ms: int  # reply audio leaves in pieces of this length
    default_instructions: str | None  # the system prompt when the session sets none
    context_tokens: int | None  # prompt and reply together may take this many tokens (None: not known)

    async def generate_reply(self, job: ReplyJob) -> ReplyStats:
        """Stream one reply through ``job`` until done or ``job.cancel`` is set (``reply.py``)."""
        ...

    def read_ahead(self, job: ReplyJob) -> None:
        """Read the words heard so far of a turn still going on (``job``'s last item) into the
        model state, so its reply prefills only the rest; returns at once, best effort."""
        ...

    def transcribe_turn(self, audio: np.ndarray) -> str | None:
        """Transcript of one user utterance (16 kHz float32), or None; a ``HeardText`` also says
        how sure the recogniser is of the last word."""
        ...

    def transcribe_glance(self, audio: np.ndarray) -> str | None:
        """The first words of a short clip, fast; None without a fast recogniser (runs in
        ``glance_pool``)."""
        ...

    def end_of_message_probability(self, text: str) -> MessageEnd | float | None:
        """P(a user message ending with ``text`` is complete), or None without a model to ask."""
        ...

    def prepare_image(self, data: bytes) -> Any:
        """An image (JPEG/PNG bytes) as the model takes it."""
        ...

    def image_text(self, prepared: Any) -> str:
        """The text an image item stands for in the history."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as the model reads it (an estimate without a cheap tokenizer); on the loop."""
        ...

    def item_tokens(self, item: Item) -> int:
        """Tokens a history item costs a reply (``truncation.py``); on the loop, so cheap."""
        ...

    def check_tools(self, tools: list) -> None:
        """Raise ``InvalidInputError`` for tools this model cannot honour."""
        ...

    def resolve_voice(self, voice: str | None) -> str | None: ...

    def new_model_state(self) -> Any:
        """Per-conversation model state the replies share (``job.state``)."""
        ...

    def release_model_state(self, state: Any) -> None: ...

    def turn_policy(self, parts: Any) -> Any:
        """This model's own turn policy (a ``TurnPolicy``) for a conversation made of ``parts``
        (``ConversationParts``), or None for the standard one (``VadTurns``): a model that
        decides when to speak (MiniCPM-o's duplex) supplies one."""
        ...
