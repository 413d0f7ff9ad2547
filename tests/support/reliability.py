"""Helpers shared by the fault, disconnect, fuzz and soak tests (docs/reliability.md).

Everything here is async: after ``ws.transport.abort()`` the socket only really closes when the
event loop runs, so a test that blocked the loop (time.sleep, sync httpx) would keep it open.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterable

import httpx
import websockets

from tests.support.realtime_client import recv_until

LONG = os.environ.get("OMNIDUPLEX_LONG", "") not in ("", "0")

TEXT_ITEM = {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Count slowly from one to thirty."}]}}


def ws_url(stack, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"model": "omniduplex-cascade", "extensions": "all", **params}.items())
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?{query}"


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


async def gateway_health(stack) -> dict:
    """Only the gateway's /health, for a test whose worker is down, hung or cut off on purpose
    (``health`` would fail on it, after waiting out its timeout on a hung one)."""
    async with httpx.AsyncClient(timeout=2, trust_env=False) as http:
        return (await http.get(f"{stack.url}/health", headers=stack.admin_headers)).json()


async def _snapshot(stack, down: Iterable[int]) -> tuple[dict, list[dict | None], list[str]]:
    """The gateway's /health, every worker's /health in index order (None for a worker in
    ``down``), and what is wrong: a worker that does not answer its /health with a body, or one
    in ``down`` that does answer."""
    down = set(down)
    unknown = down - set(range(stack.n))
    assert not unknown, f"down={sorted(down)}: no such worker (the stack has {stack.n})"
    problems: list[str] = []
    workers: list[dict | None] = []
    async with httpx.AsyncClient(timeout=2) as http:
        gw = (await http.get(f"{stack.url}/health", headers=stack.admin_headers)).json()
        for i in range(stack.n):
            url, why = f"{stack.worker_url(i)}/health", "no body"
            try:
                body = (await http.get(url, headers=stack.worker_headers)).json()
            except (httpx.HTTPError, ValueError) as exc:
                body, why = None, f"{type(exc).__name__}: {exc}".rstrip(": ")
            if i in down:
                if body is not None:
                    problems.append(f"worker {i} ({url}) answers its health check but was expected down: "
                                    f"{body}")
                body = None
            elif body is None:
                problems.append(f"worker {i} ({url}) does not answer its health check ({why})")
            workers.append(body)
    return gw, workers, problems


async def health(stack, down: Iterable[int] = ()) -> tuple[dict, list[dict | None]]:
    """The gateway's /health and every worker's /health, in worker order.

    A worker that does not answer fails the call (AssertionError naming it) unless the test
    stopped it on purpose and says so: ``down`` holds the indices of workers expected not to
    answer (their entry is None; one of them answering fails too)."""
    gw, workers, problems = await _snapshot(stack, down)
    assert not problems, "; ".join(problems)
    return gw, workers


async def wait_idle(stack, timeout: float = 1.0, down: Iterable[int] = ()) -> float:
    """Every slot idle (gateway and workers) within ``timeout``; returns how long it took.

    Every worker must answer its /health and hold no session, except the workers in ``down``
    (indices a test killed or stopped on purpose), which must not answer; see ``health``."""
    down = tuple(down)
    t0 = time.monotonic()
    while True:
        gw, workers, problems = await _snapshot(stack, down)
        busy = [f"worker {i} has {w['active_sessions']} active sessions" for i, w in enumerate(workers)
                if w is not None and w["active_sessions"] != 0]
        if not problems and not busy and gw["slots_busy"] == 0 and gw["queue_length"] == 0:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            found = "".join(f"{p}; " for p in problems + busy)
            raise AssertionError(f"not idle within {timeout}s: {found}gateway {gw}, workers {workers}")
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
    from tests.support.stack import Stack

    s = Stack(tmp, workers=workers, **overrides)
    if worker_settings:
        config = json.loads(s.config_path.read_text())
        config["workers"].update(worker_settings)
        s.config_path.write_text(json.dumps(config))
    return s
