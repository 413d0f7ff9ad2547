"""Recorded sessions over HTTP: the viewer page, its data, replays, files, zip; admin listing.

Every route answers 404 unless the caller shows the session's share token (``?token=`` or
Bearer) or is the admin (Bearer, or a sign-in's cookie: ``gateway/admin/sessions.py``), so a
wrong token and a missing session look the same. The admin token in a viewer link
(``/s/<id>?token=<admin token>``) signs in and redirects to the link without it. Ids are matched against their pattern
before any path is built; file names against an allow-list of directories and a strict name
pattern. Disk work (reading, building a missing replay, zipping) runs in threads.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask

from core.config import AppConfig
from core.files import read_json
from core.session_store import (
    MEDIA_DIRS,
    META,
    RECORDING,
    REPLAY_MP4,
    REPLAY_WAV,
    list_sessions,
    session_dir,
    token_matches,
)
from gateway.admin.sessions import AdminAuth


def _share_token(request: Request) -> str | None:
    """A session's share token: the viewer link's ``?token=``, or Bearer for API clients."""
    return AdminAuth.bearer(request) or request.query_params.get("token") or None


FILE_NAME = re.compile(r"^[0-9]{6}\.(wav|jpg|png)$")
MEDIA_TYPES = {".wav": "audio/wav", ".jpg": "image/jpeg", ".png": "image/png", ".mp4": "video/mp4"}
PRIVATE_META = ("share_token_sha256",)


def recordings_router(config: AppConfig, auth: AdminAuth, static_dir: Path) -> APIRouter:
    router = APIRouter()
    data_dir = config.data_dir
    # One replay build per session at a time (two viewers opening a cut-off session at once).
    building: dict[str, asyncio.Lock] = {}

    def authorized(request: Request, session_id: str) -> tuple[Path, dict[str, Any]]:
        path = session_dir(data_dir, session_id)
        if path is None:
            raise HTTPException(404, "no such session")
        try:
            meta = read_json(path / META)
        except (OSError, ValueError):
            raise HTTPException(404, "no such session") from None
        if not (auth.is_admin(request)[0] or token_matches(_share_token(request), meta.get("share_token_sha256"))):
            raise HTTPException(404, "no such session")
        return path, meta

    async def authorized_async(request: Request, session_id: str) -> tuple[Path, dict[str, Any]]:
        return await asyncio.to_thread(authorized, request, session_id)

    @router.get("/s/{session_id}", include_in_schema=False)
    async def viewer(request: Request, session_id: str) -> Response:
        redirect = auth.query_login(request)  # the admin token in the link: sign in, drop it from the URL
        if redirect is not None:
            path = session_dir(data_dir, session_id)
            if path is not None and (path / META).is_file():
                return redirect
        await authorized_async(request, session_id)
        return FileResponse(static_dir / "viewer.html", media_type="text/html",
                            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})

    @router.get("/api/sessions/{session_id}")
    async def session_data(request: Request, session_id: str) -> dict[str, Any]:
        path, meta = await authorized_async(request, session_id)
        try:
            recording = await asyncio.to_thread(read_json, path / RECORDING)
        except (OSError, ValueError):
            recording = {"events": []}
        public = {k: v for k, v in meta.items() if k not in PRIVATE_META}
        files = {name: (path / name).is_file() for name in (REPLAY_WAV, REPLAY_MP4)}
        return {"meta": public, "recording": recording, "files": files}

    async def replay(request: Request, session_id: str, name: str) -> FileResponse:
        path, _ = await authorized_async(request, session_id)
        target = path / name
        if not target.is_file():
            lock = building.setdefault(session_id, asyncio.Lock())
            async with lock:
                if not target.is_file():
                    # A session cut off (worker killed) has no replay yet: build it now.
                    from core.replay import build_replays  # numpy & co. only when needed

                    try:
                        recording = await asyncio.to_thread(read_json, path / RECORDING)
                        await asyncio.to_thread(build_replays, path, recording)
                    except (OSError, ValueError):
                        pass
            building.pop(session_id, None)
        if not target.is_file():
            raise HTTPException(404, f"this session has no {name}")
        return FileResponse(target, media_type=MEDIA_TYPES[target.suffix], headers={"Cache-Control": "no-store"})

    @router.get("/api/sessions/{session_id}/replay.wav")
    async def replay_wav(request: Request, session_id: str) -> FileResponse:
        return await replay(request, session_id, REPLAY_WAV)

    @router.get("/api/sessions/{session_id}/replay.mp4")
    async def replay_mp4(request: Request, session_id: str) -> FileResponse:
        return await replay(request, session_id, REPLAY_MP4)

    @router.get("/api/sessions/{session_id}/files/{folder}/{name}")
    async def session_file(request: Request, session_id: str, folder: str, name: str) -> FileResponse:
        path, _ = await authorized_async(request, session_id)
        if folder not in MEDIA_DIRS or not FILE_NAME.match(name):
            raise HTTPException(404, "no such file")
        target = path / folder / name
        if not target.is_file():
            raise HTTPException(404, "no such file")
        return FileResponse(target, media_type=MEDIA_TYPES[target.suffix], headers={"Cache-Control": "no-store"})

    @router.get("/api/sessions/{session_id}/download.zip")
    async def download(request: Request, session_id: str) -> FileResponse:
        path, _ = await authorized_async(request, session_id)
        tmp = await asyncio.to_thread(_zip_session, path)
        return FileResponse(tmp, media_type="application/zip", filename=f"{session_id}.zip",
                            background=BackgroundTask(os.unlink, tmp))

    @router.get("/api/admin/sessions")
    async def admin_list(request: Request) -> dict[str, Any]:
        if not auth.is_admin(request)[0]:
            raise HTTPException(401, "admin token required (Authorization: Bearer <token>)")
        sessions = await asyncio.to_thread(list_sessions, data_dir)
        return {"sessions": [
            {"id": s.id, "status": "live" if s.is_live(config.limits.max_session_s) else
             ("finished" if s.status == "finished" else "interrupted"),
             "app": s.meta.get("app"), "started_at": s.meta.get("started_at"), "duration_s": s.meta.get("duration_s"),
             "end_reason": s.meta.get("end_reason"), "size_bytes": s.size_bytes}
            for s in sessions
        ]}

    return router


def _zip_session(path: Path) -> str:
    """Everything in the session directory except the stored token hash, zipped to a temp file."""
    fd, tmp = tempfile.mkstemp(prefix="omniduplex-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for f in sorted(path.rglob("*")):
            if not f.is_file() or f.name.endswith(".tmp"):
                continue
            rel = f.relative_to(path).as_posix()
            if rel == META:
                meta = read_json(f)
                for k in PRIVATE_META:
                    meta.pop(k, None)
                z.writestr(rel, json.dumps(meta, indent=1))
            else:
                z.write(f, rel, compress_type=zipfile.ZIP_STORED if f.suffix in (".jpg", ".png", ".mp4") else None)
    return tmp
