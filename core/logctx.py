"""Session-scoped log lines: ``session=<id> worker=<id>`` on every line logged inside a session.

The ids live in context variables, so every task a session spawns (asyncio copies the context
into new tasks) logs them without passing them around. A filter on the root handlers renders
them into ``%(ctx)s``; lines outside a session get an empty ``ctx``.
"""

from __future__ import annotations

import contextvars
import logging

SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("omni_session", default=None)
WORKER: contextvars.ContextVar[str | None] = contextvars.ContextVar("omni_worker", default=None)


def bind(session: str | None = None, worker: str | None = None) -> None:
    """Set the ids for the current task (and the tasks it creates from now on)."""
    if session is not None:
        SESSION.set(session)
    if worker is not None:
        WORKER.set(worker)


def context_text() -> str:
    parts = []
    if (s := SESSION.get()) is not None:
        parts.append(f"session={s}")
    if (w := WORKER.get()) is not None:
        parts.append(f"worker={w}")
    return " ".join(parts)


class ContextFilter(logging.Filter):
    """Adds ``record.ctx`` (``" session=... worker=..."`` or ``""``) and the raw ids."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = context_text()
        record.ctx = f" {text}" if text else ""
        record.session_id = SESSION.get()
        record.worker_id = WORKER.get()
        return True


def setup_logging(process: str, level: int = logging.INFO) -> None:
    """Root logging for a gateway or worker process, with the session context on each line."""
    logging.basicConfig(
        level=level, format=f"%(asctime)s {process} %(levelname)s %(name)s:%(ctx)s %(message)s",
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
