"""The operator's API and page: workers, queue, live sessions, apps, presets, ETA, voices, charts,
and the last hour's stage times (p50/p90 per stage of a turn).

Every ``/admin`` and ``/api/admin/*`` route answers 401 without the admin token as
``Authorization: Bearer <token>`` or a sign-in's session cookie (``gateway/admin/sessions.py``:
the page's form, or ``/admin?token=`` once, exchange the token for a random, expiring, revocable
session). A state-changing request that authenticates with the cookie must also come from our
own origin, so another site cannot drive the admin by a form.

This module puts the parts together behind that check, each a router of its own job: the page and
sign-in (``page.py``), workers (``workers_api.py``), queue and live sessions (``queue_api.py``),
apps, ETA and presets (``settings_api.py``), reference voices (``voices_api.py``), and here the
overview the page polls. What they report is ``views.py``'s. The pool does the work (drain,
enable, mark dead, add/remove, cancel); the routes only check, translate and report. Errors are
4xx with a reason; nothing here can leak a slot.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request

from gateway.admin.page import page_router
from gateway.admin.queue_api import queue_api
from gateway.admin.sessions import AdminAuth
from gateway.admin.settings_api import settings_api
from gateway.admin.views import AdminViews
from gateway.admin.voices_api import voices_api
from gateway.admin.workers_api import workers_api

SERIES_POINTS_SHOWN = 150  # the overview's chart: the last 5 minutes at 2 s a point


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True  # same-origin GET-less fetches may omit it; SameSite=Strict already applies
    return urlsplit(origin).netloc.lower() == (request.headers.get("host") or "").lower()


def make_require_admin(auth: AdminAuth):
    def require_admin(request: Request) -> None:
        ok, from_cookie = auth.is_admin(request)
        if not ok:
            hint = " (not in the URL)" if request.query_params.get("token") else ""
            raise HTTPException(401, f"admin token required (Authorization: Bearer <token>{hint}, or sign in "
                                "on /admin)", headers={"WWW-Authenticate": "Bearer"})
        if from_cookie and request.method not in ("GET", "HEAD") and not _same_origin(request):
            raise HTTPException(403, "cross-site admin request refused")

    return require_admin


def admin_router(app: FastAPI, admin_token: str, static_dir: Path) -> APIRouter:
    st = app.state
    data_dir = Path(st.config.data_dir)
    auth: AdminAuth = st.admin_auth
    views = AdminViews(st)
    guarded = APIRouter(dependencies=[Depends(make_require_admin(auth))])
    guarded.include_router(overview_api(st, views, started=time.time()))
    guarded.include_router(workers_api(st, views))
    guarded.include_router(queue_api(st, views))
    guarded.include_router(settings_api(st.settings, views, data_dir))
    guarded.include_router(voices_api(st.pool, data_dir))

    # Any other admin path: 401 without the token (nothing to learn), 404 with it. Last: the
    # routes above match first.
    @guarded.api_route("/api/admin/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"],
                       include_in_schema=False)
    async def unknown(rest: str) -> None:
        raise HTTPException(404, f"no admin route /api/admin/{rest}")

    router = page_router(auth, static_dir)
    router.include_router(guarded)
    return router


def overview_api(st, views: AdminViews, started: float) -> APIRouter:
    """What the page polls, and the charts' series and stage times on their own."""
    router = APIRouter()
    pool = views.pool

    @router.get("/api/admin/overview")
    async def overview() -> dict[str, Any]:
        """Everything the page shows, in one call (it polls this)."""
        workers = pool.workers()
        return {
            "workers": [views.worker(w) for w in workers],
            "queue": views.queue(),
            "live": views.live(),
            "apps": [a.model_dump() for a in st.settings.apps()],
            "eta": views.eta(),
            "totals": {"workers": len(workers), "healthy": sum(w.health.value == "healthy" for w in workers),
                       "slots": sum(w.slots for w in workers), "busy": sum(w.busy for w in workers),
                       "queue_length": pool.queue_length, "capacity": pool.capacity},
            "series": list(st.metrics.series)[-SERIES_POINTS_SHOWN:],
            "stages": st.metrics.stages.summary(),
            "uptime_s": round(time.time() - started, 1),
        }

    @router.get("/api/admin/series")
    async def series() -> dict[str, Any]:
        return {"step_s": 2.0, "points": list(st.metrics.series)}

    @router.get("/api/admin/stages")
    async def stages() -> dict[str, Any]:
        """The last hour's p50/p90 (ms) and count per stage of a turn, from the workers' session.metrics."""
        return {"window_s": st.metrics.stages.window_s, "stages": st.metrics.stages.summary()}

    return router
