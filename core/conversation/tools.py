"""Tools: the calls a reply makes, routed to the client (a function) or run by the server (an
MCP server's tool); the listings and the model's view of them are ``mcp_tools.py``.

A call the model makes of an MCP server's tool runs when the model's turn ends, inside the same
response (``response.mcp_call.*``), and its item joins the history; a follow-up reply then reads
the result and speaks it, with no ``response.create`` from the client. A call that needs the
user's approval ends the response as an ``mcp_approval_request``; once the user approves, the
next reply runs it first.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Protocol

from core.conversation.config import ConversationConfig
from core.conversation.events import ConversationEvent, FunctionCall, McpCallFinished, McpCallRunning
from core.conversation.items import Item
from core.conversation.mcp_tools import SEPARATOR, McpTools, ToolOutcome, for_model, pending_approvals
from core.conversation.reply import ReplyJob, Response
from core.conversation.runtime import Runtime
from core.ids import new_id

MAX_TOOL_ROUNDS = 4  # MCP results spoken by follow-up replies in a row; the last may call no tool
CALL_POLL_S = 0.05  # how often a running MCP call checks whether its reply was cancelled


class ReplyHost(Protocol):
    """What tool calls need of the replies that make them (``Replies``)."""

    def add_call(self, resp: Response, call: FunctionCall) -> None: ...

    def emit_for(self, resp: Response, event: ConversationEvent) -> None: ...

    def run(self, resp: Response, cfg: ConversationConfig, instructions: str | None) -> None: ...


class ToolCalls:
    """One conversation's tool calls. ``replies`` emits their events inside the reply that made
    them and runs the follow-up reply."""

    def __init__(self, rt: Runtime, mcp: McpTools, replies: ReplyHost) -> None:
        self.rt = rt
        self.mcp = mcp
        self.replies = replies

    def new_call(self, name: str) -> FunctionCall:
        """The call a reply begins: an MCP server's tool when ``name`` routes to one (the server
        runs it, or asks the user first), else a function the client runs."""
        call = FunctionCall(new_id("item"), new_id("call"), name)
        route = self.mcp.route(name)
        if route is not None:
            server, tool = route
            call = replace(call, server_label=server.server_label, tool=tool.name,
                           approval=server.needs_approval(tool.name, tool.read_only))
        return call

    async def prepare(self, resp: Response, job: ReplyJob) -> None:
        """Before the model: the MCP servers' tools join the reply's functions (their listings
        awaited), and calls the user has approved since run first, so the model reads their results."""
        job.add_functions(await self.mcp.functions(job.config.mcp_servers))
        for request, _answer in pending_approvals(self.rt.items.snapshot()):
            if resp.cancelled:
                return
            call = FunctionCall(new_id("item"), new_id("call"), f"{request.server_label}{SEPARATOR}{request.name}",
                                request.arguments or "{}", True, request.server_label, request.name,
                                approval_request_id=request.item_id)
            self.replies.add_call(resp, call)
            item = await self._run(resp, len(resp.calls) - 1)
            job.items = job.items + for_model([item])

    async def run_calls(self, resp: Response) -> bool:
        """After the model: run the MCP calls it made (approval requests wait for the user);
        True if any ran, so a follow-up reply speaks the results."""
        ran = False
        if any(c.kind == "mcp_call" for c in resp.calls):
            while resp.held and not resp.cancelled:  # a speculative reply: only once the user's turn is over
                await asyncio.sleep(CALL_POLL_S)
        for index, call in enumerate(list(resp.calls)):
            if resp.cancelled:
                break
            if call.kind == "mcp_call" and call.complete and call.output is None and call.error is None:
                await self._run(resp, index)
                ran = True
        return ran and not resp.cancelled

    async def _run(self, resp: Response, index: int) -> Item:
        """Run one MCP call (its events, then its item in the history); a cancelled reply
        cancels the call too."""
        call = resp.calls[index]
        self.replies.emit_for(resp, McpCallRunning(resp.response_id, call))
        server = self.mcp.server(call.server_label or "")
        if server is None:
            outcome = ToolOutcome(error={"type": "tool_execution_error",
                                         "message": f"MCP server {call.server_label!r} is no longer in the session"})
        else:
            task = self.rt.loop.create_task(self.mcp.run(server, call.tool or "", call.arguments))
            while not task.done():
                await asyncio.wait({task}, timeout=CALL_POLL_S)
                if resp.cancelled and not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            outcome = (ToolOutcome(error={"type": "tool_execution_error", "message": "cancelled"})
                       if task.cancelled() else task.result())
        call = resp.calls[index] = replace(call, output=outcome.output, error=outcome.error)
        item = Item("assistant", item_id=call.item_id, type="mcp_call", server_label=call.server_label,
                    name=call.tool, arguments=call.arguments, output=call.output, error=call.error,
                    approval_request_id=call.approval_request_id, parts=[])
        if resp.in_conversation:
            self.rt.remember(item)
        if not resp.cancelled:
            self.replies.emit_for(resp, McpCallFinished(resp.response_id, call))
        return item

    def speak_results(self, resp: Response, job: ReplyJob) -> None:
        """A follow-up reply reads the MCP results and speaks (no client ``response.create``).
        After ``MAX_TOOL_ROUNDS`` in a row, the last may call no tool."""
        follow = Response(new_id("resp"), new_id("item"), resp.output_audio, True, resp.metadata,
                          tool_round=resp.tool_round + 1)
        cfg = job.config
        if follow.tool_round >= MAX_TOOL_ROUNDS or cfg.tool_choice not in ("auto", "none"):
            cfg = cfg.model_copy(update={"tool_choice": "auto" if follow.tool_round < MAX_TOOL_ROUNDS else "none"})
        self.replies.run(follow, cfg, job.system)
