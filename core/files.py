"""Atomic file writes: readers (viewer, cleanup, a crash) see the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None, durable: bool = False) -> None:
    """Write to a temp file (created 0600) in the same directory, then rename. ``durable`` also
    fsyncs first: for files that must survive a power cut (keys, shared links); recordings skip it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
