"""The operator's API and page: workers, queue, live sessions, apps, presets, ETA, voices, charts,
and the last hour's stage times (p50/p90 per stage of a turn).

Every ``/admin`` and ``/api/admin/*`` route answers 401 without the admin token as
``Authorization: Bearer <token>`` or a sign-in's session cookie (``gateway/admin/sessions.py``:
the page's form, or ``/admin?token=`` once, exchange the token for a random, expiring, revocable
session). A state-changing request that authenticates with the cookie must also come from our
own origin, so another site cannot drive the admin by a form.

The pool does the work (drain, enable, mark dead, add/remove, cancel); this module only checks,
translates and reports. Errors are 4xx with a reason; nothing here can leak a slot.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.json_limits import check_nesting
from gateway.admin.sessions import AdminAuth
from gateway.admin.settings import APP_IDS, SettingsStore
from gateway.pool.worker_pool import WorkerPool
from gateway.site.presets import BUILTIN_PRESETS, PRESETS_FILE, PresetFile, PresetStore

VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$")
VOICE_MAX_BYTES = 10 * 2**20
VOICE_MAX_SECONDS = 60.0
VOICES_CAPABILITY = "reference_voices"  # a backend that clones a voice from an uploaded sample
WORKER_ACTIONS = ("disable", "enable", "dead")


# --------------------------------------------------------------------------- request models


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


class AppToggle(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool


class EtaSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_s: float | None = Field(None, ge=1, le=86400, description="null = learned average")


class EndSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("ended by the operator", max_length=120)


# --------------------------------------------------------------------------- auth


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


# --------------------------------------------------------------------------- admin


def admin_router(app: FastAPI, admin_token: str, static_dir: Path) -> APIRouter:
    st = app.state
    pool: WorkerPool = st.pool
    settings: SettingsStore = st.settings
    data_dir = Path(st.config.data_dir)
    presets = PresetStore(data_dir)
    auth: AdminAuth = st.admin_auth
    require_admin = make_require_admin(auth)
    guarded = APIRouter(dependencies=[Depends(require_admin)])
    router = APIRouter()
    started = time.time()
    probes: set[asyncio.Task] = set()

    def probe_now(worker) -> None:
        """Probe at once (seeds/002: an enabled or new worker is re-checked, not left waiting a round)."""
        task = asyncio.create_task(st.checker.probe(worker))
        probes.add(task)
        task.add_done_callback(probes.discard)

    # ---------------------------------------------------------------- the page

    def admin_page() -> FileResponse:
        # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on the page's
        # own form posts (sign-out), which the cross-site check refuses. No token is in our URLs now.
        return FileResponse(static_dir / "admin.html", media_type="text/html",
                            headers={"Cache-Control": "no-store", "Referrer-Policy": "same-origin"})

    def login_page(error: str = "") -> HTMLResponse:
        return HTMLResponse(LOGIN_PAGE.replace("{error}", error), status_code=401,
                            headers={"Cache-Control": "no-store", "Referrer-Policy": "same-origin"})

    @router.get("/admin", include_in_schema=False)
    @router.get("/static/admin.html", include_in_schema=False)
    async def page(request: Request) -> Response:
        """The one route that decides who sees the admin page (``/static/...`` never serves it)."""
        # ?token=: sign in once, then the same address without it (not in history or Referer).
        redirect = auth.query_login(request)
        if redirect is not None:
            return redirect
        if request.query_params.get("token"):
            return login_page("Wrong token.")
        if not auth.is_admin(request)[0]:
            return login_page()
        return admin_page()

    @router.post("/admin/login", include_in_schema=False)
    async def login(request: Request, token: str = Form(..., max_length=200)) -> Response:
        if not auth.token_ok(token):
            return login_page("Wrong token.")
        response = RedirectResponse("/admin", status_code=303)
        auth.login(request, response)
        return response

    @router.post("/admin/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        response = RedirectResponse("/admin", status_code=303)
        auth.logout(request, response)
        return response

    # ---------------------------------------------------------------- views

    def worker_view(w) -> dict[str, Any]:
        probe = w.last_probe or {}
        now = time.monotonic()
        by_ticket = st.live
        remote = {s["ticket"]: s for s in pool.remote_sessions}
        sessions = []
        for ticket, since in w.sessions.items():
            proxy = by_ticket.get(ticket)
            if proxy is not None:
                sessions.append({"ticket": ticket, "session_id": proxy.session_id, "app": proxy.app_name,
                                 "running_s": round(now - since, 1), "gateway": pool.gateway_id})
            else:
                other = remote.get(ticket, {})
                sessions.append({"ticket": ticket, "session_id": other.get("session_id"),
                                 "app": other.get("app", "rest"), "running_s": round(now - since, 1),
                                 "gateway": other.get("gateway", pool.gateway_id)})
        return {
            "id": w.id, "url": w.url, "health": w.health.value, "available": w.available,
            "state": probe.get("state"), "load_progress": probe.get("load_progress"),
            "backend": probe.get("backend"), "uptime_s": probe.get("uptime_s"),
            "slots": w.slots, "busy": w.busy, "sessions": sessions,
            "capabilities": sorted(w.capabilities), "failures_total": w.failures_total,
            "fail_streak": w.fail_streak, "ok_streak": w.ok_streak, "last_error": w.last_error,
            "added_at": w.added_at,
        }

    def queue_view() -> list[dict[str, Any]]:
        snap = pool.snapshot()["queue"]
        remote = {s["ticket"]: s for s in pool.remote_sessions}
        for entry in snap:
            proxy = st.live.get(entry["ticket"])
            other = remote.get(entry["ticket"], {})
            entry["app"] = proxy.app_name if proxy else other.get("app", "rest")
            entry["client"] = proxy.client_ip if proxy else other.get("client")
            entry.setdefault("gateway", pool.gateway_id)
        return snap

    def live_view() -> list[dict[str, Any]]:
        """This gateway's sessions, then those other gateways list in the shared state."""
        now = time.time()
        out = []
        for proxy in list(st.live.values()):
            info = proxy.info()
            info["age_s"] = round(now - info["created_at"], 1)
            info["gateway"] = pool.gateway_id
            out.append(info)
        for info in pool.remote_sessions:
            out.append({**info, "age_s": round(now - info["created_at"], 1)})
        return out

    def eta_view() -> dict[str, Any]:
        return {"session_s": pool.eta_session_s, "learned_avg_s": round(pool.avg_session_s, 1),
                "default_session_s": st.config.queue.default_session_s}

    @guarded.get("/api/admin/overview")
    async def overview() -> dict[str, Any]:
        """Everything the page shows, in one call (it polls this)."""
        workers = pool.workers()
        return {
            "workers": [worker_view(w) for w in workers],
            "queue": queue_view(),
            "live": live_view(),
            "apps": [a.model_dump() for a in settings.apps()],
            "eta": eta_view(),
            "totals": {"workers": len(workers), "healthy": sum(w.health.value == "healthy" for w in workers),
                       "slots": sum(w.slots for w in workers), "busy": sum(w.busy for w in workers),
                       "queue_length": pool.queue_length, "capacity": pool.capacity},
            "series": list(st.metrics.series)[-150:],
            "stages": st.metrics.stages.summary(),
            "uptime_s": round(time.time() - started, 1),
        }

    @guarded.get("/api/admin/series")
    async def series() -> dict[str, Any]:
        return {"step_s": 2.0, "points": list(st.metrics.series)}

    @guarded.get("/api/admin/stages")
    async def stages() -> dict[str, Any]:
        """The last hour's p50/p90 (ms) and count per stage of a turn, from the workers' session.metrics."""
        return {"window_s": st.metrics.stages.window_s, "stages": st.metrics.stages.summary()}

    # ---------------------------------------------------------------- workers

    @guarded.get("/api/admin/workers")
    async def list_workers() -> dict[str, Any]:
        return {"workers": [worker_view(w) for w in pool.workers()]}

    @guarded.post("/api/admin/workers", status_code=201)
    async def add_worker(body: AddWorker) -> dict[str, Any]:
        try:
            worker = await pool.admin_add_worker(body.url, worker_id=body.id, slots=body.slots)
        except ValueError as exc:
            raise HTTPException(409, str(exc)) from None
        await st.checker.start()  # no-op if running; its supervisor starts the probe loop
        probe_now(worker)
        return worker_view(worker)

    def get_worker(worker_id: str):
        worker = pool.get_worker(worker_id)
        if worker is None:
            raise HTTPException(404, f"no worker {worker_id!r}")
        return worker

    @guarded.delete("/api/admin/workers/{worker_id}")
    async def remove_worker(worker_id: str) -> dict[str, Any]:
        worker = get_worker(worker_id)
        running = list(worker.sessions)
        await pool.admin_remove_worker(worker_id)
        return {"removed": worker_id, "sessions_still_running": running}

    @guarded.post("/api/admin/workers/{worker_id}/{action}")
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
        return worker_view(get_worker(worker_id))

    # ---------------------------------------------------------------- queue and sessions

    @guarded.get("/api/admin/queue")
    async def queue() -> dict[str, Any]:
        return {"queue": queue_view(), "eta": eta_view()}

    @guarded.delete("/api/admin/queue/{ticket}")
    async def cancel_queued(ticket: str) -> dict[str, Any]:
        if not await pool.admin_cancel(ticket):
            raise HTTPException(404, f"no queued entry {ticket!r} (already assigned or gone)")
        return {"cancelled": ticket}

    @guarded.get("/api/admin/live")
    async def live() -> dict[str, Any]:
        return {"sessions": live_view()}

    @guarded.post("/api/admin/sessions/{session_id}/end")
    async def end_session(session_id: str, body: EndSession | None = None) -> dict[str, Any]:
        reason = (body or EndSession()).reason
        proxy = next((p for p in st.live.values() if session_id in (p.session_id, p.ticket)), None)
        if proxy is None or proxy.state == "ended":
            remote = await pool.admin_end_remote(session_id, reason)  # on another gateway?
            if remote is None:
                raise HTTPException(404, f"no live session {session_id!r}")
            return {"ending": session_id, "ticket": remote["ticket"], "state": remote["state"],
                    "gateway": remote["gateway"]}
        proxy.end_by_operator(reason)
        return {"ending": session_id, "ticket": proxy.ticket, "state": proxy.state}

    # ---------------------------------------------------------------- apps and ETA

    @guarded.get("/api/admin/apps")
    async def get_apps() -> dict[str, Any]:
        return {"apps": [a.model_dump() for a in settings.apps()]}

    @guarded.put("/api/admin/apps/{app_id}")
    async def set_app(app_id: str, body: AppToggle) -> dict[str, Any]:
        if app_id not in APP_IDS:
            raise HTTPException(404, f"no app {app_id!r}; apps: {', '.join(APP_IDS)}")
        settings.set_enabled(app_id, body.enabled)
        await asyncio.to_thread(settings.save)
        return {"apps": [a.model_dump() for a in settings.apps()]}

    @guarded.get("/api/admin/eta")
    async def get_eta() -> dict[str, Any]:
        return eta_view()

    @guarded.put("/api/admin/eta")
    async def set_eta(body: EtaSettings) -> dict[str, Any]:
        settings.settings.eta_session_s = body.session_s
        await pool.admin_set_eta(body.session_s)
        await asyncio.to_thread(settings.save)
        return eta_view()

    # ---------------------------------------------------------------- presets

    @guarded.get("/api/admin/presets")
    async def get_presets() -> dict[str, Any]:
        current = await asyncio.to_thread(presets.load)
        return current.model_dump()

    @guarded.put("/api/admin/presets")
    async def put_presets(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if len(raw) > 1_000_000:
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
        from core.files import atomic_write_bytes

        await asyncio.to_thread(atomic_write_bytes, data_dir / PRESETS_FILE, text.encode())
        return (await asyncio.to_thread(presets.load)).model_dump()

    @guarded.delete("/api/admin/presets")
    async def reset_presets() -> dict[str, Any]:
        """Back to the built-in presets (removes ``presets.json``)."""
        await asyncio.to_thread((data_dir / PRESETS_FILE).unlink, True)
        return {"presets": [p.model_dump() for p in BUILTIN_PRESETS], "source": "builtin"}

    # ---------------------------------------------------------------- reference voices

    voices_dir = data_dir / "voices"

    def voice_workers() -> list[str]:
        return [w.id for w in pool.workers() if VOICES_CAPABILITY in w.capabilities and w.health.value != "dead"]

    def need_voices() -> None:
        if not voice_workers():
            raise HTTPException(409, "this backend has no reference voices (no worker offers the "
                                f"'{VOICES_CAPABILITY}' capability); its built-in voice cannot be changed here")

    @guarded.get("/api/admin/voices")
    async def list_voices() -> dict[str, Any]:
        workers = voice_workers()
        names = await asyncio.to_thread(
            lambda: sorted(p.stem for p in voices_dir.glob("*.wav")) if voices_dir.is_dir() else [])
        return {"supported": bool(workers), "workers": workers, "voices": names if workers else []}

    @guarded.post("/api/admin/voices", status_code=201)
    async def upload_voice(name: Annotated[str, Form()], file: Annotated[UploadFile, File()]) -> dict[str, Any]:
        need_voices()
        if not VOICE_NAME.match(name):
            raise HTTPException(422, "name: letters, digits, _ and -, at most 48 characters")
        data = await file.read(VOICE_MAX_BYTES + 1)
        if len(data) > VOICE_MAX_BYTES:
            raise HTTPException(413, f"voice sample larger than {VOICE_MAX_BYTES // 2**20} MB")
        seconds = await asyncio.to_thread(_save_voice, data, voices_dir / f"{name}.wav")
        return {"name": name, "seconds": seconds}

    @guarded.delete("/api/admin/voices/{name}")
    async def delete_voice(name: str) -> dict[str, Any]:
        need_voices()
        path = voices_dir / f"{name}.wav"
        if not VOICE_NAME.match(name) or not path.is_file():
            raise HTTPException(404, f"no voice {name!r}")
        await asyncio.to_thread(path.unlink)
        return {"deleted": name}

    # Any other admin path: 401 without the token (nothing to learn), 404 with it.
    @guarded.api_route("/api/admin/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"],
                       include_in_schema=False)
    async def unknown(rest: str) -> None:
        raise HTTPException(404, f"no admin route /api/admin/{rest}")

    router.include_router(guarded)
    return router


def _save_voice(data: bytes, path: Path) -> float:
    """Decode any supported audio, keep it as 24 kHz mono PCM16 WAV (what voice-cloning backends read)."""
    import numpy as np

    from core.errors import InvalidAudioError
    from core.media import decode_audio, write_wav

    try:
        audio = decode_audio(data, rate=24000, max_seconds=VOICE_MAX_SECONDS)
    except InvalidAudioError as exc:
        raise HTTPException(422, exc.message) from None
    seconds = len(audio) / 24000
    if seconds < 1.0 or seconds > VOICE_MAX_SECONDS:
        raise HTTPException(422, f"a reference voice needs 1 to {VOICE_MAX_SECONDS:.0f} s of speech "
                                 f"(got {seconds:.1f} s)")
    write_wav(path, (np.clip(audio, -1, 1) * 32767).astype("<i2"), 24000)  # atomic
    return round(seconds, 2)


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Admin sign-in · OmniDuplex</title><link rel="stylesheet" href="/static/shared/style.css"></head>
<body><main><h1>Admin</h1>
<p class="lead">The admin page needs the operator's token: <code>admin.token</code> in config.json, or the
one generated at first start into <code>data/admin_token</code>.</p>
<form method="post" action="/admin/login" class="controls">
<label>Admin token <input name="token" type="password" autocomplete="current-password" required></label>
<button class="primary" type="submit">Sign in</button></form>
<p class="muted" role="alert">{error}</p></main></body></html>"""
