"""What a reply reads of the conversation: the items after the instructions, kept under the
model's input limit (OpenAI's ``session.truncation``; the settings are ``config.Truncation``).

The limit is the backend's ``context_tokens`` less this reply's ``max_output_tokens`` and the
instructions (with the tools' definitions), which are always kept; ``token_limits.post_instructions``
lowers it. When the items come to more than the limit:

- ``auto``: the oldest items are dropped until ``AUTO_RETENTION`` of the limit is used. Dropping
  only until the rest fits would drop again at every turn from then on, and each drop changes
  the prompt's start: the cascade re-read its whole ~1400-token prompt each turn (prefill ~2.3 s
  against ~0.2 s). With room left, the prefix (the KV cache) lasts several turns;
- ``retention_ratio``: the oldest are dropped until ``retention_ratio`` of the limit is used, so
  the next truncation comes many turns later and the prompt's prefix (a backend's KV cache) lasts;
- ``disabled``: nothing is dropped and the reply fails (``context_length_exceeded``).

A function call and its output go together. The newest item always stays: when it alone is over
the limit, ``auto`` and ``retention_ratio`` still keep it (the backend's own limit then decides;
the cascade cuts nothing of it either), ``disabled`` fails. Items dropped from the history are gone
from the conversation, as the ``max_history_messages`` bound drops them (no event says so).

Tokens are the backend's count (``ConversationModel.item_tokens``, ``count_tokens``): the
cascade counts with its LLM's tokenizer; backends without a cheap tokenizer estimate about four
characters a token, ``AUDIO_TOKENS_PER_S`` for speech and ``IMAGE_TOKENS`` an image
(``estimate_item_tokens``). Items are counted newest first and no further back than the limit,
each once (its count is kept until its content changes): a reply over a long history costs what
it keeps, not a re-tokenization of everything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from core.conversation.audio_input import VAD_RATE
from core.conversation.config import ConversationConfig
from core.conversation.items import Item

CHARS_PER_TOKEN = 4  # English text, for backends whose tokenizer is not at hand
MESSAGE_OVERHEAD = 4  # a chat template's markers around each message (ChatML: 5 or 6)
AUDIO_TOKENS_PER_S = 25  # Whisper-style audio encoders after pooling (Qwen2.5-Omni, MiniCPM-o): 40 ms a token
IMAGE_TOKENS = 1024  # a ~1000 px image in Qwen2.5-Omni's 28 px patches (MiniCPM-o takes fewer)

AUTO_RETENTION = 0.8  # ``auto`` keeps this share of the limit when it drops (see the docstring)


def estimate_text_tokens(text: str) -> int:
    """About four characters a token (English prose; code and other scripts take more)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def item_text(item: Item) -> str:
    """What a model reads of an item: a message's text, a call's name and arguments, an output."""
    if item.type == "function_call":
        return f"{item.name or ''}({item.arguments or ''})"
    if item.type == "function_call_output":
        return item.output or ""
    if item.type in ("mcp_call", "mcp_approval_request"):  # read as a call and its result (mcp_tools.for_model)
        result = item.output if item.error is None else str(item.error.get("message", ""))
        return f"{item.name or ''}({item.arguments or ''}) {result or ''}"
    return item.text  # an MCP listing or approval answer: nothing the model reads


def estimate_item_tokens(item: Item, count_tokens: Callable[[str], int] = estimate_text_tokens, *,
                         audio_tokens_per_s: float = AUDIO_TOKENS_PER_S, image_tokens: int = IMAGE_TOKENS,
                         message_tokens: int = MESSAGE_OVERHEAD) -> int:
    """An item's tokens: its text (``count_tokens``), the template's markers, its speech and images."""
    tokens = message_tokens + count_tokens(item_text(item))
    if item.audio is not None:
        tokens += int(item.audio.size / VAD_RATE * audio_tokens_per_s + 0.5)
    return tokens + image_tokens * len(item.images)


@dataclass(slots=True)
class Fit:
    """A reply's context: the items it reads, those dropped (oldest first), and why it cannot run."""

    items: list[Item]
    dropped: list[Item] = field(default_factory=list)
    tokens: int = 0  # what ``items`` come to
    limit: int | None = None  # tokens allowed after the instructions (None: no known limit)
    error: str | None = None  # the reply cannot fit (truncation disabled)


class ContextWindow:
    """Counts a conversation's tokens and decides what each reply reads. One per conversation."""

    def __init__(self, model) -> None:
        self._model = model  # ConversationModel: ``context_tokens``, ``item_tokens``, ``count_tokens``
        self._counts: dict[str, tuple[tuple, int]] = {}  # item id -> (what was counted, tokens)
        self._fixed: tuple[str, int] = ("", 0)  # the instructions (and tools) last counted

    def item_tokens(self, item: Item) -> int:
        key = (item.type, item.text, item.arguments, item.output, None if item.audio is None else item.audio.size,
               len(item.images))
        known = self._counts.get(item.item_id)
        if known is not None and known[0] == key:
            return known[1]
        tokens = self._model.item_tokens(item)
        self._counts[item.item_id] = (key, tokens)
        return tokens

    def instruction_tokens(self, system: str, cfg: ConversationConfig) -> int:
        """The instructions and the tools' definitions, with the markers of the system turn and of
        the reply's own: what every reply's prompt holds besides the items."""
        text = system + (json.dumps([t.model_dump() for t in cfg.tools]) if cfg.tools else "")
        if self._fixed[0] != text:
            markers = 2 * getattr(self._model, "message_tokens", MESSAGE_OVERHEAD)
            self._fixed = (text, self._model.count_tokens(text) + markers)
        return self._fixed[1]

    def limit(self, system: str, cfg: ConversationConfig) -> int | None:
        """Tokens the items may take in this reply (None: the model's context is not known)."""
        limit = None
        context = self._model.context_tokens
        if context is not None:
            limit = context - cfg.max_output_tokens - self.instruction_tokens(system, cfg)
        post = cfg.truncation.post_instructions
        if post is not None:
            limit = post if limit is None else min(limit, post)
        return limit

    def fit(self, items: list[Item], system: str, cfg: ConversationConfig) -> Fit:
        """What a reply with ``system`` and ``cfg`` reads of ``items`` (oldest first). Counted newest
        first, and no further back than the limit: linear in what is kept, not in the history."""
        limit = self.limit(system, cfg)
        self._forget(items)
        if limit is None or not items:
            return Fit(list(items), limit=limit)
        rule = cfg.truncation
        target = int(limit * (rule.retention_ratio if rule.type == "retention_ratio" else AUTO_RETENTION))
        total = 0
        keep_from = len(items) - 1  # the newest always stays
        for index in range(len(items) - 1, -1, -1):
            total += self.item_tokens(items[index])
            if total > limit:
                break
            if total <= target:
                keep_from = index
        else:
            return Fit(list(items), tokens=total, limit=limit)
        if rule.type == "disabled":
            return Fit(list(items), tokens=total, limit=limit, error=(
                f"the conversation comes to more than this reply's limit of {max(limit, 0)} tokens after the "
                f"instructions (the model's context of {self._model.context_tokens} less the instructions and "
                f"max_output_tokens {cfg.max_output_tokens}, or token_limits.post_instructions) and truncation "
                "is disabled: delete items, or set truncation to 'auto' or a retention_ratio"))
        kept, dropped = _pairs_together(items, keep_from)
        return Fit(kept, dropped, sum(self.item_tokens(i) for i in kept), limit)

    def _forget(self, items: list[Item]) -> None:
        if len(self._counts) > 2 * len(items) + 64:
            present = {i.item_id for i in items}
            self._counts = {k: v for k, v in self._counts.items() if k in present}


def _is_call(item: Item) -> bool:
    return item.call_id is not None and item.type in ("function_call", "function_call_output")


def _pairs_together(items: list[Item], keep_from: int) -> tuple[list[Item], list[Item]]:
    """(kept, dropped): ``items[keep_from:]`` kept, except a call or output whose partner is
    dropped; the newest item's partner stays wherever it is."""
    newest = items[-1]
    partners = {newest.call_id} if _is_call(newest) else set()
    gone = {i.call_id for i in items[:keep_from] if _is_call(i)} - partners
    kept: list[Item] = []
    dropped: list[Item] = []
    for n, item in enumerate(items):
        if _is_call(item) and item.call_id in partners:
            kept.append(item)
        elif n < keep_from or (_is_call(item) and item.call_id in gone):
            dropped.append(item)
        else:
            kept.append(item)
    return kept, dropped
