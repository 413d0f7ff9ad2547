"""Who may open a realtime session: Origin, API key, the app toggle and the rate limits.

Checked on the connection's HTTP request before the session enters the queue, the same for
every transport; each transport turns a ``Refusal`` into its own answer (a WebSocket: an error
event and a close code; an HTTP offer: a 4xx status).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from gateway.access.policy import Access
from gateway.access.rate_limits import RateLimited, SessionLimiter, Slot
from gateway.admin.settings import SettingsStore, app_of
from gateway.metrics import GatewayMetrics

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008  # auth, origin, disabled app: do not retry
CLOSE_RATE_LIMITED = 4029  # per-IP / per-key limits; retry after the time in the message


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # the error event's code
    message: str
    close_code: int  # WebSocket close code
    http_status: int  # the same refusal as an HTTP answer


class Admission:
    def __init__(self, access: Access, settings: SettingsStore, limiter: SessionLimiter,
                 metrics: GatewayMetrics) -> None:
        self.access = access
        self.settings = settings
        self.limiter = limiter
        self.metrics = metrics

    def admit(self, conn: HTTPConnection) -> Slot | Refusal:
        """A rate-limit slot (close it when the session ends), or why not."""
        refusal = self._check(conn)
        if isinstance(refusal, Refusal):
            self.metrics.rejected.labels(refusal.code).inc()
            log.info("refused realtime session from %s: %s", self.access.client_ip(conn), refusal.code)
        return refusal

    def _check(self, conn: HTTPConnection) -> Slot | Refusal:
        access = self.access
        if not access.origin_allowed(conn):
            return Refusal("origin_not_allowed", f"origin {conn.headers.get('origin')} may not open sessions here",
                           CLOSE_POLICY, 403)
        ok, key = access.check_key(conn)
        if not ok:
            return Refusal("invalid_api_key", "a valid API key is required (Authorization: Bearer <key> or the "
                           "subprotocol openai-insecure-api-key.<key>)", CLOSE_POLICY, 401)
        app_id = app_of(conn.query_params.get("app"))
        if not self.settings.enabled(app_id):
            return Refusal("app_disabled", f"the {app_id} app is disabled by the operator", CLOSE_POLICY, 403)
        try:
            return self.limiter.try_open(access.client_ip(conn), key)
        except RateLimited as exc:
            return Refusal(exc.code, exc.message, CLOSE_RATE_LIMITED, 429)
