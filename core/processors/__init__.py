"""Model backends behind one interface (``base.Backend``); ``create_backend`` picks one by name.

Each backend validates its own ``backend.options`` with a Pydantic model, so a typo or a bad
value stops the worker with the option's name and the reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from core.processors.base import Backend
from core.processors.threads import ModelThreads

__all__ = ["BACKENDS", "GPU_BACKENDS", "Backend", "ModelThreads", "create_backend", "wants_gpu"]

BACKENDS = ("cascade", "qwen_omni", "minicpm_o", "remote_omni")
GPU_BACKENDS = ("qwen_omni", "minicpm_o")  # one worker per visible GPU when their device is not cpu


def _options(model: type, name: str, options: dict[str, Any] | None):
    try:
        return model.model_validate(options or {})
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(options)"
            lines.append(f"backend.options.{loc}: {err['msg']}")
        raise ValueError(f"invalid options for backend {name!r}:\n  " + "\n  ".join(lines)) from None


def create_backend(
    name: str, options: dict[str, Any] | None = None, threads: ModelThreads | None = None
) -> Backend:
    """Build (but do not load) the backend called ``name``, on the runtime's ``threads`` (which the
    caller closes after the backend); without them the backend makes its own and ``close`` ends them."""
    if name == "cascade":
        from core.processors.cascade import CascadeBackend, CascadeOptions

        return CascadeBackend(CascadeOptions.model_validate(options or {}), threads)
    if name == "qwen_omni":
        from core.processors.qwen_omni import QwenOmniBackend, QwenOmniOptions

        return QwenOmniBackend(_options(QwenOmniOptions, name, options), threads)
    if name == "minicpm_o":
        from core.processors.minicpm_o import MiniCpmOBackend, MiniCpmOOptions

        return MiniCpmOBackend(_options(MiniCpmOOptions, name, options), threads)
    if name == "remote_omni":
        from core.processors.remote_omni import RemoteOmniBackend, RemoteOmniOptions

        return RemoteOmniBackend(_options(RemoteOmniOptions, name, options), threads)
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")


def wants_gpu(name: str, options: dict[str, Any] | None) -> bool:
    """Whether this backend runs one worker per GPU (supervisor): a local model not pinned to the CPU."""
    return name in GPU_BACKENDS and str((options or {}).get("device", "auto")) != "cpu"
