"""The operator's settings over the API: the apps' toggles, the queue's ETA assumption and the
pages' presets. Each change is saved atomically (``settings.json``, ``presets.json``) off the loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.files import atomic_write_bytes
from core.json_limits import check_nesting
from gateway.admin.settings import APP_IDS, SettingsStore
from gateway.admin.views import AdminViews
from gateway.site.presets import BUILTIN_PRESETS, PRESETS_FILE, PresetFile, PresetStore

PRESETS_MAX_BYTES = 1_000_000


class AppToggle(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool


class EtaSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_s: float | None = Field(None, ge=1, le=86400, description="null = learned average")


def settings_api(settings: SettingsStore, views: AdminViews, data_dir: Path) -> APIRouter:
    router = APIRouter()
    pool = views.pool
    presets = PresetStore(data_dir)

    @router.get("/api/admin/apps")
    async def get_apps() -> dict[str, Any]:
        return {"apps": [a.model_dump() for a in settings.apps()]}

    @router.put("/api/admin/apps/{app_id}")
    async def set_app(app_id: str, body: AppToggle) -> dict[str, Any]:
        if app_id not in APP_IDS:
            raise HTTPException(404, f"no app {app_id!r}; apps: {', '.join(APP_IDS)}")
        settings.set_enabled(app_id, body.enabled)
        await asyncio.to_thread(settings.save)
        return {"apps": [a.model_dump() for a in settings.apps()]}

    @router.get("/api/admin/eta")
    async def get_eta() -> dict[str, Any]:
        return views.eta()

    @router.put("/api/admin/eta")
    async def set_eta(body: EtaSettings) -> dict[str, Any]:
        settings.settings.eta_session_s = body.session_s
        await pool.admin_set_eta(body.session_s)
        await asyncio.to_thread(settings.save)
        return views.eta()

    @router.get("/api/admin/presets")
    async def get_presets() -> dict[str, Any]:
        current = await asyncio.to_thread(presets.load)
        return current.model_dump()

    @router.put("/api/admin/presets")
    async def put_presets(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if len(raw) > PRESETS_MAX_BYTES:
            raise HTTPException(413, "presets file larger than 1 MB")
        try:
            check_nesting(raw)
            data = json.loads(raw)
            if isinstance(data, list):
                data = {"presets": data}
            parsed = PresetFile.model_validate(data)
        except ValueError as exc:
            reason = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]) \
                if isinstance(exc, ValidationError) else f"not valid JSON: {exc}"
            raise HTTPException(422, reason) from None
        text = json.dumps(parsed.model_dump(), indent=1, ensure_ascii=False)
        await asyncio.to_thread(atomic_write_bytes, data_dir / PRESETS_FILE, text.encode())
        return (await asyncio.to_thread(presets.load)).model_dump()

    @router.delete("/api/admin/presets")
    async def reset_presets() -> dict[str, Any]:
        """Back to the built-in presets (removes ``presets.json``)."""
        await asyncio.to_thread((data_dir / PRESETS_FILE).unlink, True)
        return {"presets": [p.model_dump() for p in BUILTIN_PRESETS], "source": "builtin"}

    return router
