"""The worker's MCP client for one session: the ``McpConnector`` that ``core/conversation/mcp_tools.py``
calls to list a server's tools and run calls (the ``mcp`` package's client over streamable HTTP).

The only module that imports ``mcp``: the gateway never loads it. What the operator allows is
enforced here: ``tools.mcp.allowed_hosts`` (checked before any connection, and redirects are not
followed), the listing and per-call timeouts, and the size caps. A session's ``headers`` and
``authorization`` go to its MCP server only, never into a log line or an error message.

One connection per server label, opened at listing and kept for the session: the ``mcp`` client's
context must be entered and left by one task, so a small task holds it open while calls are made
from the replies' own tasks (a call cancelled with its reply is cancelled at the server too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from core import telemetry
from core.config import McpConfig
from core.conversation.config import McpServerTool
from core.conversation.mcp_tools import ListedTool, McpFailure, ToolOutcome

log = logging.getLogger(__name__)
# httpx2 logs each request's URL at INFO; a URL may carry a token in its query.
logging.getLogger("httpx2").setLevel(logging.WARNING)

MAX_PAGES = 16  # tools/list pages read from one server
CLOSE_WAIT_S = 2.0
CUT_NOTE = "\n[cut: {n} more characters]"
REDACTED = "[redacted]"


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


def without_secrets(event: Any) -> Any:
    """A client event as a recording may keep it: MCP tools' ``headers`` values and
    ``authorization`` replaced (``session.update`` and ``response.create``)."""
    if not isinstance(event, dict):
        return event
    body = event.get("session") if event.get("type") == "session.update" else event.get("response")
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list) or not any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools):
        return event
    clean = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "mcp":
            tool = dict(tool)
            if isinstance(tool.get("headers"), dict):
                tool["headers"] = {k: REDACTED for k in tool["headers"]}
            if tool.get("authorization") is not None:
                tool["authorization"] = REDACTED
        clean.append(tool)
    key = "session" if event.get("type") == "session.update" else "response"
    return {**event, key: {**body, "tools": clean}}


class _Link:
    """One open MCP session with one server, held open by its own task."""

    def __init__(self, server: McpServerTool, timeout_s: float) -> None:
        self.server = server
        self._http = httpx2.AsyncClient(headers=server.secret_headers(), timeout=httpx2.Timeout(timeout_s),
                                        follow_redirects=False)
        self.client = Client(streamable_http_client(server.server_url, http_client=self._http),
                             read_timeout_seconds=timeout_s)
        self.opened: asyncio.Future = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self.dead = False
        self._task = asyncio.create_task(self._hold(), name=f"mcp:{server.server_label}")

    async def _hold(self) -> None:
        try:
            async with self.client:
                self.opened.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - nested groups from the client's task group
            if not self.opened.done():
                self.opened.set_exception(McpFailure(_reason(exc, self.server.server_url)))
            elif not isinstance(_leaf(exc), asyncio.CancelledError):
                log.warning("MCP server %r: connection lost: %s", self.server.server_label,
                            _reason(exc, self.server.server_url))
        finally:
            self.dead = True
            await self._http.aclose()

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
            link = self._links[server.server_label] = _Link(server, self.config.list_timeout_s)
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
            raise McpFailure(f"tools/list failed: {exc}") from None
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
        try:
            result = await asyncio.wait_for(link.client.call_tool(name, arguments, read_timeout_seconds=timeout),
                                            timeout + 1.0)
        except (TimeoutError, MCPError) as exc:
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
