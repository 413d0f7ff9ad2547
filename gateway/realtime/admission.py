"""Who may open a realtime session: Origin, API key, the app toggle and the rate limits.

Checked on the connection's HTTP request before the session enters the queue, the same for
every transport; each transport turns a ``Refusal`` into its own answer (a WebSocket: an error
event and a close code; an HTTP offer: a 4xx status).

An ephemeral key (``ek_...``, ``gateway/access/ephemeral_keys.py``) stands for the service's key:
it is redeemed here, last (a refusal for another reason leaves it unused), and the ``Admitted``
carries its ``Grant`` (the session config it was minted with) for ``session_request``. Keys are
minted for Realtime sessions only (``/v1/realtime/client_secrets``): a Live route refuses one
(``ephemeral_key_not_allowed``) before redeeming it, so its page cannot open a session that
ignores the minted config.

Origin, keys or not: our own, one in ``auth.allowed_origins``, or none (not a browser); the same
rule as CORS (``gateway/access/cors.py``) and the web guard.

The app a session counts as (the operator's toggles): ``app_of`` (``gateway/admin/settings.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from gateway.access.ephemeral_keys import EphemeralKeys, Grant, KeyRefusal, MemoryKeys, is_ephemeral
from gateway.access.policy import Access, presented_key
from gateway.access.rate_limits import RateLimited, SessionLimiter, Slot
from gateway.admin.settings import SettingsStore, app_of
from gateway.metrics import GatewayMetrics
from gateway.pool.redis_queue import ClusterUnavailable

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008  # auth, origin, disabled app: do not retry
CLOSE_RATE_LIMITED = 4029  # per-IP / per-key limits; retry after the time in the message
CLOSE_TRY_AGAIN = 1013  # the cluster's Redis is unreachable
# The dialect of every ephemeral key: the project mints only Realtime sessions (GA and beta), and a
# Live session could not be held to a Realtime config (its own ``session.start`` configures it).
KEY_DIALECT = "realtime"


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # the error event's code
    message: str
    close_code: int  # WebSocket close code
    http_status: int  # the same refusal as an HTTP answer


@dataclass(eq=False, slots=True)
class Admitted:
    """An admitted session: its rate-limit slot (``close()`` it when the session ends) and, when it
    came with an ephemeral key, what that key grants (its session config, model and session id)."""

    slot: Slot
    grant: Grant | None = None
    key_id: str | None = None  # the service key presented (None with an ephemeral key, or none)

    @property
    def owner(self) -> str | None:
        """The API key the session belongs to: the one presented, or the one that minted its
        ephemeral key (None on an open service). Only that key may hang up or join its call."""
        return self.grant.key_id if self.grant is not None else self.key_id

    def close(self) -> None:
        self.slot.close()


class Admission:
    def __init__(self, access: Access, settings: SettingsStore, limiter: SessionLimiter,
                 metrics: GatewayMetrics, keys: EphemeralKeys | None = None) -> None:
        self.access = access
        self.settings = settings
        self.limiter = limiter
        self.metrics = metrics
        self.keys = keys if keys is not None else MemoryKeys()

    async def admit(self, conn: HTTPConnection, dialect: str = "realtime") -> Admitted | Refusal:
        """Admitted (close it when the session ends), or why not. ``dialect``: the route's,
        ``realtime`` or ``live``; an ephemeral key opens only a session of the dialect it was minted for."""
        result = await self._check(conn, dialect)
        if isinstance(result, Refusal):
            self.metrics.rejected.labels(result.code).inc()
            log.info("refused realtime session from %s: %s (%s)", self.access.client_ip(conn), result.code,
                     result.message)
        return result

    async def _check(self, conn: HTTPConnection, dialect: str) -> Admitted | Refusal:
        access = self.access
        key = presented_key(conn)
        ephemeral = is_ephemeral(key)
        if not access.origin_allowed(conn):
            return Refusal("origin_not_allowed", f"origin {conn.headers.get('origin')} may not open sessions here",
                           CLOSE_POLICY, 403)
        if ephemeral and dialect != KEY_DIALECT:
            # Refused before it is redeemed: the key still opens the Realtime session it was minted for.
            return Refusal("ephemeral_key_not_allowed", "this ephemeral key was minted for a Realtime session "
                           "(/v1/realtime/client_secrets) and opens only that: a Live session needs the service's "
                           "API key (on an open service, none)", CLOSE_POLICY, 403)
        key_id = None
        if not ephemeral:
            ok, key_id = access.check_key(conn)
            if not ok:
                return Refusal("invalid_api_key", "a valid API key is required (Authorization: Bearer <key> or the "
                               "subprotocol openai-insecure-api-key.<key>)", CLOSE_POLICY, 401)
        app_id = app_of(conn)
        if not self.settings.enabled(app_id):
            return Refusal("app_disabled", f"the {app_id} app is disabled by the operator", CLOSE_POLICY, 403)
        if ephemeral:
            # The session counts against the key that minted it (its per-key limits), as a session
            # opened with that key does: learnt without spending the key, which a refusal leaves unused.
            try:
                key_id = await self.keys.minted_by(key)
            except ClusterUnavailable as exc:
                return Refusal("cluster_unavailable", f"the ephemeral key cannot be checked now: {exc}",
                               CLOSE_TRY_AGAIN, 503)
        try:
            slot = self.limiter.try_open(access.client_ip(conn), key_id)
        except RateLimited as exc:
            return Refusal(exc.code, exc.message, CLOSE_RATE_LIMITED, 429)
        if not ephemeral:
            return Admitted(slot, key_id=key_id)
        try:
            redeemed = await self.keys.redeem(key)
        except ClusterUnavailable as exc:
            slot.close()
            return Refusal("cluster_unavailable", f"the ephemeral key cannot be checked now: {exc}", CLOSE_TRY_AGAIN,
                           503)
        except BaseException:
            slot.close()
            raise
        if isinstance(redeemed, KeyRefusal):
            slot.close()
            return Refusal("invalid_api_key", redeemed.message, CLOSE_POLICY, 401)
        log.info("session %s opened with an ephemeral key (minted by %s)", redeemed.grant.session_id,
                 redeemed.grant.key_id or "an open service")
        return Admitted(slot, redeemed.grant)
