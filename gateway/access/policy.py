"""Who may use ``/v1/*``: API keys, the WebSocket Origin check and the client's address.

- API keys (``auth.api_keys``; empty = open): ``Authorization: Bearer <key>``, or for browsers,
  which cannot set headers on a WebSocket, the subprotocol ``openai-insecure-api-key.<key>``
  (what OpenAI's own browser clients send). The admin token is accepted as a key too.
- Origin: a browser always sends ``Origin`` on a WebSocket, and a page on another site cannot
  forge it, so accepting only our own origin (plus ``auth.allowed_origins``) stops other sites
  from opening sessions with a visitor's network position (cross-site WebSocket hijacking).
  Clients that are not browsers send no Origin and are not affected.

Keys are compared in constant time; a key is identified in logs and limits only by a short hash.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from core.config import AppConfig

KEY_PROTOCOL = "openai-insecure-api-key."


def key_id(key: str) -> str:
    """A stable, non-secret name for a key (for limits, metrics and logs)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def offered_protocols(conn: HTTPConnection) -> list[str]:
    raw = conn.headers.get("sec-websocket-protocol", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def presented_key(conn: HTTPConnection) -> str | None:
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    for proto in offered_protocols(conn):
        if proto.startswith(KEY_PROTOCOL):
            return proto[len(KEY_PROTOCOL):] or None
    return None


def chosen_subprotocol(conn: HTTPConnection) -> str | None:
    """The subprotocol to accept: browsers fail a handshake that offered some and got none back."""
    offered = offered_protocols(conn)
    if not offered:
        return None
    if "realtime" in offered:
        return "realtime"
    plain = [p for p in offered if not p.startswith(KEY_PROTOCOL)]
    return plain[0] if plain else offered[0]


def same_origin(conn: HTTPConnection) -> bool:
    """A browser's request from a page this gateway served: its ``Origin`` names our ``Host``
    (the scheme may differ behind a TLS proxy). False without an Origin."""
    origin = conn.headers.get("origin")
    host = (conn.headers.get("host") or "").lower()
    if not origin or not host:
        return False
    parts = urlsplit(origin.rstrip("/").lower())
    return parts.scheme in ("http", "https") and parts.netloc == host


class Access:
    def __init__(self, config: AppConfig, admin_token: str) -> None:
        self._keys = [k.encode() for k in config.auth.api_keys]
        self._admin = admin_token.encode()
        self.allowed_origins = {o.rstrip("/").lower() for o in config.auth.allowed_origins}
        self.trust_forwarded_for = config.auth.trust_forwarded_for
        self.forwarded_hops = config.auth.forwarded_hops

    @property
    def keys_required(self) -> bool:
        return bool(self._keys)

    def check_key(self, conn: HTTPConnection) -> tuple[bool, str | None]:
        """(allowed, key id). Open service: always allowed; the key id is still kept if one was sent."""
        key = presented_key(conn)
        if not self._keys:
            return True, None
        if key is None:
            return False, None
        raw = key.encode()
        ok = any(hmac.compare_digest(raw, k) for k in self._keys) or hmac.compare_digest(raw, self._admin)
        return ok, key_id(key) if ok else None

    def owns(self, conn: HTTPConnection, owner: str | None) -> bool:
        """Whether the key on ``conn`` may act on what ``owner``'s key opened (hang up or join a
        call): that same key or the admin token; anyone where it was opened without a key."""
        if owner is None:
            return True
        ok, presented = self.check_key(conn)
        return ok and (presented == owner or hmac.compare_digest((presented_key(conn) or "").encode(), self._admin))

    def origin_allowed(self, conn: HTTPConnection) -> bool:
        """No Origin (not a browser), our own, or one in ``auth.allowed_origins``: the one rule for
        every route and transport, keys or not (an open service too: a page the local user visits
        must not drive the models)."""
        origin = conn.headers.get("origin")
        if origin is None:
            return True  # not a browser
        if "*" in self.allowed_origins or origin.rstrip("/").lower() in self.allowed_origins:
            return True
        return same_origin(conn)

    def client_ip(self, conn: HTTPConnection) -> str:
        """The peer, or with ``auth.trust_forwarded_for`` the X-Forwarded-For entry ``forwarded_hops``
        from the right: proxies append, so entries left of that are whatever the client wrote.
        Every header line counts (a proxy may add a line instead of appending). Fewer entries than
        hops: the left-most, since each was written by a trusted proxy. Not an IP address: the peer."""
        peer = conn.client.host if conn.client else "unknown"
        if not self.trust_forwarded_for:
            return peer
        entries = [e.strip() for line in conn.headers.getlist("x-forwarded-for") for e in line.split(",")]
        if not entries:
            return peer
        entry = entries[max(0, len(entries) - self.forwarded_hops)]
        if len(entry) > 64:
            return peer
        try:
            return str(ipaddress.ip_address(entry))  # one spelling per address, so limits count it once
        except ValueError:
            return peer
