"""Saved, shareable chat transcripts: ``POST /api/shares``, ``GET`` and ``DELETE /api/shares/{id}``.

A share is a JSON file ``<data_dir>/shares/<id>.json``. The id is ``secrets.token_urlsafe(16)``
(128 random bits), so links cannot be guessed, and it is the only part of a path that comes
from the client: anything not matching the token pattern is a 404 before the disk is touched.
Files are written atomically (temp file + ``os.replace``) in a thread, never on the event loop.

Who may do what:
- create: anyone on an open service; with ``auth.api_keys`` set, a key (or the admin token) as
  ``Authorization: Bearer``. Per client address (and per key) at most ``shares.per_ip_per_minute``
  (``per_key_per_minute``) a minute.
- read: whoever has the link, until it expires (``expires_in_days`` in the request, at most and by
  default ``shares.expiry_days``); served as JSON with ``nosniff``, never as a page.
- delete: whoever holds the share's delete token (returned once, at creation; only its SHA-256 is
  stored) or the admin token, as ``Authorization: Bearer``.
Expired shares are deleted by the recordings cleanup (``gateway/recordings/cleanup.py``), and shares
count towards ``recording.max_storage_gb`` with the recordings.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.config import AppConfig, RateLimit
from core.files import atomic_write_bytes
from gateway.access.policy import Access
from gateway.access.rate_limits import RateLimited, SessionLimiter
from gateway.admin.sessions import AdminAuth

GB = 1024**3

MAX_SHARE_BYTES = 1_000_000
MAX_SHARES = 10_000  # a public endpoint must not be able to fill the disk
SHARE_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # token_urlsafe(16): 16 bytes -> 22 base64url chars
PAGE = "/turnbased.html"
_HEAD = 1024  # the fields cleanup needs come first in a share's file
_EXPIRES = re.compile(rb'"expires_at":"([^"]+)"')
PRIVATE = ("delete_token_sha256",)  # stored, never served


class ShareMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    text: str = Field("", max_length=20_000)
    at: AwareDatetime | None = None
    # Small thumbnails only; an <img> never runs script from a data:image URL.
    image: str | None = Field(None, max_length=150_000, pattern=r"^data:image/(jpeg|png|webp);base64,[A-Za-z0-9+/]+={0,2}$")

    @model_validator(mode="after")
    def _not_empty(self) -> ShareMessage:
        if not self.text.strip() and not self.image:
            raise ValueError("a message needs text or an image")
        return self


class ShareIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=200)
    preset: str | None = Field(None, max_length=80)
    messages: list[ShareMessage] = Field(min_length=1, max_length=1000)
    expires_in_days: float | None = Field(None, gt=0, description="at most shares.expiry_days (the default)")


class ShareCreated(BaseModel):
    id: str
    url: str
    expires_at: AwareDatetime
    delete_token: str = Field(description="DELETE /api/shares/{id} with Authorization: Bearer <this>; shown once")


@dataclass
class StoredShare:
    """What cleanup needs to know of a share file."""

    id: str
    path: Path
    size_bytes: int
    created_at: float  # the file's mtime: when it was written
    expires_at: float


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _expiry(raw: bytes, mtime: float, default_days: float) -> float:
    """When a share expires: its ``expires_at``, else (written before expiry existed) mtime + the default."""
    m = _EXPIRES.search(raw)
    if m:
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(m.group(1).decode()).timestamp()
    return mtime + default_days * 86400


def list_shares(data_dir: str | Path, default_days: float) -> list[StoredShare]:
    """Every share on disk with its size and expiry (blocking; reads only each file's head)."""
    root = Path(data_dir) / "shares"
    out = []
    if not root.is_dir():
        return out
    for entry in os.scandir(root):
        name = entry.name
        if not name.endswith(".json") or not SHARE_ID.fullmatch(name[:-5]):
            continue
        try:
            st = entry.stat()
            with open(entry.path, "rb") as f:
                head = f.read(_HEAD)
        except (FileNotFoundError, NotADirectoryError):
            continue
        out.append(StoredShare(name[:-5], Path(entry.path), st.st_size, st.st_mtime,
                               _expiry(head, st.st_mtime, default_days)))
    return out


class ShareStore:
    def __init__(self, data_dir: Path, expiry_days: float = 30.0, max_bytes: float | None = None) -> None:
        self.dir = Path(data_dir) / "shares"
        self.expiry_days = expiry_days
        self.max_bytes = max_bytes  # recording.max_storage_gb: shares never fill more on their own

    def path(self, share_id: str) -> Path | None:
        """The file for a well-formed id; ``None`` for anything else (no traversal possible)."""
        return self.dir / f"{share_id}.json" if SHARE_ID.fullmatch(share_id) else None

    def save(self, share_id: str, record: dict) -> None:
        """Blocking; call it in a thread. ``record``'s first keys are what cleanup reads."""
        self.dir.mkdir(parents=True, exist_ok=True)
        data = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
        count, size = 0, 0
        for e in os.scandir(self.dir):
            if e.name.endswith(".json"):
                count += 1
                with contextlib.suppress(FileNotFoundError):
                    size += e.stat().st_size
        if count >= MAX_SHARES:
            raise HTTPException(507, f"share storage is full ({MAX_SHARES} shares); ask the operator to prune it")
        if self.max_bytes is not None and size + len(data) > self.max_bytes:
            raise HTTPException(507, "share storage is full (recording.max_storage_gb); ask the operator to prune it")
        target = self.path(share_id)
        assert target is not None
        # Readers see the whole file or none of it.
        atomic_write_bytes(target, data, durable=True)

    def load(self, share_id: str) -> dict | None:
        """Blocking; the stored share, or ``None`` if there is no such share or it has expired."""
        path = self.path(share_id)
        if path is None:
            return None
        try:
            raw = path.read_bytes()
            mtime = path.stat().st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None
        if _expiry(raw[:_HEAD], mtime, self.expiry_days) <= datetime.now(UTC).timestamp():
            return None  # cleanup deletes it; until then it is gone for readers
        try:
            record = json.loads(raw)
        except ValueError:
            raise HTTPException(500, "the stored conversation is damaged") from None
        return record if isinstance(record, dict) else None

    def delete(self, share_id: str) -> None:
        path = self.path(share_id)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


async def _read_limited(request: Request, limit: int) -> bytes:
    too_big = f"the conversation is larger than {limit / 1e6:g} MB, the limit for a share; " \
              "leave out images or share a shorter chat"
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, too_big)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, too_big)
    return bytes(body)


def shares_router(config: AppConfig, access: Access, admin: AdminAuth) -> APIRouter:
    router = APIRouter()
    cfg = config.shares
    store = ShareStore(Path(config.data_dir), cfg.expiry_days, config.recording.max_storage_gb * GB)
    limiter = SessionLimiter(RateLimit(sessions_per_minute=cfg.per_ip_per_minute),
                             RateLimit(sessions_per_minute=cfg.per_key_per_minute))

    @router.post("/api/shares", status_code=201, response_model=ShareCreated)
    async def create_share(request: Request) -> ShareCreated:
        allowed, key = access.check_key(request)
        if not allowed:
            raise HTTPException(401, "saving a share needs an API key: send it as Authorization: Bearer <key>",
                                headers={"WWW-Authenticate": "Bearer"})
        try:
            limiter.try_open(access.client_ip(request), key).close()  # a rate only: nothing stays open
        except RateLimited as exc:
            who = "this API key" if exc.message.startswith("this API key") else "this address"
            raise HTTPException(429, f"too many shares from {who}; retry in {exc.retry_after_s:.0f} s",
                                headers={"Retry-After": str(int(exc.retry_after_s + 0.999))}) from None
        # The body is read by hand so the size limit holds before any JSON parsing.
        body = await _read_limited(request, MAX_SHARE_BYTES)
        try:
            data = ShareIn.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False, include_context=False)) from None
        days = cfg.expiry_days if data.expires_in_days is None else data.expires_in_days
        if days > cfg.expiry_days:
            raise HTTPException(422, f"expires_in_days: at most {cfg.expiry_days:g} days on this server (got {days:g})")
        now = datetime.now(UTC)
        share_id, token = secrets.token_urlsafe(16), secrets.token_urlsafe(24)
        expires = now + timedelta(days=days)
        record = {  # cleanup reads the first keys only: keep expires_at near the start
            "id": share_id, "created_at": now.isoformat(), "expires_at": expires.isoformat(),
            "delete_token_sha256": _token_hash(token),
            **data.model_dump(mode="json", exclude_none=True, exclude={"expires_in_days"}),
        }
        await asyncio.to_thread(store.save, share_id, record)
        return ShareCreated(id=share_id, url=f"{PAGE}?share={share_id}", expires_at=expires, delete_token=token)

    @router.get("/api/shares/{share_id}")
    async def get_share(share_id: str) -> Response:
        record = await asyncio.to_thread(store.load, share_id)
        if record is None:
            raise HTTPException(404, "no such shared conversation (the link may have expired or been deleted)")
        for key in PRIVATE:
            record.pop(key, None)
        # Data for our page to render as text, never a document of our origin: nosniff, no framing,
        # nothing runs even if opened directly.
        return JSONResponse(record, headers={
            "Cache-Control": "private, max-age=300", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; sandbox"})

    @router.delete("/api/shares/{share_id}", status_code=204)
    async def delete_share(share_id: str, request: Request) -> Response:
        token = admin.bearer(request)
        if token is None:
            raise HTTPException(401, "deleting a share needs its delete token (given when it was made) or the "
                                "admin token, as Authorization: Bearer", headers={"WWW-Authenticate": "Bearer"})
        record = await asyncio.to_thread(store.load, share_id)
        if record is None:
            raise HTTPException(404, "no such shared conversation")
        stored = str(record.get("delete_token_sha256") or "")
        if not (admin.is_admin(request)[0] or (stored and hmac.compare_digest(_token_hash(token), stored))):
            raise HTTPException(403, "this token may not delete this share")
        await asyncio.to_thread(store.delete, share_id)
        return Response(status_code=204)

    return router
