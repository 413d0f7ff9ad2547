"""The conversation's items, as OpenAI's Realtime API has them: ids, order, roles, content.

An ``Item`` holds what every backend may need of it: its text (typed text, a transcript, or a
backend's note on an image), user speech (16 kHz float32), images (as the backend prepared them)
and their original bytes. Each backend renders the items its own way (a chat prompt, a model's
multimodal messages, a request to a remote engine).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from core.ids import new_id

Role = Literal["system", "user", "assistant"]


@dataclass(slots=True)
class Item:
    """One history entry (a ``message`` item; ``type`` leaves room for function calls)."""

    role: Role
    text: str = ""
    audio: np.ndarray | None = None
    images: list[Any] = field(default_factory=list)  # as the backend prepared them (PIL images, notes)
    image_bytes: list[bytes] = field(default_factory=list)  # the originals (remote engines get these)
    item_id: str = field(default_factory=lambda: new_id("item"))
    type: Literal["message"] = "message"


@dataclass(slots=True)
class HistoryMessage:
    """A read-only view of an item for callers outside the core (retrieve, REST, tests)."""

    role: Role
    content: str
    item_id: str = field(default_factory=lambda: new_id("item"))


class ItemHistory:
    """The ordered items of one conversation, oldest dropped beyond ``limit``."""

    def __init__(self) -> None:
        self._items: deque[Item] = deque()

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def snapshot(self) -> list[Item]:
        return list(self._items)

    def append(self, item: Item, limit: int) -> Item:
        self._items.append(item)
        while len(self._items) > limit:
            self._items.popleft()
        return item

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self._items if i.item_id == item_id), None)

    def remove(self, item_id: str) -> bool:
        item = self.get(item_id)
        if item is None:
            return False
        self._items.remove(item)
        return True

    def messages(self) -> list[HistoryMessage]:
        return [HistoryMessage(i.role, i.text, i.item_id) for i in self._items]
