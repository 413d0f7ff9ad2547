"""``POST /v1/realtime/calls`` and ``POST /v1/realtime/calls/{call_id}/hangup``, as OpenAI has them.

Two ways to offer a call, both answered ``201`` with the answer SDP (``application/sdp``) and
``Location: /v1/realtime/calls/{call_id}``:

- the browser's: the offer as the body (``Content-Type: application/sdp``) with an ephemeral key
  (``Authorization: Bearer ek_...``, minted with the session config the call starts with), as the
  OpenAI Agents SDK sends it; the server's own key works here too (the ``openai`` SDK sends a raw
  offer this way when it has no session config);
- the app server's: ``multipart/form-data`` with the parts ``sdp`` and ``session`` (a GA session
  config, the one the call starts with) and the server's API key (``openai``'s
  ``client.realtime.calls.create``).

The order of checks spends nothing on a bad request: the body and the offer are checked first
(400 ``invalid_offer`` with the reason, so a bad offer does not burn an ephemeral key), then the
admission (``gateway/realtime/admission.py``: origin, key, app toggle, rate limits; its refusal's
``http_status``), then the peer connection is made and answered, and the call enters the queue
before the answer leaves: a full queue is a 429 (``queue_full``), with the call, its slot and its
ticket gone already. The query takes what ``/v1/realtime`` takes (``model``, ``extensions``,
``app``, ``record``, ``capabilities``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from core.config import AppConfig
from core.ids import new_id
from core.json_limits import loads
from gateway.access.ephemeral_keys import is_ephemeral
from gateway.access.policy import presented_key
from gateway.realtime.admission import Admission, Admitted, Refusal
from gateway.realtime.budget import InboundBudget
from gateway.realtime.minted_session import SessionConfigError, check_session
from gateway.realtime.request import SessionRequest, session_request
from gateway.realtime.resume import INVALID, Resumable, ResumeRefusal, new_resume_token
from gateway.realtime.webrtc.registry import SETTLE_S, CallRegistry
from gateway.realtime.webrtc.sdp import MAX_SDP_BYTES, Offer, check_offer
from gateway.realtime.webrtc.session import initial_update, pin_update
from gateway.rest.body import parse_multipart, read_body
from gateway.rest.models import ApiError

log = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls"
# Our extension (issue 72): a call offered with ``?extensions=resume`` is answered with its resume
# token here; a new offer with ``?resume_token=`` brings the session back after the call dropped.
RESUME_HEADER = "X-Resume-Token"
MAX_BODY_BYTES = MAX_SDP_BYTES + 256 * 1024  # the offer and a session config (instructions, tools)
# How a refusal from the queue reads as HTTP (as the REST routes answer them).
QUEUE_STATUS = {"queue_full": (429, "rate_limit_error"), "queue_timeout": (503, None),
                "no_capable_worker": (400, None), "cluster_unavailable": (503, None),
                "queue_cancelled": (503, None)}


def calls_router(registry: CallRegistry, admission: Admission, config: AppConfig) -> APIRouter:
    router = APIRouter(tags=["OpenAI-compatible realtime"])

    @router.post(CALLS_PATH, status_code=201, response_class=Response)
    async def create_call(request: Request) -> Response:
        """Answer a WebRTC offer; the call then waits in the queue like any realtime session."""
        try:
            return await _create(request, registry, admission, config)
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)

    @router.post(CALLS_PATH + "/{call_id}/hangup", response_class=Response)
    async def hangup(call_id: str, request: Request) -> Response:
        """End a call: the connection closes and its worker slot is free when this answers. Only
        the key the call belongs to (or the admin token) may; another key's call is not found."""
        if not registry.owned(call_id, functools.partial(admission.access.owns, request)) or not await registry.hangup(call_id):
            err = ApiError(404, f"no call {call_id[:80]!r} (unknown, or already ended)", "call_not_found", "call_id")
            return JSONResponse(err.body(), status_code=404)
        return Response(status_code=200)

    return router


async def load_media() -> Any:
    """``call.py`` and what it imports (aiortc, ~35 MB), loaded with the first call, in a thread: a
    gateway that never gets a call stays as lean as before."""
    return await asyncio.to_thread(importlib.import_module, "gateway.realtime.webrtc.call")


async def _offer(request: Request) -> tuple[Offer, dict[str, Any] | None]:
    """The offer and the multipart ``session`` part (None in a raw ``application/sdp`` offer)."""
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    body = await read_body(request, MAX_BODY_BYTES)
    if media == "application/sdp":
        return await check_offer(body.decode("utf-8", "replace")), None
    if media != "multipart/form-data":
        raise ApiError(400, "send the offer as application/sdp, or as multipart/form-data with the parts "
                            "'sdp' and 'session'", "invalid_content_type")
    fields, files = await parse_multipart(request, body, MAX_BODY_BYTES)
    parts = {**{k: v for k, v in fields.items() if isinstance(v, str)},
             **{k: v.decode("utf-8", "replace") for k, v in files.items()}}
    if "sdp" not in parts:
        raise ApiError(400, "Missing required parameter: 'sdp'.", "missing_required_parameter", "sdp")
    offer = await check_offer(parts["sdp"])
    if "session" not in parts or not parts["session"].strip():
        return offer, None
    try:
        session = loads(parts["session"])  # nesting checked first, no lone surrogates
    except ValueError as exc:  # NestingTooDeep and NotText are two
        raise ApiError(400, f"the 'session' part is not JSON: {exc}", "invalid_json", "session") from None
    if not isinstance(session, dict):
        raise ApiError(400, "Invalid type for 'session': expected an object.", "invalid_type", "session")
    return offer, session


async def admit_offer(admission: Admission, request: Request) -> Admitted:
    """The offer's admission (an ephemeral key is redeemed here: the last of the checks), or the
    refusal as an ``ApiError``."""
    admitted = await admission.admit(request)
    if isinstance(admitted, Refusal):
        kind = "permission_error" if admitted.http_status == 403 else None
        raise ApiError(admitted.http_status, admitted.message, admitted.code, kind=kind)
    return admitted


async def place_call(media: Any, registry: CallRegistry, call_id: str, channel: Any, offer: Offer,
                     request: SessionRequest, admitted: Admitted, config: AppConfig,
                     resume: Resumable | None = None, resume_token: str | None = None) -> str:
    """Answer ``offer`` on a new call and queue its session; the answer SDP, or an ``ApiError``
    when the queue refused it (the call, its slot and its ticket are gone by then). ``resume``:
    the session a dropped call's token brings back (no queue: its slot is held)."""
    call = media.Call(call_id, channel, config.limits.max_frame_rate, config.webrtc)
    try:
        answer = await call.answer(offer)
    except BaseException:
        await call.close()
        admitted.close()
        raise
    # The browser's own canceller has taken the echo out (getUserMedia's echoCancellation).
    proxy = registry.start(call, replace(request, echo_cancelled=True), admitted, resume, resume_token)
    refusal = None
    with contextlib.suppress(TimeoutError):
        refusal = await asyncio.wait_for(asyncio.shield(proxy.placed), SETTLE_S)
    if refusal is not None:
        await registry.finished(call_id)
        error = refusal.get("error") or {}
        code = error.get("code") or "call_ended"
        status, kind = QUEUE_STATUS.get(code, (503, None))
        raise ApiError(status, error.get("message") or "the session could not be queued", code, kind=kind)
    return answer


async def _create(request: Request, registry: CallRegistry, admission: Admission, config: AppConfig) -> Response:
    offer, session = await _offer(request)
    if session is not None and is_ephemeral(presented_key(request)):
        # The key was minted with its session (model included) by the app server; its holder may
        # change what session.update allows once connected, never the grant itself.
        raise ApiError(400, "a call opened with an ephemeral key starts with the session the key was minted with: "
                            "send the offer alone (application/sdp), or mint the key with this session",
                       "session_not_allowed", "session")
    beta = "realtime=v1" in request.headers.get("openai-beta", "")
    model = None
    if session is not None:
        try:
            session, model = check_session(session, beta=beta, param="session")
        except SessionConfigError as exc:
            raise ApiError(400, exc.message, exc.code, exc.param) from None
    admitted = await admit_offer(admission, request)
    req = session_request(request, admission.access.client_ip(request), admitted.grant)
    if session is not None:
        req = replace(req, model=model or req.model, initial_session=initial_update(session, req.beta),
                      intent="transcription" if session.get("type") == "transcription" else req.intent)
    elif req.initial_session is not None:
        req = replace(req, initial_session=pin_update(req.initial_session, req.beta))

    resume = await _claim(registry, request, admitted)
    resumes = registry.resumes
    token = new_resume_token() if resume is None and resumes is not None and resumes.wanted(req.extensions, False) else None

    call_id = new_id("rtc")
    try:
        media = await load_media()
        channel = media.WebRTCChannel(beta=req.beta, budget=InboundBudget(config.limits.queued_bytes),
                                      frame_ms=config.webrtc.reply_packet_ms)
        answer = await place_call(media, registry, call_id, channel, offer, req, admitted, config, resume, token)
    except BaseException:
        if resume is not None:  # not brought back after all: held again for another try
            resumes.hold(resume)
        raise
    log.info("call %s answered (%s%s%s)", call_id, "multipart" if session is not None else "sdp",
             ", camera" if offer.video else "", f", resuming {resume.session_id}" if resume is not None else "")
    headers = {"Location": f"{CALLS_PATH}/{call_id}"}
    if token is not None:
        headers[RESUME_HEADER] = token
    return Response(answer, status_code=201, media_type="application/sdp", headers=headers)


async def _claim(registry: CallRegistry, request: Request, admitted: Admitted) -> Resumable | None:
    """The session a dropped call's ``?resume_token=`` brings back (None: no token), or the
    refusal as an ``ApiError`` (the admission's slot closed)."""
    token = request.query_params.get("resume_token")
    if token is None:
        return None
    resume = await registry.resumes.claim(token, admitted.owner) if registry.resumes is not None else INVALID
    if isinstance(resume, ResumeRefusal):
        admitted.close()
        raise ApiError(resume.http_status, resume.message, resume.code, "resume_token",
                       kind="permission_error" if resume.http_status == 403 else None)
    return resume
