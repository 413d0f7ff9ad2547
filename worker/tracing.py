"""The worker's spans (issue 36), used only while tracing is on (``core/telemetry.py``).

- ``realtime.session``: one per session, the child of the gateway's span (its ``traceparent``).
- ``turn``: one per reply, built afterwards from the reply's ``session.metrics`` (the dict
  ``worker/reply_events.py`` makes): it starts where the user's turn was decided to have ended
  (``end_of_turn_ms`` + ``asr_ms`` before the reply's start, when known) and ends at the reply's
  end (``start_epoch`` + ``e2e_ms``), with one child per stage on the same timeline:
  ``end_of_turn`` -> ``asr`` -> reply start -> ``llm`` (first text) -> ``tts`` (first audio).
- ``rest <path>``: one per internal REST job (``RestSpans``, an ASGI middleware).

No text or audio goes on these spans: the metrics carry none.
"""

from __future__ import annotations

from typing import Any

from core import telemetry
from core.protocol import TURN_STAGES


class SessionTrace:
    """One realtime session's span and the turns under it."""

    __slots__ = ("span", "model", "backend", "_token")

    def __init__(self, headers: Any, backend: str, model: str, session_id: str, worker_id: str) -> None:
        self.model, self.backend = model, backend
        self.span = telemetry.start_span("realtime.session", parent=telemetry.extract(headers), server=True,
                                         attributes={
            "gen_ai.system": telemetry.GEN_AI_SYSTEM, "gen_ai.operation.name": "realtime",
            "gen_ai.request.model": model, "omniduplex.backend": backend, "omniduplex.session_id": session_id,
            "omniduplex.worker.id": worker_id})
        # The session's tasks (its MCP calls among them) start under this span.
        self._token = telemetry.use_span(self.span)

    def turn(self, metrics: dict[str, Any]) -> None:
        turn_span(self.span, metrics, self.model, self.backend)

    def end(self, reason: str, close_code: int | None) -> None:
        telemetry.reset(self._token)
        telemetry.end_span(self.span, {"omniduplex.end_reason": reason, "omniduplex.close_code": close_code})


def turn_span(parent: Any, metrics: dict[str, Any], model: str, backend: str) -> None:
    """The ``turn`` span of one reply and its stage children, placed on the wall clock."""
    start = metrics.get("start_epoch")
    e2e = metrics.get("e2e_ms")
    if not start or e2e is None:
        return
    stages = metrics.get("stages") or {}
    eot, asr, llm, tts = (stages.get(f"{k}_ms") for k in TURN_STAGES)
    end = start + e2e / 1000
    asr_start = start - (asr or 0) / 1000
    eot_start = asr_start - (eot or 0) / 1000
    span = telemetry.start_span("turn", parent=parent, start_time=eot_start, attributes={
        "gen_ai.system": telemetry.GEN_AI_SYSTEM, "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
        "gen_ai.response.id": metrics.get("response_id"),
        "gen_ai.usage.input_tokens": metrics.get("input_tokens"),
        "gen_ai.usage.output_tokens": metrics.get("output_tokens"),
        "omniduplex.backend": backend, "omniduplex.status": metrics.get("status"),
        "omniduplex.interrupted": bool(metrics.get("interrupted")),
        "omniduplex.ttft_ms": metrics.get("ttft_ms"), "omniduplex.ttfp_ms": metrics.get("ttfp_ms"),
        "omniduplex.v2v_ms": metrics.get("v2v_ms"), "omniduplex.e2e_ms": e2e,
        "omniduplex.audio_ms": metrics.get("audio_ms"),
        "omniduplex.stage.end_of_turn_ms": eot, "omniduplex.stage.asr_ms": asr,
        "omniduplex.stage.llm_ms": llm, "omniduplex.stage.tts_ms": tts})
    placed = (("end_of_turn", eot_start, eot), ("asr", asr_start, asr), ("llm", start, llm),
              ("tts", start + (llm or 0) / 1000, tts if llm is not None else None))
    for name, t0, ms in placed:
        if ms is not None:
            child = telemetry.start_span(name, parent=span, start_time=t0,
                                         attributes={"omniduplex.stage": name, "omniduplex.stage_ms": ms})
            telemetry.end_span(child, end_time=t0 + ms / 1000)
    telemetry.end_span(span, end_time=max(end, eot_start))


class RestSpans:
    """ASGI middleware: a span per internal REST job (``/internal/...``), the child of the gateway's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/internal/"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()
                   if k in (b"traceparent", b"tracestate")}
        span = telemetry.start_span(f"rest {scope['path']}", parent=telemetry.extract(headers), server=True,
                                    attributes={"http.request.method": scope.get("method"),
                                                "http.route": scope["path"], "gen_ai.system": telemetry.GEN_AI_SYSTEM})
        status: dict[str, int] = {}

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except BaseException as exc:
            telemetry.end_span(span, error=type(exc).__name__)
            raise
        code = status.get("code")
        telemetry.end_span(span, {"http.response.status_code": code},
                           error=f"http_{code}" if code is not None and code >= 500 else None)
