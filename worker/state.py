"""A worker's state as its health endpoint reports it: load progress, sessions and slots.

States: LOADING -> IDLE <-> BUSY_HALF_DUPLEX / DUPLEX_ACTIVE <-> DUPLEX_PAUSED; any -> ERROR.
Shared by the app (``worker/app.py``) and its REST jobs (``worker/rest.py``).
"""

from __future__ import annotations

import time
from typing import Any

from core.processors.base import LoadProgress


class WorkerState:
    def __init__(self, worker_id: str, slots: int) -> None:
        self.worker_id = worker_id
        self.slots = slots
        self.state = "LOADING"
        self.error: str | None = None
        self.progress = LoadProgress("starting", 0.0)
        self.sessions: dict[str, str] = {}  # session id -> session state
        # Resumable sessions (issue 72), attached or held: session id -> (its Reattachable, the session)
        self.resumable: dict[str, tuple[Any, Any]] = {}
        self.started = time.time()
        self.backend = None

    def health(self) -> dict[str, Any]:
        backend = self.backend
        return {
            **(backend.health_detail() if backend is not None else {}),
            "worker_id": self.worker_id,
            "state": self.state,
            "model_loaded": bool(backend is not None and backend.loaded and self.state != "ERROR"),
            "load_progress": {"stage": self.progress.stage, "fraction": round(self.progress.fraction, 3),
                              "detail": self.progress.detail},
            "error": self.error,
            "active_sessions": len(self.sessions),
            "sessions": dict(self.sessions),
            "slots": self.slots,
            "capabilities": backend.capabilities.wire() if backend is not None else [],
            "backend": backend.name if backend is not None else None,
            "uptime_s": round(time.time() - self.started, 1),
        }

    def refresh(self) -> None:
        if self.state in ("LOADING", "ERROR"):
            return
        states = set(self.sessions.values())
        for s in ("DUPLEX_ACTIVE", "BUSY_HALF_DUPLEX", "DUPLEX_PAUSED"):
            if s in states:
                self.state = s
                return
        self.state = "IDLE"
