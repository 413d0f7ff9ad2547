"""``/api/admin/workers``: list, add, remove, disable, enable, mark dead. The pool does the work;
an enabled or new worker is probed at once (seeds/002), not left waiting a round."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.datastructures import State

from gateway.admin.views import AdminViews

WORKER_ACTIONS = ("disable", "enable", "dead")


class AddWorker(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=8, max_length=300)
    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,40}$")
    slots: int = Field(1, ge=1, le=64)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        parts = urlsplit(v.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be http(s)://host:port")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("url must be a plain base URL (no query, fragment or credentials)")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError("url has an invalid port") from None
        return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def workers_api(state: State, views: AdminViews) -> APIRouter:
    router = APIRouter()
    pool = views.pool
    probes: set[asyncio.Task] = set()

    def probe_now(worker) -> None:
        task = asyncio.create_task(state.checker.probe(worker))
        probes.add(task)
        task.add_done_callback(probes.discard)

    def get_worker(worker_id: str):
        worker = pool.get_worker(worker_id)
        if worker is None:
            raise HTTPException(404, f"no worker {worker_id!r}")
        return worker

    @router.get("/api/admin/workers")
    async def list_workers() -> dict[str, Any]:
        return {"workers": [views.worker(w) for w in pool.workers()]}

    @router.post("/api/admin/workers", status_code=201)
    async def add_worker(body: AddWorker) -> dict[str, Any]:
        try:
            worker = await pool.admin_add_worker(body.url, worker_id=body.id, slots=body.slots)
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None
        await state.checker.start()  # no-op if running; its supervisor starts the probe loop
        probe_now(worker)
        return views.worker(worker)

    @router.delete("/api/admin/workers/{worker_id}")
    async def remove_worker(worker_id: str) -> dict[str, Any]:
        worker = get_worker(worker_id)
        running = list(worker.sessions)
        await pool.admin_remove_worker(worker_id)
        return {"removed": worker_id, "sessions_still_running": running}

    @router.post("/api/admin/workers/{worker_id}/{action}")
    async def worker_action(worker_id: str, action: str) -> dict[str, Any]:
        if action not in WORKER_ACTIONS:
            raise HTTPException(404, f"unknown action {action!r}; use one of {', '.join(WORKER_ACTIONS)}")
        get_worker(worker_id)
        if action == "disable":
            await pool.admin_set_disabled(worker_id, True)
        elif action == "enable":
            await pool.admin_set_disabled(worker_id, False)
            probe_now(get_worker(worker_id))
        else:
            await pool.admin_mark_dead(worker_id)
        return views.worker(get_worker(worker_id))

    return router
