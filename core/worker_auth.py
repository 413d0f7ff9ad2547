"""The per-deployment secret between the gateway and its workers.

Every internal call (the realtime WebSocket, the REST jobs, the health probes, the launcher's own
checks, bench and test tools that talk to a worker directly) carries it as
``Authorization: Bearer <secret>``; a worker refuses a call without it (HTTP 401, or close 1008 on
its WebSocket), so a local user cannot bypass the gateway's API keys, and a worker of another
deployment that holds our port is never taken for ours.

Where it comes from, first found wins: the environment ``OMNIDUPLEX_WORKER_SECRET``, the config
``workers.secret`` (both for workers on other hosts: give every process the same value), else the
file ``<data_dir>/worker_secret`` (mode 0600), generated on first start. Processes started at the
same time (a gateway and its workers) may race to create it: the file is created with a hard link,
which fails when it exists, so every one of them ends up reading the same secret.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import tempfile
from pathlib import Path

from core.config import AppConfig

ENV = "OMNIDUPLEX_WORKER_SECRET"
FILE = "worker_secret"
INSTANCE_ENV = "OMNIDUPLEX_WORKER_INSTANCE"  # set by the launcher per start; the worker reports it on /health
MIN_LENGTH = 16


def secret_path(config: AppConfig) -> Path:
    return Path(config.data_dir) / FILE


def load_worker_secret(config: AppConfig) -> str:
    """The deployment's worker secret (see the module docstring); creates the file if needed."""
    env = os.environ.get(ENV, "").strip()
    if env:
        if len(env) < MIN_LENGTH:
            raise ValueError(f"{ENV} must be at least {MIN_LENGTH} characters")
        return env
    if config.workers.secret:
        return config.workers.secret
    path = secret_path(config)
    existing = _read(path)
    if existing is not None:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_urlsafe(32).encode())
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    found = _read(path)
    if found is None:
        raise RuntimeError(f"{path} holds no usable worker secret (at least {MIN_LENGTH} characters); "
                           "delete it to have a new one made")
    return found


def _read(path: Path) -> str | None:
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    return value if len(value) >= MIN_LENGTH else None


def auth_headers(secret: str) -> dict[str, str]:
    """The headers an internal call to a worker carries."""
    return {"Authorization": f"Bearer {secret}"}


def is_authorized(authorization: str | None, secret: str) -> bool:
    """Whether an ``Authorization`` header value carries ``secret`` (constant-time)."""
    if not authorization or not authorization[:7].lower() == "bearer ":
        return False
    return hmac.compare_digest(authorization[7:].strip().encode(), secret.encode())
