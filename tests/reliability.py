"""Helpers shared by the fault, disconnect, fuzz and soak tests (docs/reliability.md).

Everything here is async: after ``ws.transport.abort()`` the socket only really closes when the
event loop runs, so a test that blocked the loop (time.sleep, sync httpx) would keep it open.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import websockets

LONG = os.environ.get("OMNIDUPLEX_LONG", "") not in ("", "0")

TEXT_ITEM = {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Count slowly from one to thirty."}]}}


def ws_url(stack, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"model": "omniduplex-cascade", "extensions": "all", **params}.items())
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?{query}"


async def recv_until(ws, kind: str, timeout: float = 20.0, log: list | None = None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {kind} within {timeout}s")
        ev = json.loads(await asyncio.wait_for(ws.recv(), left))
        if log is not None:
            log.append(ev)
        if ev["type"] == kind:
            return ev


async def say(ws, text: str, respond: bool = True) -> None:
    """A typed user message, then (by default) ask for the reply."""
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": text}]}}))
    if respond:
        await ws.send(json.dumps({"type": "response.create"}))


async def open_session(stack, timeout: float = 30.0, **params: str) -> tuple:
    """Connect and wait for ``session.created``; returns the socket and the ``session.recording``
    event (None when the session is not recorded)."""
    ws = await websockets.connect(ws_url(stack, **params))
    seen: list[dict] = []
    await recv_until(ws, "session.created", timeout, log=seen)
    return ws, next((ev for ev in seen if ev["type"] == "session.recording"), None)


async def end(ws, how: str) -> None:
    """``close``: a clean close handshake; ``abort``: TCP abort, no close frame."""
    if how == "abort":
        ws.transport.abort()
        await asyncio.sleep(0)  # let the loop actually drop the socket
    else:
        await ws.close()


async def health(stack) -> tuple[dict, list[dict]]:
    """The gateway's /health and every worker's /health (workers that do not answer are skipped)."""
    async with httpx.AsyncClient(timeout=2) as http:
        gw = (await http.get(f"{stack.url}/health")).json()
        workers = []
        for i in range(stack.n):
            try:
                workers.append((await http.get(f"{stack.worker_url(i)}/health")).json())
            except httpx.HTTPError:
                pass
    return gw, workers


async def wait_idle(stack, timeout: float = 1.0) -> float:
    """Every slot idle (gateway and workers) within ``timeout``; returns how long it took."""
    t0 = time.monotonic()
    while True:
        gw, workers = await health(stack)
        if gw["slots_busy"] == 0 and gw["queue_length"] == 0 and all(w["active_sessions"] == 0 for w in workers):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"not idle within {timeout}s: gateway {gw}, workers {workers}")
        await asyncio.sleep(0.02)


async def closed_with(ws, timeout: float = 5.0) -> tuple[int, list[dict]]:
    """Read until the server closes; returns the close code and the events seen."""
    events: list[dict] = []
    try:
        while True:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), timeout)))
    except websockets.ConnectionClosed as exc:
        return (exc.rcvd.code if exc.rcvd else 1006), events


async def wait_meta(stack, session_id: str, timeout: float = 30.0) -> dict:
    """meta.json once the recording is finished (polled without blocking the loop)."""
    path = stack.sessions_dir / session_id / "meta.json"
    deadline = time.monotonic() + timeout
    meta: dict = {}
    while time.monotonic() < deadline:
        try:
            meta = json.loads(path.read_text())
            if meta.get("status") == "finished" and "replays" in meta:
                return meta
        except (OSError, ValueError):
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {session_id} never finished: {meta}")


def make_stack(tmp, workers: int = 1, worker_settings: dict | None = None, **overrides):
    """``Stack`` plus settings for the config's ``workers`` section (``Stack``'s own ``workers``
    argument is the worker count, so that section cannot go through its overrides)."""
    from tests.stack import Stack

    s = Stack(tmp, workers=workers, **overrides)
    if worker_settings:
        config = json.loads(s.config_path.read_text())
        config["workers"].update(worker_settings)
        s.config_path.write_text(json.dumps(config))
    return s
