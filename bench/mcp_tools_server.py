"""The tools set's four tools behind a real MCP server (the ``mcp`` package's low-level ``Server``,
so each tool lists exactly the JSON schema the function row offers), for the MCP row of
``python -m bench tools``. Each call answers a fixed sentence, so what is measured is the
decision and the round trip, not a tool's own work."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server

from bench.sets.tools import TOOLS
from devtools.mcp_serve import serve

ANSWERS = {
    "get_weather": "It is 18 degrees and cloudy.",
    "get_time": "It is 14:05.",
    "set_timer": "The timer is set.",
    "convert_currency": "That is 92 in the target currency.",
}


def build_server() -> Server:
    async def list_tools(_ctx, _params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t["name"], description=t["description"],
                                                       input_schema=t["parameters"]) for t in TOOLS])

    async def call_tool(_ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        answer = ANSWERS.get(params.name)
        if answer is None:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"no tool {params.name}")],
                                        is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=answer)])

    return Server("omniduplex-bench-tools", on_list_tools=list_tools, on_call_tool=call_tool)


def start() -> tuple[str, Any]:
    """(the server's URL, the uvicorn server: set ``should_exit`` to stop it)."""
    return serve(build_server().streamable_http_app())
