"""The worker's MCP client for one session: the ``McpConnector`` that ``core/conversation/mcp_tools.py``
calls to list a server's tools and run calls (the ``mcp`` package's client over streamable HTTP).

The only module that imports ``mcp``: the gateway never loads it. What the operator allows is
enforced here: ``tools.mcp.allowed_hosts`` (checked before any connection, and redirects are not
followed), the addresses a server's name resolves to (resolved once per connection and pinned:
``checked_addresses``, ``_PinnedBackend``), the listing and per-call timeouts, and the size caps
(``max_answer_bytes`` while an answer streams, ``max_result_chars`` on what the model reads). A
session's ``headers`` and ``authorization`` go to its MCP server only, never into a log line or an
error message.

One connection per server label, opened at listing and kept for the session: the ``mcp`` client's
context must be entered and left by one task, so a small task holds it open while calls are made
from the replies' own tasks (a call cancelled with its reply is cancelled at the server too).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from core import telemetry
from core.config import McpConfig
from core.conversation.config import McpServerTool
from core.conversation.mcp_tools import ListedTool, McpFailure, ToolOutcome
from core.redaction import without_secrets  # noqa: F401 - re-exported; the one rule is core/redaction.py's

log = logging.getLogger(__name__)
# httpx2 logs each request's URL at INFO; a URL may carry a token in its query.
logging.getLogger("httpx2").setLevel(logging.WARNING)

MAX_PAGES = 16  # tools/list pages read from one server
CLOSE_WAIT_S = 2.0
CUT_NOTE = "\n[cut: {n} more characters]"


def url_refusal(url: str, config: McpConfig) -> str | None:
    """Why ``url`` may not be an MCP server for this worker (None: allowed)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        return f"server_url is not a valid URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "server_url must be an http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "server_url may not carry a user name or password; send them in headers or authorization"
    if not config.allowed_hosts:
        return "MCP tools are not enabled on this server (the operator sets tools.mcp.allowed_hosts)"
    if not config.allows(parts.hostname.lower(), port):
        return (f"MCP server host {parts.hostname}:{port} is not allowed here (the operator lists MCP hosts in "
                "tools.mcp.allowed_hosts)")
    return None


async def resolve_host(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order, each once (getaddrinfo in the
    loop's executor: a slow DNS server never holds the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def non_public(address: str) -> str | None:
    """What keeps ``address`` off the public internet ('loopback', 'private', 'link-local' (the
    cloud metadata service's 169.254.169.254 too), 'multicast', ...); None for a public address. An
    IPv4 address inside IPv6 (mapped, 6to4, NAT64) is judged as itself."""
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        nat64 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in NAT64 else None
        ip = ip.ipv4_mapped or ip.sixtofour or nat64 or ip
    for kind, flag in (("unspecified", ip.is_unspecified), ("loopback", ip.is_loopback),
                       ("link-local", ip.is_link_local), ("multicast", ip.is_multicast),
                       ("reserved", ip.is_reserved), ("private", ip.is_private)):
        if flag:
            return kind
    return None if ip.is_global else "non-public"


async def checked_addresses(url: str, config: McpConfig) -> tuple[str, list[str]]:
    """(the host as connections name it, the addresses they may go to): ``url``'s host resolved
    once; a non-public address only where ``allowed_hosts`` lists that address itself, since a name
    (or '*') says nothing about where it points. Raises ``McpFailure`` when none is left."""
    parsed = httpx2.URL(url)
    host = parsed.raw_host.decode("ascii")  # as httpcore2 names it: IDNA, IPv6 without brackets
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        ipaddress.ip_address(host)
        found = [host]
    except ValueError:
        try:
            found = await resolve_host(host, port)
        except OSError:
            found = []
        if not found:
            raise McpFailure(f"could not resolve the MCP server host {host}")
    allowed = [a for a in found if non_public(a) is None or config.lists_address(a, port)]
    if not allowed:
        raise McpFailure(f"MCP server host {host} resolves to a {non_public(found[0])} address {found[0]}; "
                         "list that address in tools.mcp.allowed_hosts to allow it")
    return host, allowed


class AnswerRefused(httpx2.SSEError, httpx2.StreamError):
    """An MCP answer the worker stops reading (too large, or compressed). Both bases on purpose: the
    ``mcp`` client turns a StreamError in a JSON answer and an SSEError in an event stream into that
    request's error, where any other exception would end the whole connection."""


class _PinnedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend with every TCP connection going to the checked addresses.

    httpcore2 opens a connection with ``backend.connect_tcp(origin host, port)`` and, for https,
    ``stream.start_tls(server_hostname=origin host)``. This backend opens the socket to the first
    checked address that answers and never asks DNS again, so a second answer (rebinding) cannot
    move the session to another machine; everything above the socket keeps the name (URL, Host
    header, TLS SNI and certificate check). Any other host is refused: redirects stay on the origin,
    and no proxy is used (an httpx2 client given its own transport takes none from the environment)."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        self._host = host
        self._addresses = addresses
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        if host != self._host:
            raise httpcore2.ConnectError(f"{host} is not the MCP server's checked host")
        error: Exception | None = None
        for address in self._addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                error = exc
        assert error is not None  # checked_addresses never gives an empty list
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("MCP servers are reached over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that stops past ``cap`` bytes (None: no cap) or at once with ``refusal``."""

    def __init__(self, inner: httpx2.AsyncByteStream, guard: _Guard, cap: int | None, refusal: str | None) -> None:
        self._inner, self._guard, self._cap, self._refusal = inner, guard, cap, refusal

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._refusal is not None:
            self._guard.refuse(self._refusal)
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if self._cap is not None and read > self._cap:
                self._guard.refuse(f"the MCP server's answer exceeded {self._cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Guard(httpx2.AsyncBaseTransport):
    """The link's httpx2 transport: connections pinned to the checked addresses, each answer's body
    capped as it streams (before it is all read), compressed answers refused (identity was asked
    for; a gzip bomb would grow past any cap while decoded). A GET (the server's listen stream) is
    not capped in total: it is bounded event by event (``max_sse_event_size``)."""

    def __init__(self, host: str, addresses: list[str], cap: int) -> None:
        self.cap = cap
        self.refusals = 0  # answers refused so far; a call compares before and after
        self.last_refusal = ""
        self._inner = httpx2.AsyncHTTPTransport()
        # httpx2's transport takes no network backend: its pool (the one attribute used) is replaced by
        # the same httpcore2 pool with one; request conversion and error mapping stay httpx2's own.
        self._inner._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(), max_connections=10, max_keepalive_connections=10,
            keepalive_expiry=5.0, network_backend=_PinnedBackend(host, addresses))

    def refuse(self, why: str) -> None:
        self.refusals += 1
        self.last_refusal = why
        raise AnswerRefused(why)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower() or "identity"
        refusal = (None if encoding == "identity" else
                   f"the MCP server's answer was compressed (Content-Encoding: {encoding}), which this client does "
                   "not accept")
        cap = None if request.method == "GET" else self.cap
        if refusal is None and cap is None:
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(status_code=response.status_code, headers=response.headers,
                               stream=_CappedStream(response.stream, self, cap, refusal),
                               extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _shown_url(url: str) -> str:
    """The URL for a message: scheme, host and path; never the query (it may hold a token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _reason(exc: BaseException, url: str) -> str:
    """A connection failure in words (no headers, no query string)."""
    exc = _leaf(exc)
    where = _shown_url(url)
    if isinstance(exc, httpx2.ConnectError | ConnectionError | OSError):
        return f"could not connect to {where}"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"{where} answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return f"{where} did not answer in time"
    if isinstance(exc, MCPError):
        return f"{where} refused the MCP session: {exc}"
    return f"{where} failed: {type(exc).__name__}: {exc}"


class _Link:
    """One open MCP session with one server, held open by its own task (which first resolves and
    checks the server's addresses: a connection's addresses are fixed for its lifetime)."""

    def __init__(self, server: McpServerTool, config: McpConfig) -> None:
        self.server = server
        self.config = config
        self.client: Client  # set before ``opened`` resolves
        self.guard: _Guard | None = None
        self.opened: asyncio.Future = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self.dead = False
        self._task = asyncio.create_task(self._hold(), name=f"mcp:{server.server_label}")

    def refusal_since(self, refusals: int) -> str | None:
        """Why an answer was refused after ``refusals`` were counted (None: none was)."""
        return self.guard.last_refusal if self.guard is not None and self.guard.refusals > refusals else None

    async def _hold(self) -> None:
        http: httpx2.AsyncClient | None = None
        timeout_s, cap = self.config.list_timeout_s, self.config.max_answer_bytes
        try:
            self.guard = _Guard(*await checked_addresses(self.server.server_url, self.config), cap)
            headers = httpx2.Headers(self.server.secret_headers())
            headers["Accept-Encoding"] = "identity"
            http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout_s), follow_redirects=False,
                                      trust_env=False, transport=self.guard)
            self.client = Client(streamable_http_client(self.server.server_url, http_client=http,
                                                        max_sse_event_size=cap), read_timeout_seconds=timeout_s)
            async with self.client:
                self.opened.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - nested groups from the client's task group
            if not self.opened.done():
                self.opened.set_exception(exc if isinstance(exc, McpFailure) else McpFailure(
                    self.refusal_since(0) or _reason(exc, self.server.server_url)))
            elif not isinstance(_leaf(exc), asyncio.CancelledError):
                log.warning("MCP server %r: connection lost: %s", self.server.server_label,
                            _reason(exc, self.server.server_url))
        finally:
            self.dead = True
            if http is not None:
                await http.aclose()

    async def close(self) -> None:
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_WAIT_S)
        except (TimeoutError, Exception):  # noqa: BLE001 - closing is best effort
            self._task.cancel()


class McpClient:
    """``McpConnector`` for one session, under the operator's ``tools.mcp`` limits."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self._links: dict[str, _Link] = {}

    async def _link(self, server: McpServerTool) -> _Link:
        link = self._links.get(server.server_label)
        if link is not None and (link.dead or link.server != server):
            await self.forget(server.server_label)
            link = None
        if link is None:
            refusal = url_refusal(server.server_url, self.config)
            if refusal is not None:  # checked at session.update too; the config may have changed since
                raise McpFailure(refusal)
            link = self._links[server.server_label] = _Link(server, self.config)
        await asyncio.shield(link.opened)
        return link

    async def list_tools(self, server: McpServerTool) -> list[ListedTool]:
        try:
            return await asyncio.wait_for(self._list(server), self.config.list_timeout_s)
        except TimeoutError:
            await self.forget(server.server_label)
            raise McpFailure(f"no tools listed within {self.config.list_timeout_s:g} s") from None

    async def _list(self, server: McpServerTool) -> list[ListedTool]:
        link = await self._link(server)
        tools: list[ListedTool] = []
        cursor = None
        refusals = link.guard.refusals if link.guard is not None else 0
        try:
            for _ in range(MAX_PAGES):
                page = await link.client.list_tools(cursor=cursor)
                for tool in page.tools:
                    annotations = tool.annotations.model_dump(mode="json", exclude_none=True) if tool.annotations else None
                    tools.append(ListedTool(tool.name, dict(tool.input_schema or {}), tool.description,
                                            bool(tool.annotations and tool.annotations.read_only_hint), annotations))
                cursor = page.next_cursor
                if not cursor or len(tools) >= self.config.max_tools_per_server:
                    break
        except MCPError as exc:
            raise McpFailure(f"tools/list failed: {link.refusal_since(refusals) or exc}") from None
        return tools[: self.config.max_tools_per_server]

    async def call_tool(self, server: McpServerTool, name: str, arguments: dict) -> ToolOutcome:
        if not telemetry.enabled():
            return await self._call_tool(server, name, arguments)
        # One span per call, under the session's (the current one); its text only with include_content.
        content = telemetry.include_content()
        span = telemetry.start_span(f"execute_tool {name}", attributes={
            "gen_ai.system": telemetry.GEN_AI_SYSTEM, "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name, "omniduplex.mcp.server_label": server.server_label,
            "gen_ai.tool.call.arguments": json.dumps(arguments, ensure_ascii=False) if content else None})
        started = time.perf_counter()
        outcome: ToolOutcome | None = None
        try:
            outcome = await self._call_tool(server, name, arguments)
            return outcome
        finally:
            error = None if outcome is None else (outcome.error or {}).get("type")
            telemetry.end_span(span, {
                "omniduplex.duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "gen_ai.tool.call.result": outcome.output if content and outcome is not None else None},
                error=error if outcome is not None else "cancelled")

    async def _call_tool(self, server: McpServerTool, name: str, arguments: dict) -> ToolOutcome:
        timeout = self.config.call_timeout_s
        try:
            link = await asyncio.wait_for(self._link(server), self.config.list_timeout_s)
        except McpFailure as exc:
            return ToolOutcome(error={"type": "http_error", "code": 502, "message": str(exc)})
        except TimeoutError:
            return ToolOutcome(error={"type": "http_error", "code": 504,
                                      "message": f"could not reconnect within {self.config.list_timeout_s:g} s"})
        refusals = link.guard.refusals if link.guard is not None else 0
        try:
            result = await asyncio.wait_for(link.client.call_tool(name, arguments, read_timeout_seconds=timeout),
                                            timeout + 1.0)
        except (TimeoutError, MCPError) as exc:
            if (refused := link.refusal_since(refusals)) is not None:
                return ToolOutcome(error={"type": "http_error", "code": 502, "message": refused})
            if isinstance(exc, TimeoutError) or "timed out" in str(exc):
                return ToolOutcome(error={"type": "tool_execution_error",
                                          "message": f"the tool did not answer within {timeout:g} s"})
            return ToolOutcome(error={"type": "protocol_error", "code": exc.error.code if hasattr(exc, "error")
                                      else -32603, "message": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a broken connection: the next call reconnects
            await self.forget(server.server_label)
            return ToolOutcome(error={"type": "http_error", "code": 502,
                                      "message": _reason(exc, server.server_url)})
        text = self._text(result)
        if result.is_error:
            return ToolOutcome(error={"type": "tool_execution_error", "message": text or "the tool failed"})
        return ToolOutcome(output=text)

    def _text(self, result: Any) -> str:
        """The result as the model reads it: the text parts, else the structured content as JSON;
        cut to ``max_result_chars``."""
        parts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
        if parts:
            text = "\n".join(parts)
        elif result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False)
        else:
            text = "\n".join(json.dumps(c.model_dump(mode="json", exclude_none=True)) for c in result.content)
        cap = self.config.max_result_chars
        return text if len(text) <= cap else text[:cap] + CUT_NOTE.format(n=len(text) - cap)

    async def forget(self, server_label: str) -> None:
        link = self._links.pop(server_label, None)
        if link is not None:
            await link.close()

    async def close(self) -> None:
        for label in list(self._links):
            with contextlib.suppress(Exception):
                await self.forget(label)
