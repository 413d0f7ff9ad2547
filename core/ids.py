"""Random ids in the OpenAI style (``item_...``). Dependency-free so the gateway stays lean."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """96 random bits: unguessable enough for items and tickets (session ids use 128)."""
    return f"{prefix}_{secrets.token_hex(12)}"
