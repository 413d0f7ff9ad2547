"""``/api/admin/queue``, ``/api/admin/live`` and ending a session: the operator's view of who waits
and who runs, on this gateway or (in a cluster) another, and the two ways to stop one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import State

from gateway.admin.views import AdminViews


class EndSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("ended by the operator", max_length=120)


def queue_api(state: State, views: AdminViews) -> APIRouter:
    router = APIRouter()
    pool = views.pool

    @router.get("/api/admin/queue")
    async def queue() -> dict[str, Any]:
        return {"queue": views.queue(), "eta": views.eta()}

    @router.delete("/api/admin/queue/{ticket}")
    async def cancel_queued(ticket: str) -> dict[str, Any]:
        if not await pool.admin_cancel(ticket):
            raise HTTPException(404, f"no queued entry {ticket!r} (already assigned or gone)")
        return {"cancelled": ticket}

    @router.get("/api/admin/live")
    async def live() -> dict[str, Any]:
        return {"sessions": views.live()}

    @router.post("/api/admin/sessions/{session_id}/end")
    async def end_session(session_id: str, body: EndSession | None = None) -> dict[str, Any]:
        reason = (body or EndSession()).reason
        proxy = next((p for p in state.live.values() if session_id in (p.session_id, p.ticket)), None)
        if proxy is None or proxy.state == "ended":
            remote = await pool.admin_end_remote(session_id, reason)  # on another gateway?
            if remote is None:
                raise HTTPException(404, f"no live session {session_id!r}")
            return {"ending": session_id, "ticket": remote["ticket"], "state": remote["state"],
                    "gateway": remote["gateway"]}
        proxy.end_by_operator(reason)
        return {"ending": session_id, "ticket": proxy.ticket, "state": proxy.state}

    return router
