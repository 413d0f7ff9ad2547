"""Saved, shareable chat transcripts: ``POST /api/shares`` and ``GET /api/shares/{id}``.

A share is a JSON file ``<data_dir>/shares/<id>.json``. The id is ``secrets.token_urlsafe(16)``
(128 random bits), so links cannot be guessed, and it is the only part of a path that comes
from the client: anything not matching the token pattern is a 404 before the disk is touched.
Files are written atomically (temp file + ``os.replace``) in a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.files import atomic_write_bytes

MAX_SHARE_BYTES = 1_000_000
MAX_SHARES = 10_000  # a public endpoint must not be able to fill the disk
SHARE_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # token_urlsafe(16): 16 bytes -> 22 base64url chars
PAGE = "/turnbased.html"


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


class Share(ShareIn):
    id: str
    created_at: AwareDatetime


class ShareCreated(BaseModel):
    id: str
    url: str


class ShareStore:
    def __init__(self, data_dir: Path) -> None:
        self.dir = Path(data_dir) / "shares"

    def path(self, share_id: str) -> Path | None:
        """The file for a well-formed id; ``None`` for anything else (no traversal possible)."""
        return self.dir / f"{share_id}.json" if SHARE_ID.fullmatch(share_id) else None

    def save(self, share: Share) -> None:
        """Blocking; call it in a thread."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if sum(1 for e in os.scandir(self.dir) if e.name.endswith(".json")) >= MAX_SHARES:
            raise HTTPException(507, f"share storage is full ({MAX_SHARES} shares); ask the operator to prune it")
        target = self.path(share.id)
        assert target is not None
        # Readers see the whole file or none of it.
        atomic_write_bytes(target, share.model_dump_json(exclude_none=True).encode(), durable=True)

    def load(self, share_id: str) -> bytes | None:
        """Blocking; the stored JSON, or ``None`` if there is no such share."""
        path = self.path(share_id)
        if path is None:
            return None
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None


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


def shares_router(data_dir: Path) -> APIRouter:
    router = APIRouter()
    store = ShareStore(data_dir)

    @router.post("/api/shares", status_code=201, response_model=ShareCreated)
    async def create_share(request: Request) -> ShareCreated:
        # The body is read by hand so the size limit holds before any JSON parsing.
        body = await _read_limited(request, MAX_SHARE_BYTES)
        try:
            data = ShareIn.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False, include_context=False)) from None
        share = Share(id=secrets.token_urlsafe(16), created_at=datetime.now(UTC), **dict(data))
        await asyncio.to_thread(store.save, share)
        return ShareCreated(id=share.id, url=f"{PAGE}?share={share.id}")

    @router.get("/api/shares/{share_id}")
    async def get_share(share_id: str) -> Response:
        raw = await asyncio.to_thread(store.load, share_id)
        if raw is None:
            raise HTTPException(404, "no such shared conversation")
        try:
            return JSONResponse(json.loads(raw), headers={"Cache-Control": "private, max-age=300"})
        except ValueError:
            raise HTTPException(500, "the stored conversation is damaged") from None

    return router
