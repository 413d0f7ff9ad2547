"""``POST /v1/live/sessions``: a Live session over a WebRTC call, as ``client.live.create`` makes one.

The body is JSON: ``{"session": {...}, "transport": {"type": "webrtc", "sdp": OFFER}}`` (the
session as ``session.start`` would carry it, without ``audio.format``: the call negotiates its
media); the answer is ``{"session": {"id": ...}, "transport": {"type": "webrtc", "sdp": ANSWER}}``.
Creating the session starts it: the gateway sends the worker its ``session.start`` first, and the
client waits for ``session.started`` on the ``oai-events`` data channel.

The call is an ordinary WebRTC call (``gateway/realtime/webrtc/``: admission, queue, the media
tracks, the registry, hangup) whose worker speaks Live (``worker/live/``). ``LiveCallChannel``
adapts the call's channel to the dialect: the microphone becomes ``session.input_audio.append``,
``session.output_audio.delta`` goes to the outbound track (the worker paces it, so the track's
queue stays short and a voice over the reply stops it within that lead), and only Live events
reach the data channel (the Realtime call's ``output_audio_buffer.*`` do not).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from core.config import AppConfig
from core.json_limits import BINARY_REFUSED
from core.live_events import live_error, parse_client_event, server_types
from core.protocol import ProtocolError
from core.session_store import new_session_id
from core.transport import Message
from gateway.realtime.admission import Admission, Refusal
from gateway.realtime.budget import InboundBudget
from gateway.realtime.request import session_request
from gateway.realtime.webrtc.registry import CallRegistry
from gateway.realtime.webrtc.routes import load_media, place_call
from gateway.realtime.webrtc.sdp import MAX_SDP_BYTES, check_offer
from gateway.rest.body import json_object, read_body
from gateway.rest.models import ApiError

log = logging.getLogger(__name__)

PATH = "/v1/live/sessions"
MAX_BODY_BYTES = MAX_SDP_BYTES + 256 * 1024
_CAMERA = '{"type":"input_image_buffer.append"'


def live_call_channel(media: Any, budget: InboundBudget) -> Any:
    """A ``WebRTCChannel`` for a Live call (its class is made here: aiortc loads with the first call)."""

    class LiveCallChannel(media.WebRTCChannel):
        realtime_client = False  # Live events pass to the worker as they are

        def __init__(self) -> None:
            super().__init__(beta=False, budget=budget)

        def binary_refusal(self) -> dict[str, Any]:
            return live_error(BINARY_REFUSED, "invalid_json", "message")

        def _to_client(self, event: dict[str, Any]) -> None:
            if event.get("type") in server_types():  # not the Realtime call's output_audio_buffer.*
                super()._to_client(event)

        def deliver(self, message: Message) -> None:
            if isinstance(message, str) and message.startswith(_CAMERA):
                return  # Live takes no camera frames
            super().deliver(message)

        async def send(self, message: Message) -> None:
            if isinstance(message, str) and not self.live and message.startswith('{"type":"session.started"'):
                self.start_media()
            await super().send(message)

    return LiveCallChannel()


def live_calls_router(registry: CallRegistry, admission: Admission, config: AppConfig) -> APIRouter:
    router = APIRouter(tags=["OpenAI-compatible Live"])

    @router.post(PATH, response_class=Response)
    async def create_live_session(request: Request) -> Response:
        """Answer a WebRTC offer with a started Live session (queued like any session)."""
        try:
            return await _create(request, registry, admission, config)
        except ApiError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)

    @router.post(PATH + "/{session_id}/hangup", response_class=Response)
    async def hangup(session_id: str, request: Request) -> Response:
        """End a Live call: its connection closes and its slot is free when this answers. Only the
        key it belongs to (or the admin token) may; another key's session is not found."""
        may = functools.partial(admission.access.owns, request)
        if not registry.owned(session_id, may) or not await registry.hangup(session_id):
            err = ApiError(404, f"no Live call {session_id[:80]!r} (unknown, or already ended)", "session_not_found",
                           "session_id")
            return JSONResponse(err.body(), status_code=404)
        return Response(status_code=200)

    return router


async def _body(request: Request) -> tuple[dict[str, Any], str]:
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ApiError(400, "send {'session': ..., 'transport': {'type': 'webrtc', 'sdp': ...}} as application/json",
                       "invalid_content_type")
    body = json_object(await read_body(request, MAX_BODY_BYTES))  # nesting checked: a 400, not a 500
    transport = body.get("transport")
    if not isinstance(transport, dict) or transport.get("type") != "webrtc" or not isinstance(transport.get("sdp"), str):
        raise ApiError(400, "transport must be {'type': 'webrtc', 'sdp': OFFER}", "invalid_value", "transport")
    session = body.get("session")
    if not isinstance(session, dict):
        raise ApiError(400, "Missing required parameter: 'session'.", "missing_required_parameter", "session")
    try:  # the session as the worker will read it (its shape too): refused here, before a key is spent
        parse_client_event({"type": "session.start", "session": session})
    except ProtocolError as exc:
        raise ApiError(400, exc.message, exc.code, exc.param) from None
    audio = session.get("audio")
    if isinstance(audio, dict) and audio.get("format") is not None:
        raise ApiError(400, "a WebRTC session negotiates its media: leave out session.audio.format", "invalid_value",
                       "session.audio.format")
    return session, transport["sdp"]


async def _create(request: Request, registry: CallRegistry, admission: Admission, config: AppConfig) -> Response:
    session, sdp = await _body(request)
    offer = await check_offer(sdp)
    admitted = await admission.admit(request, dialect="live")  # an ephemeral key: refused, left unused
    if isinstance(admitted, Refusal):
        kind = "permission_error" if admitted.http_status == 403 else None
        raise ApiError(admitted.http_status, admitted.message, admitted.code, kind=kind)
    session_id = new_session_id()  # also the call's id: attach and hangup name the session
    req = replace(session_request(request, admission.access.client_ip(request)), live=True, beta=False,
                  model=session["model"], session_id=session_id)
    media = await load_media()
    channel = live_call_channel(media, InboundBudget(config.limits.queued_bytes))
    channel.deliver(json.dumps({"type": "session.start", "session": session}, separators=(",", ":")))  # first
    call_id = session_id
    answer = await place_call(media, registry, call_id, channel, offer, req, admitted, config)
    log.info("live call %s answered (session %s%s)", call_id, session_id, ", camera" if offer.video else "")
    return JSONResponse({"session": {"id": session_id}, "transport": {"type": "webrtc", "sdp": answer}})
