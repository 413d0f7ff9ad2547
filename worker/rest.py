"""Internal REST endpoints the gateway calls with a leased slot (contract: ``core/rest_jobs.py``).

Each request holds one of this worker's slots for its whole life, like a realtime session,
so ``/health`` shows it and a realtime session cannot take the same slot. All media and model
work (base64, PyAV, Whisper, Piper, the LLM) runs in threads; the loop only routes bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from core.audio import float_to_pcm16
from core.conversation import ConversationConfig
from core.conversation.config import FunctionTool
from core.conversation.items import Item
from core.errors import OmniDuplexError
from core.ids import new_id
from core.media import CONTENT_TYPES, decode_audio, encode_audio, encode_stream
from core.rest_jobs import (
    CHAT_PATH,
    RELEASE_PATH,
    REQUEST_ID_HEADER,
    SPEECH_PATH,
    TRANSCRIPTION_PATH,
    ChatJob,
    ChatPart,
    SpeechJob,
)
from core.streaming import ClosingStreamingResponse, iterate_in_thread
from worker.state import WorkerState

log = logging.getLogger(__name__)

REST_STATE = "BUSY_HALF_DUPLEX"  # one request, one reply: half duplex in /health terms
SLOT_WAIT_S = 2.0  # the gateway frees a slot a moment before the last request here ends
MODEL_STOP_WAIT_S = 60.0  # a cancelled reply's model threads; past this the slot is freed anyway (logged)
RELEASE_WAIT_S = 30.0  # how long a release call waits for the request's slot


class RestError(Exception):
    """An answer other than 200, in the OpenAI error shape."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return JSONResponse(
            {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}},
            status_code=self.status,
        )


def _input_error(exc: OmniDuplexError, param: str | None = None) -> RestError:
    return RestError(400, exc.message, exc.code, param or exc.param)


class _Slot:
    """This request's place in ``WorkerState.sessions``; ``release`` is idempotent.

    ``jobs`` (request id -> slot) lets the gateway's release call find the request: ``stop``
    (set once the request has work to stop) starts its cleanup, ``freed`` is set by ``release``."""

    def __init__(self, state: WorkerState, request_id: str, jobs: dict[str, _Slot]) -> None:
        self.state, self.request_id, self.held = state, request_id, False
        self.jobs = jobs
        self.freed = asyncio.Event()
        self._cleanup: Callable[[], Awaitable[None]] | None = None
        self._stopping: asyncio.Future | None = None
        jobs[request_id] = self

    def on_stop(self, cleanup: Callable[[], Awaitable[None]]) -> None:
        self._cleanup = cleanup

    def stop(self) -> Awaitable[None] | None:
        """Run the cleanup given to ``on_stop`` once, however many ask (the client's disconnect,
        the gateway's release call); None when there is none yet."""
        if self._cleanup is None:
            return None
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._cleanup())
        return asyncio.shield(self._stopping)

    async def take(self) -> None:
        state = self.state
        backend = state.backend
        if state.state == "ERROR" or backend is None or not backend.loaded:
            raise RestError(503, "the model is not loaded yet" if state.state != "ERROR" else "worker failed",
                            "model_not_loaded")
        for _ in range(int(SLOT_WAIT_S / 0.01)):
            if len(state.sessions) < state.slots:
                break
            await asyncio.sleep(0.01)
        else:
            raise RestError(503, "worker has no free slot", "worker_busy")
        state.sessions[self.request_id] = REST_STATE
        state.refresh()
        self.held = True

    def release(self) -> None:
        if self.jobs.get(self.request_id) is self:
            del self.jobs[self.request_id]
        if self.held:
            self.held = False
            self.state.sessions.pop(self.request_id, None)
            self.state.refresh()
        self.freed.set()


async def _job(request: Request, model: type):
    body = await request.body()
    try:
        if len(body) > 256 * 1024:
            return await asyncio.to_thread(model.model_validate_json, body)
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RestError(400, f"bad job: {first['msg']} at {'.'.join(map(str, first['loc']))}",
                        "invalid_request_error") from None


def _b64(part: ChatPart) -> bytes:
    try:
        return base64.b64decode(part.data or "", validate=True)
    except (binascii.Error, ValueError):
        raise RestError(400, "the data is not valid base64", "invalid_base64", part.param) from None


def _pcm16k(part: ChatPart) -> bytes:
    """A whole audio file (base64) -> PCM16 mono 16 kHz: thread work."""
    return float_to_pcm16(decode_audio(_b64(part), 16000))


def rest_router(state: WorkerState) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    jobs: dict[str, _Slot] = {}

    def new_slot(request: Request) -> _Slot:
        return _Slot(state, request.headers.get(REQUEST_ID_HEADER) or new_id("req"), jobs)

    @router.post(RELEASE_PATH)
    async def release(request: Request) -> Response:
        """The gateway's client left: stop the request's work, answer once its slot is free."""
        slot = jobs.get(request.headers.get(REQUEST_ID_HEADER) or "")
        if slot is None:
            return JSONResponse({"released": True, "waited_ms": 0})
        t0 = time.perf_counter()
        slot.stop()
        try:
            await asyncio.wait_for(slot.freed.wait(), RELEASE_WAIT_S)
        except TimeoutError:
            log.error("REST request %s: still holding its slot %.0f s after its client left",
                      slot.request_id, RELEASE_WAIT_S)
            return JSONResponse({"released": False}, status_code=504)
        return JSONResponse({"released": True, "waited_ms": round((time.perf_counter() - t0) * 1000, 1)})

    @router.post(CHAT_PATH)
    async def chat(request: Request) -> Response:
        slot = new_slot(request)
        conv = None
        finished = [False]  # the reply's "done" line went out: its model work is over
        try:
            job: ChatJob = await _job(request, ChatJob)
            await slot.take()
            conv = state.backend.open_conversation(ConversationConfig(
                turn_detection=None, input_sample_rate=16000, output_audio=job.output_audio, voice=job.voice,
                temperature=job.temperature, max_output_tokens=job.max_output_tokens, max_history_messages=256,
                tools=[FunctionTool(name=t.name, description=t.description, parameters=t.parameters)
                       for t in job.tools],
                tool_choice=job.tool_choice,
            ))
            await _load_messages(conv, job)
            # A 400 now, rather than a failed reply later, when the newest message cannot fit at all.
            await asyncio.to_thread(state.backend.check_context, conv.system_prompt(job.instructions),
                                    conv.history[-1].content if conv.history else "")
            slot.on_stop(lambda: _close(conv, slot, None if finished[0] else state.backend))
            await conv.create_response(output_audio=job.output_audio, instructions=job.instructions)
        except RestError as exc:
            await _close(conv, slot)
            return exc.response()
        except OmniDuplexError as exc:
            await _close(conv, slot)
            return _input_error(exc).response()
        except BaseException:
            await _close(conv, slot)
            raise
        return ClosingStreamingResponse(
            _chat_events(conv, job, finished), on_close=slot.stop, media_type="application/x-ndjson",
        )

    @router.post(SPEECH_PATH)
    async def speech(request: Request) -> Response:
        slot = new_slot(request)
        stream = None
        try:
            job: SpeechJob = await _job(request, SpeechJob)
            await slot.take()
            backend = state.backend
            stream = iterate_in_thread(lambda: encode_stream(
                backend.synthesize(job.input, speed=job.speed, voice=job.voice), job.response_format))
            first = await stream.__anext__()  # input errors surface here, before any byte is sent
        except StopAsyncIteration:
            first = b""
        except RestError as exc:
            await _close_stream(stream, slot)
            return exc.response()
        except OmniDuplexError as exc:
            await _close_stream(stream, slot)
            return _input_error(exc).response()
        except NotImplementedError as exc:
            await _close_stream(stream, slot)
            return RestError(400, str(exc), "unsupported").response()
        except BaseException:
            await _close_stream(stream, slot)
            raise

        async def body() -> AsyncIterator[bytes]:
            if first:
                yield first
            async for chunk in stream:
                yield chunk

        slot.on_stop(lambda: _close_stream(stream, slot))
        return ClosingStreamingResponse(
            body(), on_close=slot.stop, media_type=CONTENT_TYPES[job.response_format],
        )

    @router.post(TRANSCRIPTION_PATH)
    async def transcription(request: Request) -> Response:
        slot = new_slot(request)
        q = request.query_params
        try:
            try:
                temperature = float(q.get("temperature") or 0.0)
            except ValueError:
                raise RestError(400, "temperature must be a number", "invalid_value", "temperature") from None
            data = await request.body()
            await slot.take()
            backend = state.backend
            samples = await asyncio.to_thread(decode_audio, data, 16000)
            cancel = threading.Event()
            work = asyncio.ensure_future(asyncio.to_thread(
                backend.transcribe, samples, language=q.get("language") or None, prompt=q.get("prompt") or None,
                temperature=temperature, cancel=cancel,
            ))
            if not await _unless_disconnected(request, work):
                # The gateway gave up (its client left) and freed the lease: stop at the next
                # window, and hold this slot until the thread is really done.
                cancel.set()
                with contextlib.suppress(Exception):
                    await work
                return Response(status_code=499)
            result = work.result()
        except RestError as exc:
            return exc.response()
        except OmniDuplexError as exc:
            return _input_error(exc, "file" if exc.code == "invalid_audio" else None).response()
        except NotImplementedError as exc:
            return RestError(400, str(exc), "unsupported").response()
        finally:
            slot.release()
        return JSONResponse({
            "text": result.text, "language": result.language, "duration": round(result.duration, 3),
            "segments": [
                {"id": s.id, "start": s.start, "end": s.end, "text": s.text, "tokens": list(s.tokens),
                 "avg_logprob": s.avg_logprob, "compression_ratio": s.compression_ratio,
                 "no_speech_prob": s.no_speech_prob, "temperature": s.temperature}
                for s in result.segments
            ],
        })

    return router


async def _unless_disconnected(request: Request, work: asyncio.Future) -> bool:
    """Wait for ``work``; False if the caller disconnected first (``work`` keeps running)."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    return work.done()


async def _load_messages(conv, job: ChatJob) -> None:
    """Feed the request's history into the conversation, in order; media is decoded in threads."""
    for message in job.messages:
        if message.role == "tool":
            output = "".join(p.text or "" for p in message.parts if p.type == "text")
            conv.insert_item(Item("user", type="function_call_output", call_id=message.call_id, output=output,
                                  parts=[]))
            continue
        for part in message.parts:
            if part.type == "text":
                if part.text and part.text.strip():
                    await conv.add_text(part.text, role=message.role)
            elif part.type == "image":
                try:
                    await conv.add_image(await asyncio.to_thread(_b64, part))
                except OmniDuplexError as exc:
                    raise _input_error(exc, part.param) from None
            else:
                try:
                    await conv.add_audio_item(await asyncio.to_thread(_pcm16k, part))
                except OmniDuplexError as exc:
                    raise _input_error(exc, part.param) from None
        for call in message.tool_calls:
            conv.insert_item(Item("assistant", type="function_call", call_id=call.call_id, name=call.name,
                                  arguments=call.arguments, parts=[]))
    if not any(m.role != "system" for m in conv.history):
        raise RestError(400, "the messages hold no text, image or recognisable speech to answer",
                        "invalid_value", "messages")


async def _chat_events(conv, job: ChatJob, finished: list[bool]) -> AsyncIterator[bytes]:
    """Conversation events -> NDJSON lines; a non-streamed job gets its audio as one encoded file.
    ``finished[0]`` turns True once the reply is done (nothing of it runs on a model thread)."""
    pcm: list[bytes] = []
    calls: dict[str, int] = {}  # call_id -> its index in the reply
    async for event in conv.events():
        if event.type == "text_delta":
            yield _line({"type": "text", "delta": event.delta})
        elif event.type == "audio_chunk":
            if job.stream:
                yield _line({"type": "audio", "data": base64.b64encode(event.pcm).decode()})
            else:
                pcm.append(event.pcm)
        elif event.type == "function_call_started":
            index = calls.setdefault(event.call.call_id, len(calls))
            yield _line({"type": "call", "index": index, "call_id": event.call.call_id, "name": event.call.name})
        elif event.type == "function_call_delta":
            yield _line({"type": "call_arguments", "index": calls[event.call.call_id], "delta": event.delta})
        elif event.type == "error":
            yield _line({"type": "error", "code": event.code, "message": event.message})
        elif event.type == "response_done":
            finished[0] = True
            if job.output_audio and not job.stream and (pcm or not event.calls):  # a bare call has no audio
                fmt = "pcm" if job.audio_format == "pcm16" else job.audio_format
                data = await asyncio.to_thread(_encoded_b64, b"".join(pcm), fmt)
                yield _line({"type": "audio_file", "data": data, "format": job.audio_format})
            yield _line({
                "type": "done", "status": event.status, "reason": event.reason, "text": event.text,
                "audio_ms": round(event.audio_ms, 1), "output_tokens": event.output_tokens,
                "prompt_tokens": event.prompt_tokens,
                "calls": [{"call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in event.calls],
            })
            return


def _encoded_b64(pcm: bytes, fmt) -> str:
    return base64.b64encode(encode_audio(pcm, fmt)).decode()


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


async def _close(conv, slot: _Slot, backend=None) -> None:
    """Close the conversation (its reply is cancelled: the model threads stop at their next
    step) and free the slot; with ``backend`` (a reply that did not finish) only once the
    backend's model threads have run everything queued so far, so the slot is never free while
    the abandoned reply still holds a model thread."""
    try:
        if conv is not None:
            await conv.close()
        if backend is not None:
            t0 = time.perf_counter()
            futures = [asyncio.wrap_future(f) for f in backend.threads.barrier()]
            if futures:
                _, pending = await asyncio.wait(futures, timeout=MODEL_STOP_WAIT_S)
                if pending:
                    log.error("REST request %s: the model threads did not stop within %.0f s of a cancel; "
                              "freeing its slot anyway", slot.request_id, MODEL_STOP_WAIT_S)
            log.info("REST request %s cancelled: model threads idle after %.0f ms", slot.request_id,
                     (time.perf_counter() - t0) * 1000)
    finally:
        slot.release()


async def _close_stream(stream, slot: _Slot) -> None:
    try:
        if stream is not None:
            await stream.aclose()
    finally:
        slot.release()
