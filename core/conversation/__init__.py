"""The model-independent conversation core every backend runs on (see ``conversation.py``).

- ``config``: per-session settings (``ConversationConfig``, ``TurnDetection``);
- ``items``: the history, with OpenAI item semantics;
- ``model``: what the core needs of a model (``ConversationModel``, ``ModelCapabilities``);
- ``audio_input``: input buffering and VAD (``vad``: Silero, streaming);
- ``end_of_turn``: semantic_vad's end-of-turn score and wait;
- ``reply``: one reply's request and output channel (``ReplyJob``), audio segments, truncation;
- ``events``: what the conversation emits, in order;
- ``conversation``: one session's conversation, composed of parts that own their state:
  ``hearing`` (input, VAD, transcripts, glances, end of turn), the turn policy (``turn_policy``;
  the standard ``vad_turns``: turns, overlap judgement, barge-in, resume), ``replies`` (responses,
  cuts, truncation) and ``tools`` (function and MCP calls), over a shared ``runtime``.
"""

from core.conversation.config import ConversationConfig, TurnDetection
from core.conversation.conversation import Conversation, ConversationParts, ConversationStats
from core.conversation.events import (
    AudioChunk,
    Backchannel,
    CancelResult,
    ConversationError,
    ConversationEvent,
    InputCommitted,
    InputTranscript,
    ItemTruncated,
    ResponseDone,
    ResponseResumed,
    ResponseStarted,
    SpeechStarted,
    SpeechStopped,
    TextDelta,
)
from core.conversation.items import HistoryMessage, Item
from core.conversation.reply import ReplyJob, ReplyStats, Response, Segment, heard_text
from core.conversation.turn_policy import TurnPolicy

__all__ = [
    "AudioChunk", "Backchannel", "CancelResult", "Conversation", "ConversationConfig", "ConversationError",
    "ConversationParts",
    "ConversationEvent", "ConversationStats", "HistoryMessage", "InputCommitted", "InputTranscript",
    "Item", "ItemTruncated", "ReplyJob", "ReplyStats", "Response", "ResponseDone", "ResponseResumed", "ResponseStarted", "Segment",
    "SpeechStarted", "SpeechStopped", "TextDelta", "TurnDetection", "TurnPolicy", "heard_text",
]
