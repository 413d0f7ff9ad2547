"""What the embedded LLM is told and how it decodes when the session says nothing else.

A 135M model answers far better with a prompt made for voice; the default instructions live
here (one system message, so the shared system-prompt KV cache holds all of it) together with
the decoding settings a spoken reply uses.
"""

from __future__ import annotations

from typing import Any

DEFAULT_INSTRUCTIONS = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def generation_settings(temperature: float, max_tokens: int) -> dict[str, Any]:
    """Keyword arguments for ``SmolLm.generate`` for one reply, from the session's settings."""
    return {"temperature": temperature, "max_tokens": max_tokens}
