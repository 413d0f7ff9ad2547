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

Goal: reconnect -> first answered turn p50 <= 1 s on one gateway. Across gateways (the
session's gateway killed, another one's reconnect): not measured yet; a token is honoured only by
the gateway that issued it.
"""

from __future__ import annotations

import asyncio
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


async def _resumed_trial(url: str, host: str, port: int, text: str) -> dict[str, Any]:
    async with CutProxy(host, port) as proxy:
        ws = await websockets.connect(url.replace(f":{port}/", f":{proxy.port}/") + "&extensions=resume")
        token = (await _until(ws, "session.resume_token"))["resume_token"]  # before session.created
        await _until(ws, "session.created")
        before, _, _ = await _turn(ws, "Remember the word lighthouse.", time.monotonic())
        proxy.cut()
    started = time.monotonic()
    async with websockets.connect(f"{url}&resume_token={token}") as back:
        await _until(back, "session.created")
        created = time.monotonic() - started
        after, first, done = await _turn(back, text, started)
        kept = await _kept(back, before + after)
    return {"created_s": created, "first_s": first, "done_s": done, "items": len(before + after), "kept": kept}


async def _new_session_trial(url: str, text: str) -> dict[str, Any]:
    started = time.monotonic()
    async with websockets.connect(url) as ws:
        await _until(ws, "session.created")
        created = time.monotonic() - started
        _, first, done = await _turn(ws, text, started)
    return {"created_s": created, "first_s": first, "done_s": done}


async def _run(url: str, host: str, port: int, prompts: int, flip: bool) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {"resumed": [], "new": []}
    for i in range(prompts):
        text = PROMPTS[i % len(PROMPTS)]
        order = ["resumed", "new"] if (i % 2 == 0) != flip else ["new", "resumed"]
        for side in order:
            if side == "resumed":
                out[side].append(await _resumed_trial(url, host, port, text))
            else:
                out[side].append(await _new_session_trial(url, text))
            await asyncio.sleep(0.3)  # the slot back in the pool before the next
    return out


def run_cli(args) -> dict[str, Any]:
    from bench.launch import Launched

    runs, prompts = args.runs or 3, args.prompts
    figures: dict[str, dict[str, list[float]]] = {s: {k: [] for k in ("created_s", "first_s", "done_s")}
                                                  for s in ("resumed", "new")}
    lost = 0
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as stack:
            stack.wait_ready()
            url = stack.ws_url + "?model=omniduplex-cascade&record=false&app=bench"
            asyncio.run(_run(url, "127.0.0.1", stack.port, 2, False))  # warm-up, not counted
            for r in range(runs):
                out = asyncio.run(_run(url, "127.0.0.1", stack.port, prompts, r % 2 == 1))
                for side, trials in out.items():
                    for k in figures[side]:
                        figures[side][k].append(statistics.median(t[k] for t in trials))
                lost += sum(t["items"] - t["kept"] for t in out["resumed"])
                log(f"run {r + 1}/{runs}: reconnect -> first words p50 {figures['resumed']['first_s'][-1] * 1000:.0f} "
                    f"ms (a new session: {figures['new']['first_s'][-1] * 1000:.0f} ms); items lost {lost}")
    return {"runs": runs, "prompts": prompts, "items_lost": lost,
            **{side: {k: median_spread([round(v * 1000) for v in vs]) for k, vs in f.items()}
               for side, f in figures.items()}}


def report(r: dict[str, Any]) -> str:
    lines = [f"A dropped connection brought back with its resume token vs a new session, one gateway "
             f"({r['prompts']} trials a run, p50 of each run, median (min-max) over {r['runs']} runs; ms from "
             f"the new socket's start):", "",
             "| | session.created | first words of the answer | response.done |", "|---|---|---|---|"]
    for side, name in (("resumed", "resumed (the same session)"), ("new", "a new session instead")):
        s = r[side]
        lines.append(f"| {name} | {s['created_s']['text']} | {s['first_s']['text']} | {s['done_s']['text']} |")
    first = r["resumed"]["first_s"]["median"]
    lines += ["", f"- reconnect -> first answered turn, one gateway: "
              f"{goal_mark(first / 1000 if first is not None else None, GOAL_S, f'p50 <= {GOAL_S:g} s')}",
              f"- items from before and after the drop lost: {r['items_lost']} "
              f"({goal_mark(r['items_lost'], 0, 'none')})",
              "- across gateways: not measured (a token is honoured only by the gateway that issued it)"]
    return "\n".join(lines)
