"""Where the worker's MCP client may connect and how much it reads (issue 45, item 10): a server's
name is resolved once, a non-public address is refused unless ``tools.mcp.allowed_hosts`` lists
that address itself, every connection goes to the checked address (DNS rebinding cannot redirect
it), and an answer past the byte cap is cut as it streams. Resolution is made deterministic by
``localhost`` (loopback in every /etc/hosts) or a stand-in for ``worker.mcp_client.resolve_host``;
connections are watched at httpcore2's anyio backend, which every connection goes through."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpcore2
import pytest

from core.config import McpConfig
from core.conversation.config import McpServerTool
from core.conversation.mcp_tools import McpFailure
from tests.support.mcp_server import mcp_server  # noqa: F401 - a fixture
from worker.mcp_client import McpClient

REAL_CONNECT = httpcore2.AnyIOBackend.connect_tcp


def server(url: str) -> McpServerTool:
    return McpServerTool.model_validate({"type": "mcp", "server_label": "shop", "server_url": url})


def port_of(url: str) -> int:
    return urlsplit(url).port


class Connects(list):
    """The hosts TCP connections were opened to; one in ``stand_ins`` reaches the loopback test server."""

    def __init__(self) -> None:
        super().__init__()
        self.stand_ins: set[str] = set()


@pytest.fixture
def connects(monkeypatch) -> Connects:
    seen = Connects()

    async def connect_tcp(backend, host, port, *args, **kwargs):
        seen.append(host)
        if host in seen.stand_ins:
            host = "127.0.0.1"
        elif host not in ("127.0.0.1", "localhost", "::1"):
            raise httpcore2.ConnectError(f"no network in tests ({host})")
        return await REAL_CONNECT(backend, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore2.AnyIOBackend, "connect_tcp", connect_tcp)
    return seen


def fake_resolver(monkeypatch, *answers: list[str]) -> list[str]:
    """``resolve_host`` answering ``answers`` in turn (the last one again after); the names asked."""
    asked: list[str] = []

    async def resolve_host(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[min(len(asked), len(answers)) - 1]

    # raising=False: on code without the resolver the tests still run, and fail on what they check.
    monkeypatch.setattr("worker.mcp_client.resolve_host", resolve_host, raising=False)
    return asked


async def listing(config: McpConfig, url: str) -> list[str]:
    client = McpClient(config)
    try:
        return [t.name for t in await client.list_tools(server(url))]
    finally:
        await client.close()


@pytest.mark.parametrize("entries", [["localhost"], ["localhost:{port}"], ["*"]], ids=["name", "name:port", "star"])
async def test_a_name_resolving_to_loopback_is_refused(mcp_server, connects, entries):
    port = port_of(mcp_server.url)
    config = McpConfig(allowed_hosts=[e.format(port=port) for e in entries], list_timeout_s=3.0)
    with pytest.raises(McpFailure) as refused:
        await listing(config, f"http://localhost:{port}/mcp")
    assert "MCP server host localhost resolves to a loopback address" in str(refused.value)
    assert "list that address in tools.mcp.allowed_hosts to allow it" in str(refused.value)
    assert connects == []  # refused before any connection


async def test_a_wildcard_name_resolving_to_the_metadata_address_is_refused(monkeypatch, connects):
    fake_resolver(monkeypatch, ["169.254.169.254"])
    config = McpConfig(allowed_hosts=["*.example.com"], list_timeout_s=3.0)
    with pytest.raises(McpFailure) as refused:
        await listing(config, "http://metadata.example.com/mcp")
    assert "resolves to a link-local address 169.254.169.254" in str(refused.value)
    assert connects == []


async def test_an_address_literal_is_allowed_only_when_listed_itself(mcp_server, connects):
    port = port_of(mcp_server.url)
    with pytest.raises(McpFailure, match="resolves to a loopback address 127.0.0.1"):
        await listing(McpConfig(allowed_hosts=["*"], list_timeout_s=3.0), mcp_server.url)
    assert connects == []
    for listed in (["*", "127.0.0.1"], [f"127.0.0.1:{port}"]):
        assert "get_weather" in await listing(McpConfig(allowed_hosts=listed, list_timeout_s=3.0), mcp_server.url)


async def test_a_name_connects_to_its_address_when_that_address_is_listed(mcp_server, connects):
    port = port_of(mcp_server.url)
    # localhost is ::1 and 127.0.0.1: only the listed address is used.
    config = McpConfig(allowed_hosts=["localhost", f"127.0.0.1:{port}"], list_timeout_s=3.0)
    assert "get_weather" in await listing(config, f"http://localhost:{port}/mcp")
    assert connects and set(connects) == {"127.0.0.1"}
    with pytest.raises(McpFailure, match="resolves to a loopback address"):  # listed for another port
        await listing(McpConfig(allowed_hosts=["localhost", "127.0.0.1:1"], list_timeout_s=3.0),
                      f"http://localhost:{port}/mcp")


async def test_a_rebinding_answer_cannot_redirect_the_connection(mcp_server, monkeypatch, connects):
    # The name first resolves to a public address (standing in for the real server, here the loopback
    # test server), then to loopback: every connection of the session still goes to the first.
    asked = fake_resolver(monkeypatch, ["93.184.216.34"], ["127.0.0.1"])
    connects.stand_ins.add("93.184.216.34")
    port = port_of(mcp_server.url)
    before = mcp_server.calls["get_weather"]
    client = McpClient(McpConfig(allowed_hosts=["localhost"], list_timeout_s=3.0, call_timeout_s=3.0))
    try:
        tool = server(f"http://localhost:{port}/mcp")
        assert "get_weather" in [t.name for t in await client.list_tools(tool)]
        for _ in range(3):
            outcome = await client.call_tool(tool, "get_weather", {"city": "Rome"})
            assert outcome.output == "The weather in Rome is cloudy, 17 degrees.", outcome
    finally:
        await client.close()
    assert mcp_server.calls["get_weather"] == before + 3
    assert asked == ["localhost"] and connects and set(connects) == {"93.184.216.34"}, connects


@pytest.mark.parametrize("address,kind", [
    ("127.0.0.2", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"), ("10.1.2.3", "private"),
    ("192.168.0.1", "private"), ("fd00::1", "private"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("224.0.0.251", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("240.0.0.1", "reserved"), ("100.64.0.1", "non-public"), ("2002:7f00:1::", "loopback"),
    ("8.8.8.8", None), ("2606:4700::1111", None), ("::ffff:8.8.8.8", None),
])
def test_which_addresses_count_as_not_public(address, kind):
    from worker.mcp_client import non_public

    assert non_public(address) == kind


# A raw HTTP/1.1 MCP server whose tools/call answer never ends (or is a small gzip bomb).
CHUNK = 64 * 1024
HUGE = 64 * 1024 * 1024


class HugeServer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sent = 0  # bytes of the tools/call answer handed to the socket
        self.done = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A small send buffer: what was handed over is then what the client read, give or take its receive buffer.
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                if not lines[0].startswith("POST"):
                    writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                    continue
                message = json.loads(body)
                if "id" not in message:
                    writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                elif message["method"] == "tools/call":
                    await self.answer_huge(message["id"], writer)
                    return
                else:
                    result = ({"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                               "serverInfo": {"name": "huge", "version": "1"}} if message["method"] == "initialize"
                              else {"tools": [{"name": "huge", "inputSchema": {"type": "object"}}]})
                    out = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(out), out))
                await writer.drain()
        writer.close()

    async def answer_huge(self, request_id: int, writer: asyncio.StreamWriter) -> None:
        try:
            head = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": ""}]}})
            start, end = head.split('""')
            if self.mode == "gzip":
                out = gzip.compress((start + '"' + "x" * HUGE + '"' + end).encode())
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(out), out))
                await writer.drain()
                self.sent = len(out)
                return
            if self.mode == "json":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % (len(start) + 2 + HUGE + len(end)) + start.encode() + b'"')
                chunk = b"x" * CHUNK
            else:  # sse: many small log notifications, never the result
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                                   "params": {"level": "info", "data": "y" * 8000}})
                event = f"event: message\ndata: {note}\n\n".encode()
                chunk = b"%x\r\n%s\r\n" % (len(event) * 8, event * 8)
            while self.sent < HUGE:
                writer.write(chunk)
                await writer.drain()
                self.sent += len(chunk)
            writer.write(b'"' + end.encode() if self.mode == "json" else b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.done.set()


@contextlib.asynccontextmanager
async def huge_server(mode: str) -> AsyncIterator[tuple[str, HugeServer]]:
    state = HugeServer(mode)
    listener = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/mcp", state
    finally:
        listener.close()


@pytest.mark.parametrize("mode", ["json", "sse", "gzip"])
async def test_a_huge_answer_is_cut_as_it_streams(mode):
    config = McpConfig(allowed_hosts=["127.0.0.1"], max_result_chars=400, list_timeout_s=3.0, call_timeout_s=20.0)
    cap = 8 * 400 + 1024 * 1024  # McpConfig.max_answer_bytes (checked last: the behaviour first)
    async with huge_server(mode) as (url, state):
        client = McpClient(config)
        try:
            tool = server(url)
            assert [t.name for t in await client.list_tools(tool)] == ["huge"]
            outcome = await asyncio.wait_for(client.call_tool(tool, "huge", {}), 30)
            await asyncio.wait_for(state.done.wait(), 10)
        finally:
            await client.close()
    assert outcome.output is None and outcome.error is not None, outcome
    if mode == "gzip":
        assert outcome.error["message"] == "the MCP server's answer was compressed (Content-Encoding: gzip), " \
            "which this client does not accept", outcome.error
    else:
        assert outcome.error["message"] == f"the MCP server's answer exceeded {cap} bytes", outcome.error
        # what the server could hand over: what the client read, plus the client's receive buffer
        assert state.sent < cap + 8 * 1024 * 1024, state.sent
    assert config.max_answer_bytes == cap
