"""What a reply reads of the conversation: the items after the instructions, kept under the
model's input limit (OpenAI's ``session.truncation``; the settings are ``config.Truncation``).

The limit is the backend's ``context_tokens`` less this reply's ``max_output_tokens`` and the
instructions (with the tools' definitions), which are always kept; ``token_limits.post_instructions``
lowers it. When the items come to more than the limit:

- ``auto``: the oldest items are dropped until the rest fits (the next turn over the limit drops
  again, so a long session re-reads its whole prompt each turn from then on);
- ``retention_ratio``: the oldest are dropped until ``retention_ratio`` of the limit is used, so
  the next truncation comes many turns later and the prompt's prefix (a backend's KV cache) lasts;
- ``disabled``: nothing is dropped and the reply fails (``context_length_exceeded``).

A function call and its output go together. The newest item always stays: when it alone is over
the limit, ``auto`` and ``retention_ratio`` still keep it (the backend's own limit then decides;
the cascade cuts nothing of it either), ``disabled`` fails. Items dropped from the history are gone
from the conversation, as the ``max_history_messages`` bound drops them (no event: OpenAI sends
none either).

Tokens are the backend's count (``ConversationModel.item_tokens``, ``count_tokens``): the
cascade counts with its LLM's tokenizer; backends without a cheap tokenizer estimate about four
characters a token, ``AUDIO_TOKENS_PER_S`` for speech and ``IMAGE_TOKENS`` an image
(``estimate_item_tokens``). Each item is counted once (its count is kept until its content
changes), so a reply over a long history costs a sum, not a re-tokenization.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from core.conversation.audio_input import VAD_RATE
from core.conversation.config import ConversationConfig
from core.conversation.items import Item

CHARS_PER_TOKEN = 4  # English text, for backends whose tokenizer is not at hand
MESSAGE_OVERHEAD = 4  # a chat template's role markers around each message
AUDIO_TOKENS_PER_S = 25  # Whisper-style audio encoders after pooling (Qwen2.5-Omni, MiniCPM-o): 40 ms a token
IMAGE_TOKENS = 1024  # a ~1000 px image in Qwen2.5-Omni's 28 px patches (MiniCPM-o takes fewer)


def estimate_text_tokens(text: str) -> int:
    """About four characters a token (English prose; code and other scripts take more)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def item_text(item: Item) -> str:
    """What a model reads of an item: a message's text, a call's name and arguments, an output."""
    if item.type == "function_call":
        return f"{item.name or ''}({item.arguments or ''})"
    if item.type == "function_call_output":
        return item.output or ""
    return item.text


def estimate_item_tokens(item: Item, count_tokens: Callable[[str], int] = estimate_text_tokens, *,
                         audio_tokens_per_s: float = AUDIO_TOKENS_PER_S, image_tokens: int = IMAGE_TOKENS) -> int:
    """An item's tokens: its text (``count_tokens``), the template's overhead, its speech and images."""
    tokens = MESSAGE_OVERHEAD + count_tokens(item_text(item))
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
        """The instructions and the tools' definitions: what is always kept."""
        text = system + (json.dumps([t.model_dump() for t in cfg.tools]) if cfg.tools else "")
        if self._fixed[0] != text:
            self._fixed = (text, self._model.count_tokens(text))
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
        """What a reply with ``system`` and ``cfg`` reads of ``items`` (oldest first)."""
        limit = self.limit(system, cfg)
        costs = [self.item_tokens(i) for i in items]
        total = sum(costs)
        self._forget(items)
        if limit is None or total <= limit:
            return Fit(list(items), tokens=total, limit=limit)
        rule = cfg.truncation
        if rule.type == "disabled":
            return Fit(list(items), tokens=total, limit=limit, error=(
                f"the conversation comes to {total} tokens after the instructions, over this reply's limit of "
                f"{max(limit, 0)} (the model's context less the instructions and max_output_tokens "
                f"{cfg.max_output_tokens}) and truncation is disabled: delete items, or set truncation to "
                "'auto' or a retention_ratio"))
        target = limit if rule.type == "auto" else int(limit * rule.retention_ratio)
        drop = _oldest_to_drop(items, costs, total - target)
        kept = [i for i in items if i.item_id not in drop]
        dropped = [i for i in items if i.item_id in drop]
        return Fit(kept, dropped, sum(c for i, c in zip(items, costs) if i.item_id not in drop), limit)

    def _forget(self, items: list[Item]) -> None:
        if len(self._counts) > 2 * len(items) + 64:
            present = {i.item_id for i in items}
            self._counts = {k: v for k, v in self._counts.items() if k in present}


def _oldest_to_drop(items: list[Item], costs: list[int], excess: int) -> set[str]:
    """Ids of the oldest items whose tokens make up ``excess``, a call and its output together;
    never the newest item (nor its call or output)."""
    if not items:
        return set()
    newest = items[-1]
    protected = {newest.item_id}
    if newest.call_id is not None:
        protected |= {i.item_id for i in items if i.call_id == newest.call_id}
    drop: set[str] = set()
    freed = 0
    for item, cost in zip(items, costs):
        if freed >= excess:
            break
        if item.item_id in drop or item.item_id in protected:
            continue
        group = [(item, cost)]
        if item.call_id is not None and item.type in ("function_call", "function_call_output"):
            group = [(i, c) for i, c in zip(items, costs) if i.call_id == item.call_id
                     and i.type in ("function_call", "function_call_output")]
            if any(i.item_id in protected for i, _ in group):
                continue
        for i, c in group:
            if i.item_id not in drop:
                drop.add(i.item_id)
                freed += c
    return drop
