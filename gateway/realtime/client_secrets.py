"""Minting ephemeral keys: ``POST /v1/realtime/client_secrets`` (GA) and ``POST /v1/realtime/sessions``
(beta), as OpenAI has them.

An app server calls these with the service's API key (``gateway/access/middleware.py`` checks it
like any ``/v1/*`` call; an open service mints for anyone) and hands the ``ek_...`` key to a
browser, which opens one session with it (``/v1/realtime`` or ``/v1/realtime/calls``) within its
lifetime; that session starts with the config given here. Mints are rate-limited per address and
per API key at the session limits' rate (``auth.per_ip`` / ``auth.per_key``
``sessions_per_minute``), and the unused keys one API key (open service: one address) holds are
capped. The store: ``gateway/access/ephemeral_keys.py``.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from core.config import AppConfig, RateLimit
from core.session_store import new_session_id
from gateway.access.ephemeral_keys import (DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S, EphemeralKeys, Grant, KeyStoreFull,
                                           minter_of)
from gateway.access.policy import Access
from gateway.access.rate_limits import RateLimited, SessionLimiter
from gateway.pool.redis_queue import ClusterUnavailable
from gateway.realtime.minted_session import SessionConfigError, check_session, session_object
from gateway.rest.body import json_object, read_body
from gateway.rest.models import ApiError

log = logging.getLogger(__name__)

MINT_MAX_BYTES = 256 * 1024  # instructions and tools' schemas; the worker's own limit is larger
CLIENT_SECRETS_PATH = "/v1/realtime/client_secrets"
SESSIONS_PATH = "/v1/realtime/sessions"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExpiresAfter(_Strict):
    anchor: Literal["created_at"] = "created_at"
    seconds: StrictInt = DEFAULT_TTL_S


class ClientSecretRequest(_Strict):
    """GA: ``{"expires_after": {"anchor", "seconds"}, "session": {...}}`` (both optional)."""

    expires_after: ExpiresAfter | None = None
    session: dict[str, Any] | None = None


def client_secrets_router(keys: EphemeralKeys, access: Access, config: AppConfig) -> APIRouter:
    limiter = SessionLimiter(RateLimit(sessions_per_minute=config.auth.per_ip.sessions_per_minute),
                             RateLimit(sessions_per_minute=config.auth.per_key.sessions_per_minute))
    router = APIRouter(tags=["OpenAI-compatible realtime"])

    async def mint(request: Request, beta: bool) -> JSONResponse:
        """Check, store, answer; every refusal in OpenAI's error shape."""
        _, key_id = access.check_key(request)
        try:
            limiter.try_open(access.client_ip(request), key_id, "ephemeral keys").close()  # counts this mint
            body = json_object(await read_body(request, MINT_MAX_BYTES), empty={})  # all optional
            if beta:  # the body is the session; its ``client_secret.expires_after`` the lifetime
                session, model = check_session(body, beta=True, param="")
                ttl_s = _ttl(((body.get("client_secret") or {}).get("expires_after") or {}).get("seconds"),
                             "client_secret.expires_after.seconds")
            else:
                parsed = _parse_ga(body)
                ttl_s = _ttl(parsed.expires_after.seconds if parsed.expires_after else None, "expires_after.seconds")
                session, model = check_session(parsed.session or {"type": "realtime"}, beta=False)
            grant = Grant(session=session, beta=beta, model=model, session_id=new_session_id(), key_id=key_id)
            minted = await keys.mint(grant, ttl_s, minter_of(key_id, access.client_ip(request)))
        except (ApiError, SessionConfigError, RateLimited, KeyStoreFull, ClusterUnavailable) as exc:
            error = _api_error(exc)
            retry_after_s = getattr(exc, "retry_after_s", None)  # RateLimited, KeyStoreFull
            headers = {"Retry-After": str(max(1, round(retry_after_s)))} if retry_after_s is not None else None
            return JSONResponse(error.body(), status_code=error.status, headers=headers)
        log.info("minted an ephemeral key for %s (%s, %d s, session %s)", access.client_ip(request),
                 "beta" if beta else "GA", ttl_s, grant.session_id)
        obj = session_object(session, beta=beta, session_id=grant.session_id, model=model)
        if beta:
            secret = {"value": minted.value, "expires_at": minted.expires_at}
            return JSONResponse({**obj, "client_secret": secret})
        return JSONResponse({"value": minted.value, "expires_at": minted.expires_at, "session": obj})

    @router.post(CLIENT_SECRETS_PATH, summary="Mint an ephemeral key (ek_...) for one realtime session")
    async def client_secrets(request: Request) -> JSONResponse:
        return await mint(request, beta=False)

    @router.post(SESSIONS_PATH, summary="Beta: mint an ephemeral key with a beta session config")
    async def sessions(request: Request) -> JSONResponse:
        return await mint(request, beta=True)

    return router


def _api_error(exc: Exception) -> ApiError:
    """Every refusal of a mint in OpenAI's error shape."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, SessionConfigError):
        return ApiError(400, exc.message, exc.code, exc.param)
    if isinstance(exc, RateLimited):
        return ApiError(429, exc.message, exc.code, kind="rate_limit_error")
    if isinstance(exc, KeyStoreFull):
        return ApiError(429, str(exc), "too_many_keys", kind="rate_limit_error")
    return ApiError(503, str(exc), "cluster_unavailable")


def _parse_ga(body: dict[str, Any]) -> ClientSecretRequest:
    try:
        return ClientSecretRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        param = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ApiError(400, f"Unknown parameter: '{param}'.", "unknown_parameter", param) from None
        raise ApiError(400, f"Invalid value for '{param}': {err['msg']}.", "invalid_value", param) from None


def _ttl(seconds: Any, param: str) -> int:
    """The key's lifetime: 600 s by default, 10..7200 s (OpenAI's bounds and wording)."""
    if seconds is None:
        return DEFAULT_TTL_S
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise ApiError(400, f"Invalid type for '{param}': expected an integer.", "invalid_type", param)
    if seconds < MIN_TTL_S:
        raise ApiError(400, f"Invalid '{param}': integer below minimum value. Expected a value >= {MIN_TTL_S}, "
                       f"but got {seconds} instead.", "integer_below_min_value", param)
    if seconds > MAX_TTL_S:
        raise ApiError(400, f"Invalid '{param}': integer above maximum value. Expected a value <= {MAX_TTL_S}, "
                       f"but got {seconds} instead.", "integer_above_max_value", param)
    return seconds
