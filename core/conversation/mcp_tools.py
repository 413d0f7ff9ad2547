"""MCP tools the server runs for a session (``session.tools`` entries of ``type: "mcp"``).

Model-neutral: the model sees each listed tool as an ordinary function named
``<server_label>__<tool>``, so every backend that calls functions calls MCP tools too. This module
keeps, per conversation, each server's listing (an ``mcp_list_tools`` item), maps a call of such a
function back to its server and tool, and renders the MCP items as the function calls and results
a model reads. The I/O (connecting, listing, calling, timeouts, size caps, the allowed hosts) is
a ``McpConnector`` the worker hands in (``worker/mcp_client.py``): this package never imports the
``mcp`` client.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.conversation.config import FunctionTool, McpServerTool
from core.conversation.events import McpListFinished, McpListStarted
from core.conversation.items import Item
from core.conversation.runtime import Runtime
from core.errors import InvalidInputError

log = logging.getLogger(__name__)

SEPARATOR = "__"  # <server_label>__<tool>: the function name the model calls
DECLINED = "The user declined this call."
FAILED = "The tool failed: "


@dataclass(frozen=True, slots=True)
class ListedTool:
    """One tool as an MCP server lists it."""

    name: str
    input_schema: dict
    description: str | None = None
    read_only: bool = False
    annotations: dict | None = None

    def wire(self) -> dict:
        """As the ``mcp_list_tools`` item shows it."""
        out: dict[str, Any] = {"name": self.name, "input_schema": self.input_schema}
        if self.description is not None:
            out["description"] = self.description
        if self.annotations is not None:
            out["annotations"] = self.annotations
        return out


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A call's result: ``output`` (text the model reads), or ``error`` in OpenAI's shapes
    (``{"type": "tool_execution_error" | "protocol_error" | "http_error", "message", "code"?}``)."""

    output: str | None = None
    error: dict | None = None


class McpFailure(Exception):
    """Listing failed: the server is unreachable, refused, or did not answer in time."""


class McpConnector(Protocol):
    """The worker's MCP client for one session (``worker/mcp_client.py``)."""

    async def list_tools(self, server: McpServerTool) -> list[ListedTool]:
        """All the server's tools (its own limits applied); raises ``McpFailure`` with a reason."""
        ...

    async def call_tool(self, server: McpServerTool, name: str, arguments: dict) -> ToolOutcome:
        """Run one call; never raises for the call's own failure (that is an ``error``)."""
        ...

    async def forget(self, server_label: str) -> None:
        """Close the connection to a server the session no longer names."""
        ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class Listing:
    """One server's tools, as listed for this session."""

    server: McpServerTool
    item: Item
    task: asyncio.Task | None = None
    tools: list[ListedTool] = field(default_factory=list)  # offered to the model
    error: str | None = None


class McpTools:
    """A conversation's MCP servers: listings, the functions they give the model, routing."""

    def __init__(self, rt: Runtime) -> None:  # its items, events and tasks
        self._rt = rt
        self.connector: McpConnector | None = None
        self._listings: dict[str, Listing] = {}

    # ------------------------------------------------------------------ listing

    def sync(self, servers: list[McpServerTool], *, keep_others: bool = False) -> None:
        """List each server not yet listed as it is now (a changed URL or header lists it
        again); with ``keep_others`` False, forget servers no longer named."""
        named = {s.server_label for s in servers}
        if not keep_others:
            for label in [x for x in self._listings if x not in named]:
                self._drop(label)
        for server in servers:
            listing = self._listings.get(server.server_label)
            if listing is not None and listing.server == server:
                continue
            if listing is not None:
                self._drop(server.server_label)
            self._start(server)

    def _drop(self, label: str) -> None:
        listing = self._listings.pop(label)
        if listing.task is not None and not listing.task.done():
            listing.task.cancel()
        if self.connector is not None:
            self._rt.spawn(self.connector.forget(label))

    def _start(self, server: McpServerTool) -> None:
        rt = self._rt
        previous = rt.items.last_id()
        item = rt.remember(Item("assistant", type="mcp_list_tools", server_label=server.server_label, tools=[],
                                   parts=[]))
        listing = self._listings[server.server_label] = Listing(server, item)
        rt.emit(McpListStarted(item.item_id, server.server_label, previous))
        listing.task = rt.spawn(self._list(listing))

    async def _list(self, listing: Listing) -> None:
        label = listing.server.server_label
        try:
            if self.connector is None:
                raise McpFailure("MCP tools are not enabled on this server")
            tools = await self.connector.list_tools(listing.server)
        except McpFailure as exc:
            listing.error = f"MCP server {label!r}: {exc}"
            self._rt.emit(McpListFinished(listing.item.item_id, label, (), listing.error))
            return
        shown = [t for t in tools if listing.server.offers(t.name, t.read_only)]
        # the backend checks each schema (the cascade compiles a grammar): off the event loop
        rt = self._rt
        listing.tools = await rt.in_thread(rt.backend.io_pool, self._usable_tools, label, shown)
        listing.item.tools = [t.wire() for t in shown]
        self._rt.emit(McpListFinished(listing.item.item_id, label, tuple(listing.item.tools)))

    def _usable_tools(self, label: str, tools: list[ListedTool]) -> list[ListedTool]:
        return [t for t in tools if self._usable(label, t)]

    def _usable(self, label: str, tool: ListedTool) -> bool:
        """A tool the model can call: a valid function name, a schema the backend can enforce."""
        try:
            function = self._function(label, tool)
            self._rt.backend.check_tools([function])
        except (ValueError, InvalidInputError) as exc:
            log.warning("MCP server %r: tool %r left out: %s", label, tool.name, exc)
            return False
        return True

    @staticmethod
    def _function(label: str, tool: ListedTool) -> FunctionTool:
        description = tool.description or ""
        return FunctionTool(name=f"{label}{SEPARATOR}{tool.name}", description=description[:4096],
                            parameters=tool.input_schema if isinstance(tool.input_schema, dict) else {})

    async def functions(self, servers: list[McpServerTool]) -> list[FunctionTool]:
        """The functions these servers give the model, once their listings are done (each is
        bounded by the connector's timeout). A server named only by this reply is listed now."""
        self.sync(servers, keep_others=True)
        out: list[FunctionTool] = []
        for server in servers:
            listing = self._listings.get(server.server_label)
            if listing is None:
                continue
            if listing.task is not None and not listing.task.done():
                await asyncio.shield(listing.task)
            out += [self._function(server.server_label, t) for t in listing.tools]
        return out

    def error_of(self, label: str) -> str | None:
        listing = self._listings.get(label)
        return None if listing is None else listing.error

    # ------------------------------------------------------------------ calls

    def route(self, function_name: str) -> tuple[McpServerTool, ListedTool] | None:
        """The server and tool a function name stands for; None for a client's function."""
        label, sep, name = function_name.partition(SEPARATOR)
        listing = self._listings.get(label) if sep else None
        if listing is None:
            return None
        tool = next((t for t in listing.tools if t.name == name), None)
        return None if tool is None else (listing.server, tool)

    async def run(self, server: McpServerTool, tool: str, arguments: str) -> ToolOutcome:
        """One call through the connector; bad arguments and a missing connector are errors too."""
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return ToolOutcome(error={"type": "tool_execution_error", "message": f"arguments are not JSON: {exc}"})
        if not isinstance(args, dict):
            return ToolOutcome(error={"type": "tool_execution_error", "message": "arguments must be a JSON object"})
        if self.connector is None:
            return ToolOutcome(error={"type": "protocol_error", "code": -32603,
                                      "message": "MCP tools are not enabled on this server"})
        return await self.connector.call_tool(server, tool, args)

    def server(self, label: str) -> McpServerTool | None:
        listing = self._listings.get(label)
        return None if listing is None else listing.server

    async def close(self) -> None:
        for listing in self._listings.values():
            if listing.task is not None and not listing.task.done():
                listing.task.cancel()
        self._listings.clear()
        if self.connector is not None:
            await self.connector.close()


def for_model(items: list[Item]) -> list[Item]:
    """The history as a model reads it: an MCP call becomes a function call and its result (a
    failure or a declined approval as the text the model speaks from); listings and approval
    bookkeeping are left out."""
    answers = {i.approval_request_id: i for i in items if i.type == "mcp_approval_response"}
    out: list[Item] = []
    for item in items:
        if item.type == "mcp_call":
            text = item.output if item.error is None else FAILED + str(item.error.get("message", "error"))
            out += _call_pair(item, text or "")
        elif item.type == "mcp_approval_request":
            answer = answers.get(item.item_id)
            if answer is not None and not answer.approve:
                out += _call_pair(item, DECLINED + (f" ({answer.reason})" if answer.reason else ""))
        elif item.type not in ("mcp_list_tools", "mcp_approval_response"):
            out.append(item)
    return out


def _call_pair(item: Item, output: str) -> list[Item]:
    name = f"{item.server_label}{SEPARATOR}{item.name}"
    return [Item("assistant", item_id=item.item_id + "_call", type="function_call", call_id=item.item_id, name=name,
                 arguments=item.arguments or "{}", parts=[]),
            Item("user", item_id=item.item_id + "_output", type="function_call_output", call_id=item.item_id,
                 output=output, parts=[])]


def pending_approvals(items: list[Item]) -> list[tuple[Item, Item]]:
    """(request, approving answer) pairs whose call has not run yet."""
    ran = {i.approval_request_id for i in items if i.type == "mcp_call" and i.approval_request_id}
    requests = {i.item_id: i for i in items if i.type == "mcp_approval_request"}
    return [(requests[a.approval_request_id], a) for a in items
            if a.type == "mcp_approval_response" and a.approve and a.approval_request_id in requests
            and a.approval_request_id not in ran]
