"""Who is the operator: the admin token, exchanged at sign-in for a session cookie.

- API clients send the token itself: ``Authorization: Bearer <token>`` (compared in constant time).
- A browser signs in once (the form on ``/admin``, or ``?token=`` on an admin or recording page,
  which then redirects, 303, to the same address without it: the token stays out of the address
  bar, history and ``Referer``). It gets ``omni_admin``: a random session id (HttpOnly,
  SameSite=Strict, Secure unless plain http to loopback: ``cookie_secure``) that expires after
  ``admin.session_hours``. Only a hash of the id is kept, in this process's memory: sign-out
  deletes it, and a restart (which is also how a new token takes effect) ends every session.
- The token in a URL is not accepted by the APIs (``/api/admin/*``, ``/api/sessions/*``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from urllib.parse import urlencode

from fastapi.responses import RedirectResponse
from starlette.requests import Request
from starlette.responses import Response

from core.config import is_loopback

COOKIE = "omni_admin"
MAX_SESSIONS = 1000  # sign-ins kept at once; the oldest goes first


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class AdminAuth:
    def __init__(self, admin_token: str, session_s: float, clock=time.time, *,
                 secure_cookie: bool | None = None, trust_forwarded_proto: bool = False) -> None:
        self._token = admin_token.encode()
        self.session_s = session_s
        self.clock = clock
        self.secure_cookie = secure_cookie  # admin.secure_cookie: None = auto
        self.trust_forwarded_proto = trust_forwarded_proto  # auth.trust_forwarded_for
        self._sessions: dict[str, float] = {}  # sha256(session id) -> expiry (epoch s)

    # ---------------------------------------------------------------- checks

    def token_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(token.encode(), self._token)

    @staticmethod
    def bearer(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        return auth[7:].strip() or None if auth[:7].lower() == "bearer " else None

    def session_ok(self, request: Request) -> bool:
        session_id = request.cookies.get(COOKIE)
        if not session_id or len(session_id) > 100:
            return False
        key = _digest(session_id)
        expiry = self._sessions.get(key)
        if expiry is None:
            return False
        if expiry <= self.clock():
            self._sessions.pop(key, None)
            return False
        return True

    def is_admin(self, request: Request) -> tuple[bool, bool]:
        """(admin, by the cookie): the Bearer token or a live sign-in."""
        if self.token_ok(self.bearer(request)):
            return True, False
        if self.session_ok(request):
            return True, True
        return False, False

    @property
    def active_sessions(self) -> int:
        now = self.clock()
        return sum(expiry > now for expiry in self._sessions.values())

    def cookie_secure(self, request: Request) -> bool:
        """Secure unless plain http to a loopback host. Behind a TLS proxy the gateway sees http
        while the browser used https, so the scheme alone would let the cookie travel in clear on
        a later http request; only loopback over http, where browsers allow it and local tests sign
        in, goes without. A trusted ``X-Forwarded-Proto: https`` (a proxy on the same host) counts."""
        if self.secure_cookie is not None:
            return self.secure_cookie
        if request.url.scheme == "https" or not is_loopback(request.url.hostname or ""):
            return True
        if not self.trust_forwarded_proto:
            return False
        # Any hop that saw https is enough: this only ever adds Secure.
        lines = request.headers.getlist("x-forwarded-proto")
        return "https" in (p.strip().lower() for line in lines for p in line.split(","))

    # ---------------------------------------------------------------- sign-in and out

    def login(self, request: Request, response: Response) -> None:
        """A new session; its cookie goes on ``response``."""
        now = self.clock()
        for key in [k for k, expiry in self._sessions.items() if expiry <= now]:
            del self._sessions[key]
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        session_id = secrets.token_urlsafe(32)
        self._sessions[_digest(session_id)] = now + self.session_s
        response.set_cookie(COOKIE, session_id, max_age=int(self.session_s), httponly=True, samesite="strict",
                            path="/", secure=self.cookie_secure(request))

    def logout(self, request: Request, response: Response) -> None:
        session_id = request.cookies.get(COOKIE)
        if session_id:
            self._sessions.pop(_digest(session_id), None)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict",
                               secure=self.cookie_secure(request))

    def query_login(self, request: Request) -> Response | None:
        """``GET page?token=<admin token>``: sign in and 303 to the same address without the token.
        None when the query holds no token, or not the admin's (a share token, a wrong one)."""
        if request.method not in ("GET", "HEAD") or not self.token_ok(request.query_params.get("token")):
            return None
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})
        self.login(request, response)
        return response
