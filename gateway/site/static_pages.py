"""Browser pages served by the gateway: home, turn-based chat, audio duplex and omni (camera).

Plain static files (ES modules, no build step). ``StaticFiles`` rejects path traversal, so
only files under ``static_dir`` are ever served. The admin page's HTML is never one of them,
however its path is spelled (``/static//admin.html``, ``/static/./admin.html``, ...): the file
is compared after resolving, and only the admin routes (which check the sign-in) serve it.
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

# Module scripts must be served with a JavaScript MIME type or browsers refuse them; some
# system mime tables map .js to application/javascript or nothing at all.
mimetypes.add_type("text/javascript", ".js")
mimetypes.add_type("text/javascript", ".mjs")
mimetypes.add_type("text/css", ".css")

PAGES = ("index.html", "turnbased.html", "audio_duplex.html", "omni.html")
PRIVATE = ("admin.html",)  # served only by gateway/admin/page.py, behind the admin sign-in


class PublicStatic(StaticFiles):
    """``StaticFiles`` that never serves a private file, whatever spelling reaches it."""

    def __init__(self, *, directory: Path, private: tuple[str, ...] = PRIVATE) -> None:
        super().__init__(directory=str(directory))
        self._private = {os.path.realpath(Path(directory) / name) for name in private}

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        full_path, stat_result = super().lookup_path(path)
        if full_path and os.path.realpath(full_path) in self._private:
            return "", None
        return full_path, stat_result


def pages_router(static_dir: Path) -> APIRouter:
    """Top-level HTML pages: ``/`` and ``/<page>.html`` (a fixed allow-list, no user paths)."""
    router = APIRouter()
    static_dir = Path(static_dir)

    def page(name: str) -> FileResponse:
        path = static_dir / name
        if name not in PAGES or not path.is_file():
            raise HTTPException(404)
        # no-cache: the demo is edited in place; a stale module graph is confusing.
        return FileResponse(path, media_type="text/html", headers={"Cache-Control": "no-cache"})

    @router.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return page("index.html")

    @router.get("/{name}.html", include_in_schema=False)
    async def html(name: str) -> FileResponse:
        return page(f"{name}.html")

    return router


def mount_static(app: FastAPI, static_dir: Path) -> None:
    """Assets under ``/static/...``; a router cannot mount a sub-app, so this is separate."""
    app.mount("/static", PublicStatic(directory=Path(static_dir)), name="static")


def install_pages(app: FastAPI, static_dir: Path) -> None:
    """Everything the gateway needs for the browser UI."""
    app.include_router(pages_router(static_dir))
    mount_static(app, static_dir)
