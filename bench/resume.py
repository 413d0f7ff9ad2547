"""A conversation brought back after its connection dropped (issue 72), against a new session.

    python -m bench resume                  # 3 runs of 8 drops
    python -m bench resume --runs 5 --prompts 12

A real gateway and cascade worker. Each trial: a session opened with the resume extension through
a forwarder (``devtools/net_cut.py``), one typed turn answered, then the connection cut mid-nothing
(both sides aborted, as a network drops it), and at once a new socket with the resume token
straight to the gateway. Measured from the new socket's start: ``session.created``, the first
words of the answer to a typed turn sent as soon as it arrived, and that answer's
``response.done``. Side by side in the same run, the same turn on a new session opened instead
(what a client without resume does: the queue is empty, the worker free), alternating order.
Nothing lost: every item from before the drop and after it is retrieved on the resumed session.

``--gateways 2``: two gateways share the queue through a private ``redis-server``. In the same
run: the drop above brought back through the same gateway; the session's gateway killed
(``SIGKILL``, a spare gateway-only process started before each trial) and the token presented
to the other gateway, which takes the session over; and a new session. Same clocks.

Goals: reconnect -> first answered turn p50 <= 1 s on one gateway, <= 2 s across gateways.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import websockets

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from devtools.net_cut import CutProxy  # noqa: E402
from bench.stats import goal_mark, median_spread  # noqa: E402

GOAL_S = 1.0
GOAL_ACROSS_S = 2.0
QUERY = "?model=omniduplex-cascade&record=false&app=bench"
PROMPTS = ["Say hello.", "Name a colour.", "Say a number.", "Name a fruit.", "Say yes.", "Name a city."]
TURN = {"output_modalities": ["text"], "max_output_tokens": 8}


def log(message: str) -> None:
    print(message, flush=True)


async def _until(ws, kind: str, timeout: float = 60.0) -> dict:
    async def look() -> dict:
        while True:
            event = json.loads(await ws.recv())
            if event["type"] == kind:
                return event
            if event["type"] == "error":
                raise RuntimeError(f"error while waiting for {kind}: {event['error']}")
    return await asyncio.wait_for(look(), timeout)


async def _turn(ws, text: str, started: float) -> tuple[list[str], float, float]:
    """A typed turn answered: (its items, seconds to its first words, to its response.done) from ``started``."""
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}))
    await ws.send(json.dumps({"type": "response.create", "response": TURN}))
    user = (await _until(ws, "conversation.item.added"))["item"]["id"]
    await _until(ws, "response.output_text.delta")
    first = time.monotonic() - started
    done = await _until(ws, "response.done")
    return [user, *(o["id"] for o in done["response"]["output"])], first, time.monotonic() - started


async def _kept(ws, items: list[str]) -> int:
    """How many of ``items`` the session still has."""
    found = 0
    for item_id in items:
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": item_id}))
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if event["type"] == "conversation.item.retrieved":
                found += event["item"]["id"] == item_id
                break
            if event["type"] == "error":
                break
    return found


async def _opened(url: str) -> tuple[Any, str, list[str]]:
    """A resumable session at ``url`` with one turn answered: (socket, token, its items)."""
    ws = await websockets.connect(url + "&extensions=resume")
    token = (await _until(ws, "session.resume_token"))["resume_token"]  # before session.created
    await _until(ws, "session.created")
    before, _, _ = await _turn(ws, "Remember the word lighthouse.", time.monotonic())
    return ws, token, before


async def _back(url: str, token: str, text: str, before: list[str]) -> dict[str, Any]:
    """The session brought back at ``url`` with ``token``, a turn answered, its items counted."""
    started = time.monotonic()
    async with websockets.connect(f"{url}&resume_token={token}") as back:
        await _until(back, "session.created")
        created = time.monotonic() - started
        after, first, done = await _turn(back, text, started)
        kept = await _kept(back, before + after)
    return {"created_s": created, "first_s": first, "done_s": done, "items": len(before + after), "kept": kept}


async def _resumed_trial(url: str, host: str, port: int, text: str) -> dict[str, Any]:
    async with CutProxy(host, port) as proxy:
        _, token, before = await _opened(url.replace(f":{port}/", f":{proxy.port}/"))
        proxy.cut()
    return await _back(url, token, text, before)


async def _across_trial(home: str, other: str, kill, text: str) -> dict[str, Any]:
    """A session on gateway ``home`` (a URL), that gateway killed by ``kill()``, the session
    brought back through ``other``."""
    ws, token, before = await _opened(home)
    kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ws.wait_closed(), 5)
    return await _back(other, token, text, before)


async def _new_session_trial(url: str, text: str) -> dict[str, Any]:
    started = time.monotonic()
    async with websockets.connect(url) as ws:
        await _until(ws, "session.created")
        created = time.monotonic() - started
        _, first, done = await _turn(ws, text, started)
    return {"created_s": created, "first_s": first, "done_s": done}


async def _run(url: str, host: str, port: int, prompts: int, flip: bool,
               spares: Spares | None = None) -> dict[str, list[dict]]:
    sides = ["resumed", "new"] + (["across"] if spares is not None else [])
    out: dict[str, list[dict]] = {side: [] for side in sides}
    for i in range(prompts):
        text = PROMPTS[i % len(PROMPTS)]
        shift = (i + flip) % len(sides)
        for side in sides[shift:] + sides[:shift]:
            if side == "resumed":
                out[side].append(await _resumed_trial(url, host, port, text))
            elif side == "across":
                home = await asyncio.to_thread(spares.ready)  # started and healthy before the clock
                out[side].append(await _across_trial(home, url, spares.kill, text))
            else:
                out[side].append(await _new_session_trial(url, text))
            await asyncio.sleep(0.3)  # the slot back in the pool before the next
    return out


class Spares:
    """Gateway-only processes that carry one session each and are killed under it."""

    def __init__(self, launched, redis_url: str) -> None:
        self.launched, self.redis_url, self.n, self.current = launched, redis_url, 0, None

    def ready(self) -> str:
        self.n += 1
        self.current = name = f"spare{self.n}"
        self.launched.add_gateway(name, cluster={"redis_url": self.redis_url, "gateway_id": name, "prefix": "bench"},
                                  workers={"count": 0})
        self.launched.wait_gateway(name)
        return self.launched.gateway_ws(name) + QUERY

    def kill(self) -> None:
        from launcher.processes import kill

        self.launched.gateway_ports.pop(self.current, None)
        kill(self.launched.procs.pop(self.current))


def run_cli(args) -> dict[str, Any]:
    from bench.launch import Launched
    from launcher.redis_server import redis_server

    runs, prompts = args.runs or 3, args.prompts
    across = (getattr(args, "gateways", 1) or 1) > 1
    sides = ("resumed", "new") + (("across",) if across else ())
    figures: dict[str, dict[str, list[float]]] = {s: {k: [] for k in ("created_s", "first_s", "done_s")}
                                                  for s in sides}
    lost = 0
    with contextlib.ExitStack() as stack_of:
        tmp = Path(stack_of.enter_context(tempfile.TemporaryDirectory(prefix="omniduplex-bench-")))
        redis_url = stack_of.enter_context(redis_server(tmp / "redis")) if across else None
        cluster = {"cluster": {"redis_url": redis_url, "gateway_id": "home", "prefix": "bench"}} if across else {}
        stack = stack_of.enter_context(Launched(tmp, recording={"enabled": False},
                                                auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}, **cluster))
        stack.wait_ready()
        if across:
            stack.wait_gateway("gateway")
        spares = Spares(stack, redis_url) if across else None
        url = stack.ws_url + QUERY
        asyncio.run(_run(url, "127.0.0.1", stack.port, 2, False, spares))  # warm-up, not counted
        for r in range(runs):
            out = asyncio.run(_run(url, "127.0.0.1", stack.port, prompts, r % 2 == 1, spares))
            for side, trials in out.items():
                for k in figures[side]:
                    figures[side][k].append(statistics.median(t[k] for t in trials))
            lost += sum(t["items"] - t["kept"] for side in ("resumed", "across") for t in out.get(side, []))
            log(f"run {r + 1}/{runs}: reconnect -> first words p50 {figures['resumed']['first_s'][-1] * 1000:.0f} "
                f"ms" + (f", across gateways {figures['across']['first_s'][-1] * 1000:.0f} ms" if across else "")
                + f" (a new session: {figures['new']['first_s'][-1] * 1000:.0f} ms); items lost {lost}")
    return {"runs": runs, "prompts": prompts, "items_lost": lost, "gateways": 2 if across else 1,
            **{side: {k: median_spread([round(v * 1000) for v in vs]) for k, vs in f.items()}
               for side, f in figures.items()}}


def report(r: dict[str, Any]) -> str:
    where = "two gateways sharing the queue through Redis" if r.get("gateways", 1) > 1 else "one gateway"
    lines = [f"A dropped connection brought back with its resume token vs a new session, {where} "
             f"({r['prompts']} trials a run, p50 of each run, median (min-max) over {r['runs']} runs; ms from "
             f"the new socket's start):", "",
             "| | session.created | first words of the answer | response.done |", "|---|---|---|---|"]
    names = (("resumed", "resumed through the same gateway (the network dropped)"),
             ("across", "resumed through the other gateway (its gateway killed, SIGKILL)"),
             ("new", "a new session instead"))
    for side, name in names:
        if side in r:
            s = r[side]
            lines.append(f"| {name} | {s['created_s']['text']} | {s['first_s']['text']} | {s['done_s']['text']} |")
    first = r["resumed"]["first_s"]["median"]
    lines += ["", f"- reconnect -> first answered turn, same gateway: "
              f"{goal_mark(first / 1000 if first is not None else None, GOAL_S, f'p50 <= {GOAL_S:g} s')}"]
    if "across" in r:
        first = r["across"]["first_s"]["median"]
        lines.append(f"- reconnect -> first answered turn, across gateways: "
                     f"{goal_mark(first / 1000 if first is not None else None, GOAL_ACROSS_S, f'p50 <= {GOAL_ACROSS_S:g} s')}")
    lines.append(f"- items from before and after the drop lost: {r['items_lost']} "
                 f"({goal_mark(r['items_lost'], 0, 'none')})")
    return "\n".join(lines)
