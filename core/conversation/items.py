"""The conversation's items, as OpenAI's Realtime API has them: ids, order, types, roles, content.

An ``Item`` holds what every backend may need of it: its text (typed text, a transcript, or a
backend's note on an image), user speech (16 kHz float32), images (as the backend prepared them)
and their original bytes, plus the content parts in the client's order (so the protocol layer
can echo an item exactly as it was created). Each backend renders the items its own way (a chat
prompt, a model's multimodal messages, a request to a remote engine).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from core.ids import new_id

Role = Literal["system", "user", "assistant"]
ItemType = Literal["message", "function_call", "function_call_output", "mcp_list_tools", "mcp_call",
                   "mcp_approval_request", "mcp_approval_response"]
MCP_ITEM_TYPES = ("mcp_list_tools", "mcp_call", "mcp_approval_request", "mcp_approval_response")
PartKind = Literal["text", "audio", "image"]
ROOT = "root"  # previous_item_id that places an item first


@dataclass(slots=True)
class Part:
    """One content part: typed text, or audio with its transcript (None until known), or an image."""

    kind: PartKind
    text: str | None = None


@dataclass(slots=True)
class Item:
    """One history entry. Messages carry content; function calls carry ``call_id``, ``name`` and
    ``arguments``; function call outputs carry ``call_id`` and ``output``. MCP items
    (``mcp_tools.py``) carry ``server_label``; a call its ``name`` (the server's tool name),
    ``arguments``, ``output`` or ``error``; a listing its ``tools``; an approval response
    ``approval_request_id``, ``approve`` and ``reason``."""

    role: Role
    text: str = ""
    audio: np.ndarray | None = None
    images: list[Any] = field(default_factory=list)  # as the backend prepared them (PIL images, notes)
    image_bytes: list[bytes] = field(default_factory=list)  # the originals (remote engines get these)
    item_id: str = field(default_factory=lambda: new_id("item"))
    type: ItemType = "message"
    parts: list[Part] = field(default_factory=list)
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    server_label: str | None = None
    error: dict | None = None
    tools: list[dict] | None = None
    approval_request_id: str | None = None
    approve: bool | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.type == "message" and not self.parts:
            self.parts = [Part("audio" if self.audio is not None else "text", self.text)]

    def set_transcript(self, transcript: str) -> None:
        """The words of this item's speech: a transcript, or what was heard of a reply."""
        for part in self.parts:
            if part.kind == "audio" or (part.kind == "text" and self.role == "assistant"):
                part.text = transcript
        self.refresh_text()

    @property
    def text_besides_audio(self) -> str:
        """What a model that hears the item's audio should also read: the typed text parts (the
        transcript is for display); with no audio, all of ``text``."""
        if self.audio is None:
            return self.text
        return " ".join(p.text.strip() for p in self.parts if p.kind == "text" and p.text and p.text.strip())

    def refresh_text(self) -> None:
        """``text`` (what a text model reads) from the parts: typed text, transcripts, image notes."""
        self.text = " ".join(p.text.strip() for p in self.parts if p.text and p.text.strip())


@dataclass(slots=True)
class HistoryMessage:
    """A read-only view of an item for callers outside the core (REST, tests)."""

    role: Role
    content: str
    item_id: str = field(default_factory=lambda: new_id("item"))


class ItemHistory:
    """The ordered items of one conversation, oldest dropped beyond ``limit``."""

    def __init__(self) -> None:
        self._items: list[Item] = []

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item_id: str) -> bool:
        return self.get(item_id) is not None

    def snapshot(self) -> list[Item]:
        return list(self._items)

    def append(self, item: Item, limit: int) -> Item:
        return self.insert(item, None, limit)

    def insert(self, item: Item, previous_item_id: str | None, limit: int) -> Item:
        """Place ``item`` after ``previous_item_id`` (``ROOT``: first; None: last). The caller has
        checked that the previous item exists."""
        if previous_item_id is None:
            self._items.append(item)
        elif previous_item_id == ROOT:
            self._items.insert(0, item)
        else:
            at = next(i for i, x in enumerate(self._items) if x.item_id == previous_item_id)
            self._items.insert(at + 1, item)
        while len(self._items) > limit:
            self._items.pop(0)
        return item

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self._items if i.item_id == item_id), None)

    def previous_id(self, item_id: str) -> str | None:
        """The id of the item before ``item_id`` (None if it is first or absent)."""
        for before, item in zip([None, *self._items], self._items):
            if item.item_id == item_id:
                return before.item_id if before is not None else None
        return None

    def last_id(self) -> str | None:
        return self._items[-1].item_id if self._items else None

    def remove(self, item_id: str) -> bool:
        item = self.get(item_id)
        if item is None:
            return False
        self._items.remove(item)
        return True

    def messages(self) -> list[HistoryMessage]:
        return [HistoryMessage(i.role, i.text, i.item_id) for i in self._items if i.type == "message"]
