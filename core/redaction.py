"""MCP credentials as events and recordings may show them: never.

An MCP tool's ``headers`` and ``authorization`` go to its server only. Every place that echoes a
client's config (the Live session resource, the recording of a client event) redacts them with
these functions, so there is one rule for every dialect: the keys stay (a client sees what it
set), the values become ``REDACTED``. The Realtime session's own echo leaves them out altogether
(``McpServerTool`` excludes them from every dump).
"""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"


def tools_without_secrets(tools: Any) -> Any:
    """A tools list with each MCP tool's ``headers`` values and ``authorization`` replaced
    (anything else as given; not a list: unchanged)."""
    if not isinstance(tools, list) or not any(isinstance(t, dict) and t.get("type") == "mcp" for t in tools):
        return tools
    clean = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "mcp":
            tool = dict(tool)
            if isinstance(tool.get("headers"), dict):
                tool["headers"] = {k: REDACTED for k in tool["headers"]}
            if tool.get("authorization") is not None:
                tool["authorization"] = REDACTED
        clean.append(tool)
    return clean


def without_secrets(event: Any) -> Any:
    """A Realtime client event as a recording may keep it: the MCP tools of ``session.update``
    and ``response.create`` without their credentials."""
    if not isinstance(event, dict):
        return event
    key = "session" if event.get("type") == "session.update" else "response"
    body = event.get(key)
    if not isinstance(body, dict) or "tools" not in body:
        return event
    tools = tools_without_secrets(body["tools"])
    return event if tools is body["tools"] else {**event, key: {**body, "tools": tools}}
