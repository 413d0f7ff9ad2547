"""Where recorded sessions live and who may read them.

One directory per session, ``<data_dir>/sessions/<id>/``; the id carries 128 random bits and
the share token another 128, of which only a SHA-256 is stored, so a leaked directory listing
or backup does not hand out links. Used by the worker's recorder, the gateway's viewer and
cleanup, which may run on different hosts over a shared path.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.files import read_json

SESSION_ID = re.compile(r"^sess_[0-9a-f]{32}$")
META = "meta.json"
RECORDING = "recording.json"
REPLAY_WAV = "merged_replay.wav"
REPLAY_MP4 = "merged_replay.mp4"
MEDIA_DIRS = ("user_audio", "user_frames", "user_images", "ai_audio")
STORED_SESSION = "stored_session.json"  # a stored Live session's history and config, for its forks


def new_session_id() -> str:
    return f"sess_{secrets.token_hex(16)}"


def new_share_token() -> str:
    return secrets.token_urlsafe(16)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str | None, stored_hash: str | None) -> bool:
    if not token or not stored_hash:
        return False
    return hmac.compare_digest(token_hash(token), stored_hash)


def sessions_root(data_dir: str | Path) -> Path:
    return Path(data_dir) / "sessions"


def session_dir(data_dir: str | Path, session_id: str) -> Path | None:
    """The directory of a well-formed id (never a path built from arbitrary input), else None."""
    if not SESSION_ID.match(session_id or ""):
        return None
    return sessions_root(data_dir) / session_id


@dataclass
class StoredSession:
    id: str
    path: Path
    meta: dict[str, Any]
    size_bytes: int
    last_write: float  # epoch seconds of the newest file

    @property
    def status(self) -> str:
        return str(self.meta.get("status", "unknown"))

    @property
    def started_at(self) -> float:
        return float(self.meta.get("started_at_epoch") or self.last_write)

    def is_live(self, max_session_s: float, now: float | None = None) -> bool:
        """Still being recorded: marked live and written to within the longest possible session.

        A worker killed mid-session leaves ``live`` in meta.json; once no file has changed for
        longer than any session may last, it cannot be running any more.
        """
        now = time.time() if now is None else now
        return self.status == "live" and now - self.last_write <= max_session_s + 60


def scan_session(path: Path) -> StoredSession | None:
    """Size, newest write and meta of one session directory (blocking: call in a thread)."""
    if not SESSION_ID.match(path.name) or not path.is_dir():
        return None
    size = 0
    newest = path.stat().st_mtime
    for f in path.rglob("*"):
        try:
            st = f.stat()
        except FileNotFoundError:
            continue
        if f.is_file():
            size += st.st_size
            newest = max(newest, st.st_mtime)
    try:
        meta = read_json(path / META)
    except (OSError, ValueError):
        meta = {}
    return StoredSession(path.name, path, meta if isinstance(meta, dict) else {}, size, newest)


def list_sessions(data_dir: str | Path) -> list[StoredSession]:
    root = sessions_root(data_dir)
    if not root.is_dir():
        return []
    out = [s for p in root.iterdir() if (s := scan_session(p)) is not None]
    out.sort(key=lambda s: s.started_at, reverse=True)
    return out


def read_stored_session(data_dir: str | Path, session_id: str | None, owner: str | None = None,
                        check_owner: bool = False, load: bool = True) -> tuple[dict[str, Any], dict[str, Any] | None] | str:
    """(meta, stored document) of a closed, stored session (Live ``store: true``) that ``owner``
    opened, or why not (blocking: call in a thread). One answer for "none" and "another key's".
    ``load=False``: the document is only looked for (None in its place; the gateway's check,
    the worker reads it)."""
    path = session_dir(data_dir, session_id or "")
    if path is None:
        return "not_found"
    try:
        meta = read_json(path / META)
    except (OSError, ValueError):
        return "not_found"
    if not isinstance(meta, dict) or (check_owner and meta.get("owner") != owner):
        return "not_found"
    if meta.get("status") != "finished":
        return "not_closed"
    if not load:
        return (meta, None) if (path / STORED_SESSION).is_file() else "not_stored"
    try:
        doc = read_json(path / STORED_SESSION)
    except (OSError, ValueError):
        return "not_stored"
    return (meta, doc) if isinstance(doc, dict) else "not_stored"
