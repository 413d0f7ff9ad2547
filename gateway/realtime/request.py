"""What a client asks for when it opens a realtime session, whatever the transport.

A WebSocket says it in the URL's query and headers; a WebRTC call will say it in its offer's
request. Either way the proxy gets this one frozen value, not the transport's request object.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from starlette.requests import HTTPConnection

from core.protocol import parse_extensions
from gateway.access.ephemeral_keys import Grant

DEFAULT_MODEL = "omniduplex-cascade"


@dataclass(frozen=True, slots=True)
class SessionRequest:
    beta: bool = False  # ``OpenAI-Beta: realtime=v1``: the beta dialect
    live: bool = False  # OpenAI's Live dialect (``/v1/live/sessions``), spoken by the worker's ``worker/live/``
    model: str = DEFAULT_MODEL
    app: str = "api"  # which page or API opened it (operator toggles, recordings)
    record: bool = True  # False when the client said ``record=false``
    requirements: frozenset[str] = frozenset()  # worker capabilities the session needs
    extensions: frozenset[str] = frozenset()  # extension events the client asked for
    unknown_extensions: tuple[str, ...] = ()  # asked for but unknown: reported, not fatal
    intent: str = ""  # ``transcription`` for a transcription session
    client_ip: str = "unknown"
    # Opened with an ephemeral key: the ``session.update`` (JSON) its config makes, sent to the
    # worker before any client event, and the session id the mint announced.
    initial_session: str | None = None
    session_id: str | None = None
    # A WebRTC call: the browser cancelled the echo before sending; the worker's canceller starts off.
    echo_cancelled: bool = False
    # A Live fork (``/v1/live/sessions/{id}/fork``): the stored session it starts from.
    fork_of: str | None = None


def session_request(conn: HTTPConnection, client_ip: str, grant: Grant | None = None) -> SessionRequest:
    """The request of a connection whose options are in its query string (``/v1/realtime?...``).
    With an ephemeral key's ``grant``, its dialect, model, session type and config win."""
    q = conn.query_params
    extensions, unknown = parse_extensions(q.get("extensions"))
    caps = q.get("capabilities") or ""
    request = SessionRequest(
        beta="realtime=v1" in conn.headers.get("openai-beta", ""),
        model=q.get("model") or DEFAULT_MODEL,
        app=(q.get("app") or "api")[:40],
        record=q.get("record", "true").lower() not in ("false", "0", "off"),
        requirements=frozenset(c for c in caps.split(",") if c),
        extensions=extensions,
        unknown_extensions=tuple(unknown),
        intent=q.get("intent") or "",
        client_ip=client_ip,
    )
    return granted(request, grant) if grant is not None else request


def granted(request: SessionRequest, grant: Grant) -> SessionRequest:
    """``request`` as an ephemeral key's grant shapes it (any transport): the minted model (the
    default one if the mint named none, as its answer said), never one the key's holder asks for."""
    return replace(request, beta=grant.beta, model=grant.model or DEFAULT_MODEL,
                   intent=grant.intent or request.intent, initial_session=grant.session_update(),
                   session_id=grant.session_id or None)
