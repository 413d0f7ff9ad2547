"""A real MCP server for tests and the tools bench: the ``mcp`` package's own ``MCPServer`` over
streamable HTTP (uvicorn, in a thread), with a few small tools, plus a copy that wants a bearer
token. Each call is counted, so a test can tell whether the server was really asked."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from devtools.mcp_serve import free_port, serve

TOKEN = "test-mcp-token-123"
WEATHER = {"Paris": "sunny, 21 degrees", "Oslo": "snowing, minus 3 degrees", "Rome": "cloudy, 17 degrees"}


@dataclass
class McpTestServer:
    """A running server: ``url`` (…/mcp), the calls it received, how to stop it."""

    url: str
    calls: Counter = field(default_factory=Counter)
    last_arguments: dict = field(default_factory=dict)
    _server: uvicorn.Server | None = None

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True


def _build(state: McpTestServer) -> MCPServer:
    server = MCPServer("omniduplex-test-tools")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def get_weather(city: str) -> str:
        """The weather today in a city."""
        state.calls["get_weather"] += 1
        state.last_arguments["get_weather"] = {"city": city}
        return f"The weather in {city} is {WEATHER.get(city.strip().title(), 'mild, 15 degrees')}."

    @server.tool()
    def add_event(title: str, day: str) -> str:
        """Add an event to the user's calendar."""
        state.calls["add_event"] += 1
        state.last_arguments["add_event"] = {"title": title, "day": day}
        return f"Added '{title}' on {day}."

    @server.tool()
    def broken(reason: str) -> str:
        """Check the stock of a product."""
        state.calls["broken"] += 1
        raise RuntimeError("the stock database is offline")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Wait, then answer."""
        state.calls["slow"] += 1
        await asyncio.sleep(seconds)
        return "done"

    @server.tool()
    def big(size: int) -> str:
        """A long answer."""
        state.calls["big"] += 1
        return "x" * size

    return server


class _BearerGate:
    """ASGI: 401 unless ``Authorization: Bearer TOKEN`` came."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization", b"") != f"Bearer {TOKEN}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await self.app(scope, receive, send)


def start_mcp_server(*, needs_token: bool = False) -> McpTestServer:
    """Start a server on a free loopback port; returns once it accepts connections."""
    state = McpTestServer("")
    app = _build(state).streamable_http_app()
    state.url, state._server = serve(_BearerGate(app) if needs_token else app)
    return state


def unused_url() -> str:
    """A loopback URL nothing listens on."""
    return f"http://127.0.0.1:{free_port()}/mcp"


@pytest.fixture(scope="module")
def mcp_server():
    """A started test MCP server for a test module (import this name into the module)."""
    server = start_mcp_server()
    yield server
    server.stop()

