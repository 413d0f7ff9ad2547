"""OpenTelemetry tracing (issue 36): off by default, one switch for the gateway and the workers.

On when ``telemetry.otlp_endpoint`` is set, or, when the config leaves it unset, when the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` is (the config wins when both are). Spans go over OTLP/HTTP
(protobuf) to ``<endpoint>/v1/traces`` through a ``BatchSpanProcessor``; :func:`shutdown` flushes
them (the apps' lifespans call it, and ``atexit`` does for anything else).

Off, nothing here imports the OpenTelemetry SDK or exporter, :func:`enabled` is False and the
callers skip their hooks: no span objects, no extra headers. This module is shared by both
processes and imports nothing from the model side (``tests/unit/test_layering.py``).

Context goes gateway -> worker as a W3C ``traceparent`` header (:func:`trace_headers` on the
gateway's side, :func:`extract` on the worker's).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.config import TelemetryConfig

log = logging.getLogger(__name__)

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_PATH = "/v1/traces"
GEN_AI_SYSTEM = "omniduplex"

_lock = threading.Lock()
_tracer: Any = None  # an opentelemetry Tracer while on
_provider: Any = None
_include_content = False


def resolve_endpoint(config: TelemetryConfig) -> str | None:
    """The OTLP/HTTP base URL in effect: the config's, else ``OTEL_EXPORTER_OTLP_ENDPOINT``, else None (off)."""
    endpoint = config.otlp_endpoint or os.environ.get(ENDPOINT_ENV, "").strip() or None
    return endpoint.rstrip("/") if endpoint else None


def enabled() -> bool:
    return _tracer is not None


def include_content() -> bool:
    """``telemetry.include_content``: text (prompts, transcripts, tool arguments and results) may go on spans."""
    return _include_content


def setup(config: TelemetryConfig, instance: str) -> bool:
    """Start exporting when the config (or the env) names an endpoint; False, importing nothing, when not.

    ``instance``: this process in the traces (``gateway``, ``w0``), as ``service.instance.id``."""
    global _tracer, _provider, _include_content
    endpoint = resolve_endpoint(config)
    if endpoint is None:
        return False
    with _lock:
        if _tracer is not None:
            return True
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        resource = Resource.create({"service.name": config.service_name, "service.instance.id": instance,
                                    "omniduplex.process": "gateway" if instance == "gateway" else "worker"})
        provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint + TRACES_PATH)))
        _provider, _include_content = provider, config.include_content
        _tracer = provider.get_tracer("omniduplex")
        atexit.register(shutdown)
    log.info("tracing on: OTLP/HTTP to %s%s, sample ratio %g, content %s", endpoint, TRACES_PATH,
             config.sample_ratio, "included" if config.include_content else "left out")
    return True


def shutdown() -> None:
    """Flush what is batched and stop (idempotent): a process's last spans reach the collector."""
    global _tracer, _provider
    with _lock:
        provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:  # noqa: BLE001 - exporting must never break a shutdown
            log.warning("flushing the trace exporter failed", exc_info=True)


def start_span(name: str, *, parent: Any = None, attributes: dict[str, Any] | None = None, server: bool = False,
               start_time: float | None = None) -> Any:
    """A started span, or None when off. ``parent``: a span or a context from :func:`extract`
    (default: the current context); ``start_time``: wall-clock seconds."""
    tracer = _tracer
    if tracer is None:
        return None
    from opentelemetry import trace

    if parent is not None and isinstance(parent, trace.Span):
        parent = trace.set_span_in_context(parent)
    return tracer.start_span(name, context=parent, attributes=_clean(attributes),
                             kind=trace.SpanKind.SERVER if server else trace.SpanKind.INTERNAL,
                             start_time=None if start_time is None else int(start_time * 1e9))


def end_span(span: Any, attributes: dict[str, Any] | None = None, *, error: str | None = None,
             end_time: float | None = None) -> None:
    """Set the last attributes and end ``span`` (None: nothing). ``error``: the error type, which
    also marks the span's status as an error."""
    if span is None:
        return
    if attributes:
        span.set_attributes(_clean(attributes))
    if error:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=None if end_time is None else int(end_time * 1e9))


def set_attributes(span: Any, attributes: dict[str, Any]) -> None:
    if span is not None:
        span.set_attributes(_clean(attributes))


def trace_headers(span: Any) -> dict[str, str]:
    """``{"traceparent": ...}`` (and ``tracestate``) naming ``span`` as the parent; {} for None."""
    if span is None:
        return {}
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def extract(headers: Any) -> Any:
    """The context a ``traceparent`` header carries (any mapping with ``get``); None when off."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {k: v for k in ("traceparent", "tracestate") if (v := headers.get(k))}
    return TraceContextTextMapPropagator().extract(carrier)


def use_span(span: Any) -> Any:
    """Make ``span`` the current one for this task and the tasks it starts; returns a token for :func:`reset`."""
    from opentelemetry import context, trace

    return context.attach(trace.set_span_in_context(span))


def reset(token: Any) -> None:
    from opentelemetry import context

    context.detach(token)


def _clean(attributes: dict[str, Any] | None) -> dict[str, Any] | None:
    """Attributes without None values (OpenTelemetry drops them with a warning)."""
    if not attributes:
        return attributes
    return {k: v for k, v in attributes.items() if v is not None}
