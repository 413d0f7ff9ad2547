"""``/api/apps``: what the browser pages ask before they open a session.

Which apps the operator has switched on (``gateway/admin/settings.py`` keeps them), and whether
sessions need an API key; public, since the pages read it before anyone signs in.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.access.policy import Access
from gateway.admin.settings import SettingsStore


def apps_router(settings: SettingsStore, access: Access) -> APIRouter:
    router = APIRouter()

    @router.get("/api/apps")
    async def apps() -> dict[str, Any]:
        """For the pages: which apps are on, and whether sessions need an API key."""
        return {"apps": [a.model_dump() for a in settings.apps()], "api_key_required": access.keys_required}

    return router
