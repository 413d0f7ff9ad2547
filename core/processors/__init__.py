"""Model backends behind one interface (``base.Backend``); ``create_backend`` picks one by name."""

from __future__ import annotations

from typing import Any

from core.processors.base import Backend


def create_backend(name: str, options: dict[str, Any] | None = None) -> Backend:
    """Build (but do not load) the backend called ``name``."""
    if name == "cascade":
        from core.processors.cascade import CascadeBackend, CascadeOptions

        return CascadeBackend(CascadeOptions.model_validate(options or {}))
    raise ValueError(f"unknown backend {name!r}; available: cascade")
