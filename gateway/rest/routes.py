"""OpenAI-compatible REST API on the gateway: models, chat completions (text and audio, streamed
or not, with function calling), speech and transcriptions.

Every model request takes a short lease from the same pool (``SessionQueue``) as realtime sessions
(FIFO among both; while queued the HTTP client simply waits) and calls the leased worker's
internal REST endpoint (``worker/rest.py``). Bodies are checked before queueing, so bad input
never holds a slot. The gateway only parses JSON and relays: media is decoded and encoded on
the worker. The lease is released on every path: errors, the end of a stream, and a client
that disconnects while queued, while waiting for a non-streamed answer, or mid-stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError

from core import telemetry
from core.ids import new_id
from core.rest_jobs import CHAT_PATH, RELEASE_PATH, REQUEST_ID_HEADER, SPEECH_PATH, TRANSCRIPTION_PATH, SpeechJob
from core.streaming import ClosingStreamingResponse
from gateway.access.policy import Access
from gateway.access.rate_limits import RateLimited, SessionLimiter, Slot
from gateway.pool.interface import SessionQueue
from gateway.pool.model import Lease, NoCapableWorkerError, QueueFullError, QueueTimeoutError
from gateway.pool.redis_queue import ClusterUnavailable
from gateway.rest.body import THREAD_PARSE_BYTES, parse_json, parse_multipart, read_body, validation_error
from gateway.rest.format import ChatContext, sse, transcription_body
from gateway.rest.models import (
    ApiError,
    ChatCompletionRequest,
    SpeechRequest,
    TranscriptionForm,
    inline_schema,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

# Payload limits (hard-coded defaults; OpenAI's own upload limit is 25 MB).
CHAT_MAX_BYTES = 20 * 2**20  # base64 images and audio inside JSON
SPEECH_MAX_BYTES = 64 * 2**10  # 4096 characters, even fully \u-escaped
TRANSCRIPTION_MAX_FILE = 25 * 2**20
TRANSCRIPTION_MAX_BYTES = TRANSCRIPTION_MAX_FILE + 2**20  # plus the form around the file
DEFAULT_MODEL = "omniduplex-cascade"
WORKER_TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=10.0)
RELEASE_TIMEOUT = httpx.Timeout(connect=5.0, read=35.0, write=5.0, pool=5.0)  # the worker waits up to 30 s

_ERRORS = {status: {"description": text, "content": {"application/json": {"schema": {"type": "object", "properties": {
    "error": {"type": "object", "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                                               "param": {"type": ["string", "null"]},
                                               "code": {"type": ["string", "null"]}}}}}}}}
    for status, text in ((400, "invalid request"), (404, "unknown model"), (413, "body too large"),
                         (429, "queue full"), (503, "no worker in time / worker unavailable / the shared queue's Redis unreachable"))}


class ClientGone(Exception):
    """The HTTP client disconnected; nobody is left to answer."""


class WorkerCall:
    """One request's lease and its call to the leased worker. ``close`` frees both (idempotent).

    A call that ends before the worker's answer was read to its end (the client left, say)
    closes the upstream and then asks the worker to release the request (``RELEASE_PATH``): the
    worker stops the work and answers once its own slot is free, and only then is the lease
    given back, so the pool never hands out a slot whose worker is still busy."""

    def __init__(self, request: Request, pool: SessionQueue, http: httpx.AsyncClient) -> None:
        self.request, self.pool, self.http = request, pool, http
        self.ticket = new_id("req")
        self.lease: Lease | None = None
        self.upstream: httpx.Response | None = None
        self.sent = False  # the request went (or may have gone) to the worker
        self.finished = False  # the worker's answer was read to its end: its slot is free
        self._watcher: asyncio.Task | None = None
        self._closed = False
        self.span: Any = None  # ``rest <route>`` while tracing is on; ended by ``close``
        self.slot: Slot | None = None  # the request's place in its client's limits; given back by ``close``

    def headers(self) -> dict[str, str]:
        out = {"x-request-id": self.ticket}
        if self.lease is not None:
            out["x-omniduplex-worker-id"] = self.lease.worker.id
            out["x-omniduplex-queued-ms"] = str(round(self.lease.queued_s * 1000))
        return out

    async def _disconnected(self) -> None:
        while (await self.request.receive())["type"] != "http.disconnect":
            pass

    async def race(self, aw: Awaitable[T], discard: Callable[[T], object] | None = None) -> T:
        """Await ``aw`` unless the client leaves first (ClientGone) or this handler is cancelled.

        Either way ``aw`` is cancelled; a result it produced in that same instant goes to
        ``discard`` (a lease must be given back, a response closed)."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._disconnected())
        task = asyncio.ensure_future(aw)
        try:
            done, _ = await asyncio.wait({task, self._watcher}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._abandon(task, discard)
            raise
        if task in done:
            return task.result()
        self._abandon(task, discard)
        raise ClientGone

    @staticmethod
    def _abandon(task: asyncio.Future, discard: Callable[[T], object] | None) -> None:
        if not task.done():
            task.cancel()  # the awaitable cleans up after itself (pool.acquire leaves the queue)
        elif discard is not None and not task.cancelled() and task.exception() is None:
            discard(task.result())

    def stop_watching(self) -> None:
        """Before streaming: Starlette's own disconnect listener reads the client from here on."""
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    async def acquire(self, requirements: frozenset[str]) -> None:
        try:
            self.lease = await self.race(self.pool.acquire(requirements, self.ticket),
                                         discard=lambda lease: self.pool.release(lease, record=False))
        except QueueFullError as exc:
            raise ApiError(429, str(exc), "queue_full", kind="rate_limit_error") from None
        except QueueTimeoutError as exc:
            raise ApiError(503, str(exc), "queue_timeout") from None
        except NoCapableWorkerError as exc:
            raise ApiError(400, f"{exc}; this request needs {', '.join(sorted(requirements))}",
                           "unsupported_capability") from None
        except ClusterUnavailable as exc:
            raise ApiError(503, str(exc), "cluster_unavailable") from None

    def worker_failed(self, reason: str) -> None:
        if self.lease is not None:
            self.pool.report_failure(self.lease.worker.id, reason)
        if self.span is not None:
            telemetry.set_attributes(self.span, {"error.type": "worker_failed"})

    async def open(self, path: str, *, content: bytes, params: dict[str, str] | None = None) -> httpx.Response:
        """POST to the leased worker and return its streaming response once it answered 200."""
        assert self.lease is not None
        request = self.http.build_request(
            "POST", self.lease.worker.url + path, content=content, params=params,
            headers={REQUEST_ID_HEADER: self.ticket, **self.pool.worker_headers, **telemetry.trace_headers(self.span)},
        )
        self.sent = True
        try:
            self.upstream = await self.race(self.http.send(request, stream=True),
                                            discard=lambda response: asyncio.ensure_future(response.aclose()))
            if self.upstream.status_code == 200:
                return self.upstream
            body = await self.race(self.upstream.aread())
            self.finished = True  # an error answer: the worker freed its slot before sending it
        except httpx.HTTPError as exc:
            self.worker_failed(f"REST call failed: {exc!r}")
            raise ApiError(503, "the assigned worker could not be reached; please retry",
                           "worker_unavailable") from None
        status = self.upstream.status_code
        try:
            error = json.loads(body)["error"]
            message, code, param = str(error["message"]), error.get("code"), error.get("param")
        except (ValueError, KeyError, TypeError):
            message, code, param = body.decode("utf-8", "replace")[:300] or f"worker answered {status}", None, None
        if 400 <= status < 500:
            raise ApiError(status, message, code, param)
        if status == 503:  # loading or busy: not a failure, probes will tell
            raise ApiError(503, message, code or "worker_unavailable")
        self.worker_failed(f"REST call answered {status}: {message}")
        raise ApiError(502, "the model worker failed on this request; please retry", "worker_failed")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop_watching()
        try:
            with anyio.CancelScope(shield=True):
                if self.upstream is not None:
                    await self.upstream.aclose()
                if self.lease is not None and self.sent and not self.finished:
                    await self._release_on_worker()
        finally:
            if self.slot is not None:
                self.slot.close()
            if self.lease is not None:
                self.pool.release(self.lease, record=False)
            if self.span is not None:
                span, self.span = self.span, None
                lease = self.lease
                telemetry.end_span(span, {
                    "omniduplex.worker.id": lease.worker.id if lease else None,
                    "omniduplex.worker.url": lease.worker.url if lease else None,
                    "omniduplex.queue_wait_ms": round(lease.queued_s * 1000, 1) if lease else None,
                    "omniduplex.finished": self.finished})

    def trace_done(self, done: dict[str, Any]) -> None:
        """The reply's token counts on the request's span (GenAI usage attributes)."""
        if self.span is not None:
            telemetry.set_attributes(self.span, {"gen_ai.usage.input_tokens": done.get("prompt_tokens"),
                                                 "gen_ai.usage.output_tokens": done.get("output_tokens"),
                                                 "omniduplex.status": done.get("status")})

    async def _release_on_worker(self) -> None:
        """Wait until the worker has stopped this request and freed its slot (a few ms for a
        reply cancelled between tokens); an unreachable worker is the probes' business."""
        assert self.lease is not None
        try:
            answer = await self.http.post(self.lease.worker.url + RELEASE_PATH, timeout=RELEASE_TIMEOUT,
                                          headers={REQUEST_ID_HEADER: self.ticket, **self.pool.worker_headers})
            if answer.status_code != 200:
                log.warning("REST request %s: worker %s answered %d to its release", self.ticket,
                            self.lease.worker.id, answer.status_code)
        except httpx.HTTPError as exc:
            log.warning("REST request %s: releasing it on worker %s failed: %r", self.ticket, self.lease.worker.id, exc)


def known_models(pool: SessionQueue) -> dict[str, set[str]]:
    """Model id -> capabilities, from the backends the workers report (``omniduplex-<backend>``)."""
    models: dict[str, set[str]] = {}
    for worker in pool.workers():
        backend = (worker.last_probe or {}).get("backend")
        if isinstance(backend, str) and worker.health.value != "dead":
            models.setdefault(f"omniduplex-{backend}", set()).update(worker.capabilities)
    return models or {DEFAULT_MODEL: set()}


def _check_model(pool: SessionQueue, model: str) -> None:
    if model not in known_models(pool):
        raise ApiError(404, f"The model '{model}' does not exist; available: {', '.join(sorted(known_models(pool)))}",
                       "model_not_found", "model")


def _body(model: type, content_type: str = "application/json") -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {content_type: {"schema": inline_schema(model)}}}}


def _transcription_schema() -> dict[str, Any]:
    schema = inline_schema(TranscriptionForm)
    schema["properties"] = {"file": {"type": "string", "format": "binary",
                                     "description": "wav, mp3, ogg, webm, flac, m4a/mp4 or aac; at most 25 MiB"},
                            **schema["properties"]}
    schema["required"] = ["file", *schema.get("required", [])]
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


def openai_router(pool: SessionQueue, transport: httpx.AsyncBaseTransport | None = None,
                  access: Access | None = None, limiter: SessionLimiter | None = None) -> APIRouter:
    """The public ``/v1`` REST routes; one ``httpx`` client for worker calls (not the probes').

    ``transport`` replaces the network for tests (worker test doubles). ``access`` and ``limiter``:
    each model request counts against its client's per-address and per-key limits, the sessions'
    own (``gateway/access/rate_limits.py``), from before its body is read until its answer ends;
    over one: 429 with the reason and ``Retry-After``."""
    state: dict[str, httpx.AsyncClient] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state["http"] = httpx.AsyncClient(timeout=WORKER_TIMEOUT, transport=transport)
        try:
            yield
        finally:
            await state.pop("http").aclose()

    router = APIRouter(lifespan=lifespan, tags=["OpenAI-compatible REST"])

    async def serve(request: Request, handler: Callable[[WorkerCall], Awaitable[Response]]) -> Response:
        """Run ``handler``; errors become OpenAI-shaped answers, and the lease is never leaked."""
        call = WorkerCall(request, pool, state["http"])
        if limiter is not None and access is not None:
            try:
                call.slot = limiter.try_open(access.client_ip(request), access.check_key(request)[1])
            except RateLimited as exc:
                error = ApiError(429, exc.message, exc.code, kind="rate_limit_error")
                return JSONResponse(error.body(), status_code=429,
                                    headers={"Retry-After": str(max(1, round(exc.retry_after_s)))})
        if telemetry.enabled():
            call.span = _rest_span(request)
        try:
            response = await handler(call)
        except ApiError as exc:
            telemetry.set_attributes(call.span, {"http.response.status_code": exc.status, "error.type": exc.code})
            await call.close()
            return JSONResponse(exc.body(), status_code=exc.status, headers=call.headers())
        except ClientGone:
            telemetry.set_attributes(call.span, {"http.response.status_code": 499, "error.type": "client_gone"})
            await call.close()
            return Response(status_code=499)  # nobody reads it; uvicorn drops it
        except Exception as exc:
            telemetry.set_attributes(call.span, {"http.response.status_code": 500, "error.type": type(exc).__name__})
            await call.close()
            log.exception("REST request %s failed", call.ticket)
            error = ApiError(500, "internal error while serving the request", "server_error")
            return JSONResponse(error.body(), status_code=500, headers=call.headers())
        except BaseException:
            await call.close()
            raise
        telemetry.set_attributes(call.span, {"http.response.status_code": response.status_code})
        if not isinstance(response, ClosingStreamingResponse):
            await call.close()
        response.headers.update(call.headers())
        return response

    @router.get("/v1/models", summary="List models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(m, caps) for m, caps in sorted(known_models(pool).items())]}

    @router.get("/v1/models/{model_id}", summary="Retrieve a model", responses={404: _ERRORS[404]})
    async def get_model(model_id: str) -> Response:
        models = known_models(pool)
        if model_id not in models:
            error = ApiError(404, f"The model '{model_id}' does not exist", "model_not_found", "model")
            return JSONResponse(error.body(), status_code=404)
        return JSONResponse(_model_card(model_id, models[model_id]))

    @router.post("/v1/chat/completions", summary="Chat completion (text, image, audio in; text, audio, function calls out)",
                 openapi_extra=_body(ChatCompletionRequest), responses={k: _ERRORS[k] for k in (400, 404, 413, 429, 503)})
    async def chat_completions(request: Request) -> Response:
        async def handle(call: WorkerCall) -> Response:
            body = await read_body(request, CHAT_MAX_BYTES)
            req = await parse_json(ChatCompletionRequest, body)
            req.check()
            _check_model(pool, req.model)
            if call.span is not None:
                telemetry.set_attributes(call.span, {"gen_ai.request.model": req.model})
            job = req.to_job()
            dump = job.model_dump_json
            content = (await asyncio.to_thread(dump) if len(body) > THREAD_PARSE_BYTES else dump()).encode()
            await call.acquire(req.requirements())
            upstream = await call.open(CHAT_PATH, content=content)
            ctx = ChatContext(id=f"chatcmpl-{secrets.token_hex(12)}", model=req.model, audio=job.output_audio,
                              audio_id=new_id("audio"))
            if job.stream:
                include_usage = bool(req.stream_options and req.stream_options.include_usage)
                call.stop_watching()
                return ClosingStreamingResponse(_chat_sse(call, upstream, ctx, include_usage), on_close=call.close,
                                                media_type="text/event-stream", headers={"cache-control": "no-cache"})
            text, audio, done = await call.race(_collect_chat(call, upstream))
            return JSONResponse(ctx.completion(text, done, audio))

        return await serve(request, handle)

    @router.post("/v1/audio/speech", summary="Text to speech (mp3, opus, aac, flac, wav, pcm; chunked)",
                 openapi_extra=_body(SpeechRequest), response_class=Response,
                 responses={200: {"content": {"audio/mpeg": {}, "audio/wav": {}}, "description": "audio bytes"},
                            **{k: _ERRORS[k] for k in (400, 404, 413, 429, 503)}})
    async def speech(request: Request) -> Response:
        async def handle(call: WorkerCall) -> Response:
            req = await parse_json(SpeechRequest, await read_body(request, SPEECH_MAX_BYTES))
            _check_model(pool, req.model)
            voice = req.voice if isinstance(req.voice, str) else req.voice.id
            job = SpeechJob(input=req.input, voice=voice, speed=req.speed, response_format=req.response_format)
            await call.acquire(frozenset({"audio_output"}))
            upstream = await call.open(SPEECH_PATH, content=job.model_dump_json().encode())
            call.stop_watching()
            return ClosingStreamingResponse(_relay_bytes(call, upstream), on_close=call.close,
                                            media_type=upstream.headers.get("content-type", "application/octet-stream"))

        return await serve(request, handle)

    @router.post("/v1/audio/transcriptions", summary="Speech to text (multipart upload)",
                 openapi_extra=_transcription_schema(), response_class=Response,
                 responses={k: _ERRORS[k] for k in (400, 404, 413, 429, 503)})
    async def transcriptions(request: Request) -> Response:
        async def handle(call: WorkerCall) -> Response:
            body = await read_body(request, TRANSCRIPTION_MAX_BYTES)
            fields, files = await parse_multipart(request, body, TRANSCRIPTION_MAX_FILE)
            try:
                form = TranscriptionForm.model_validate(fields)
            except ValidationError as exc:
                raise validation_error(exc) from None
            form.check()
            data = files.get("file")
            if not data:
                raise ApiError(400, "Missing required parameter: 'file' (the audio file to transcribe).",
                               "missing_required_parameter", "file")
            _check_model(pool, form.model)
            params = {k: str(v) for k, v in (("language", form.language), ("prompt", form.prompt),
                                              ("temperature", form.temperature)) if v not in (None, "")}
            await call.acquire(frozenset({"audio_input"}))
            upstream = await call.open(TRANSCRIPTION_PATH, content=data, params=params)
            try:
                raw = await call.race(upstream.aread())
                call.finished = True
                result = json.loads(raw)
            except (httpx.HTTPError, ValueError) as exc:
                call.worker_failed(f"transcription answer broken: {exc!r}")
                raise ApiError(502, "the model worker failed on this request; please retry", "worker_failed") from None
            out, media_type = transcription_body(result, form.response_format)
            if isinstance(out, dict):
                return JSONResponse(out)
            return PlainTextResponse(out, media_type=media_type)

        return await serve(request, handle)

    return router


def _model_card(model_id: str, caps: set[str]) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "omniduplex", "capabilities": sorted(caps)}


async def _events(call: WorkerCall, upstream: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The worker's NDJSON events; a broken stream reports the worker and ends with ``failed``."""
    try:
        async for line in upstream.aiter_lines():
            if line.strip():
                event = json.loads(line)
                if event.get("type") == "done":
                    call.finished = True
                    call.trace_done(event)
                yield event
                if event.get("type") == "done":
                    return
    except (httpx.HTTPError, ValueError) as exc:
        call.worker_failed(f"chat stream broken: {exc!r}")
    yield {"type": "done", "status": "failed", "reason": "worker_failed", "text": ""}


_REST_OPERATIONS = {"/v1/chat/completions": "chat", "/v1/audio/speech": "text_to_speech",
                    "/v1/audio/transcriptions": "transcription"}


def _rest_span(request: Request) -> Any:
    """``rest <route>``: one REST request at the gateway, parent of the worker's span."""
    route = request.url.path
    return telemetry.start_span(f"rest {route}", server=True, attributes={
        "http.request.method": request.method, "http.route": route, "gen_ai.system": telemetry.GEN_AI_SYSTEM,
        "gen_ai.operation.name": _REST_OPERATIONS.get(route)})


def _reply_failed(reported: dict[str, Any] | None) -> ApiError:
    """A failed reply; the worker's own reason when it gave one (an LLM server that is down,
    say), since "please retry" alone tells the user nothing they can act on."""
    if reported and reported.get("message"):
        return ApiError(502, str(reported["message"]), "response_failed")
    return ApiError(502, "the model failed while answering; please retry", "worker_failed")


async def _collect_chat(call: WorkerCall, upstream: httpx.Response) -> tuple[str, str | None, dict[str, Any]]:
    text: list[str] = []
    audio: str | None = None
    reported: dict[str, Any] | None = None
    async for event in _events(call, upstream):
        kind = event.get("type")
        if kind == "text":
            text.append(event["delta"])
        elif kind == "audio_file":
            audio = event["data"]
        elif kind == "error":
            reported = event
            log.warning("chat %s: worker reported %s: %s", call.ticket, event.get("code"), event.get("message"))
        elif kind == "done":
            if event.get("status") == "failed":
                raise _reply_failed(reported)
            return "".join(text), audio, event
    raise ApiError(502, "the model failed while answering; please retry", "worker_failed")


async def _chat_sse(call: WorkerCall, upstream: httpx.Response, ctx: ChatContext, include_usage: bool
                    ) -> AsyncIterator[bytes]:
    yield sse(ctx.role_chunk())
    reported: dict[str, Any] | None = None
    async for event in _events(call, upstream):
        kind = event.get("type")
        if kind == "text":
            yield sse(ctx.text_chunk(event["delta"]))
        elif kind == "call":
            yield sse(ctx.call_chunk(event["index"], event["call_id"], event["name"]))
        elif kind == "call_arguments":
            yield sse(ctx.call_arguments_chunk(event["index"], event["delta"]))
        elif kind == "audio":
            yield sse(ctx.audio_chunk(event["data"]))
        elif kind == "error":
            reported = event
            log.warning("chat %s: worker reported %s: %s", call.ticket, event.get("code"), event.get("message"))
        elif kind == "done":
            if event.get("status") == "failed":
                yield sse(_reply_failed(reported).body())
                return
            yield sse(ctx.final_chunk(event))
            if include_usage:
                yield sse(ctx.usage_chunk(event))
            yield sse("[DONE]")
            return


async def _relay_bytes(call: WorkerCall, upstream: httpx.Response) -> AsyncIterator[bytes]:
    """Audio bytes as the worker sends them; a broken worker stream aborts the client's too, so
    a cut-off file is never mistaken for a complete one."""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
        call.finished = True
    except httpx.HTTPError as exc:
        call.worker_failed(f"speech stream broken: {exc!r}")
        raise
