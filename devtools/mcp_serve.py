"""Serve an MCP server's Starlette app (the ``mcp`` package's ``streamable_http_app()``) on a free
loopback port, in a thread: what the tests and ``python -m bench tools`` talk to."""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(app, timeout_s: float = 15.0) -> tuple[str, uvicorn.Server]:
    """(the MCP endpoint's URL, the server: set ``should_exit`` to stop it), once it accepts."""
    logging.getLogger("mcp").setLevel(logging.CRITICAL)  # a raising tool logs a long traceback
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    threading.Thread(target=server.run, daemon=True, name=f"mcp-{port}").start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the MCP server did not start")
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}/mcp", server
