"""The admin page and its sign-in: ``/admin`` (the one route that serves ``admin.html``),
``/admin/login`` and ``/admin/logout``. Who is signed in is ``sessions.py``'s to say."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from gateway.admin.sessions import AdminAuth

# same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on the page's own
# form posts (sign-out), which the cross-site check refuses. No token is in our URLs now.
_PAGE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "same-origin"}


def page_router(auth: AdminAuth, static_dir: Path) -> APIRouter:
    router = APIRouter()

    def login_page(error: str = "") -> HTMLResponse:
        return HTMLResponse(LOGIN_PAGE.replace("{error}", error), status_code=401, headers=_PAGE_HEADERS)

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
        return FileResponse(static_dir / "admin.html", media_type="text/html", headers=_PAGE_HEADERS)

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

    return router


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
