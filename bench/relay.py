"""Latency the gateway adds per relayed event: round trips to a real worker, direct vs relayed.

    python -m bench relay [--events 400] [--gateways 1]

One real worker and the gateway. Each probe is a request the worker answers at once, with the
payload sizes a duplex session really moves:

- ``append``: a 40 ms PCM16 ``input_audio_buffer.append`` (2.6 KB of JSON) plus
  ``input_audio_buffer.clear``, answered by ``input_audio_buffer.cleared``;
- ``delta-sized``: ``conversation.item.retrieve`` of an item whose text is as large as a
  100 ms audio delta (6.5 KB), answered with that item.

Probes alternate between a session straight on the worker and one through the gateway, so
load drifts hit both alike. A round trip crosses the relay twice, so the added latency per
relayed event is half the difference of the round trips (p50 and p99). Its share of V2V counts
the two relayed events on a turn's critical path (the last audio append up, the first audio
delta down) against the client-side V2V the pipeline benchmark measures.

``--gateways 2``: two more gateways sharing their queue through a private ``redis-server``, and
a third session, through the one that knows the worker only through Redis, probed in the same
rotation. The relay path does not touch the queue, so its figures should match one gateway's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from bench.launch import Launched
from launcher.redis_server import redis_server
from bench.stats import goal_mark

# bench.pipeline median, last voiced sample -> first reply audio (docs/benchmarks-history.md, issue 2)
V2V_CLIENT_MS = 754.0
ADDED_P50_GOAL_MS = 0.2  # goal: latency the gateway adds per relayed event, p50
SHARE_GOAL_PCT = 2.0  # goal: the two relayed events on a turn's critical path, share of V2V


async def session(url: str, headers: dict[str, str] | None = None):
    ws = await websockets.connect(url, max_size=None, compression=None, ping_interval=None,
                                  additional_headers=headers)
    while json.loads(await ws.recv())["type"] != "session.created":
        pass
    # Manual turns: nothing the probes send may start a reply.
    await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    while json.loads(await ws.recv())["type"] != "session.updated":
        pass
    return ws


async def until(ws, kind: str) -> dict[str, Any]:
    while True:
        ev = json.loads(await ws.recv())
        if ev["type"] == kind:
            return ev


async def probes(direct_url: str, gateway_url: str, n: int, cluster_url: str | None = None,
                 worker_headers: dict[str, str] | None = None) -> dict[str, dict[str, list[float]]]:
    """``worker_headers``: the worker secret, for the direct path."""
    paths = {"direct": await session(direct_url, worker_headers), "gateway": await session(gateway_url)}
    if cluster_url:
        paths["cluster"] = await session(cluster_url)
    append = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(1920)).decode()})
    clear = json.dumps({"type": "input_audio_buffer.clear"})
    items = {}
    for name, ws in paths.items():
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "x" * 6400}]}}))
        items[name] = (await until(ws, "conversation.item.done"))["item"]["id"]
    out: dict[str, dict[str, list[float]]] = {"append": {name: [] for name in paths},
                                              "delta-sized": {name: [] for name in paths}}
    for i in range(n):
        order = list(paths.items()) if i % 2 == 0 else list(reversed(paths.items()))
        for name, ws in order:
            t = time.perf_counter()
            await ws.send(append)
            await ws.send(clear)
            await until(ws, "input_audio_buffer.cleared")
            out["append"][name].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": items[name]}))
            await until(ws, "conversation.item.retrieved")
            out["delta-sized"][name].append((time.perf_counter() - t) * 1000)
    for ws in paths.values():
        await ws.close()
    return out


def run_cli(args) -> dict[str, Any]:
    gateways = getattr(args, "gateways", 1)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="omniduplex-bench-")))
        # Two slots: one session straight on the worker and one through the gateway, side by side
        # (three with --gateways 2+: one more through a gateway that shares its queue through Redis).
        launched = stack.enter_context(Launched(tmp, workers=1, slots=3 if gateways > 1 else 2,
                                                recording={"enabled": False}))
        launched.wait_ready()
        cluster_url = None
        if gateways > 1:
            url = stack.enter_context(redis_server(tmp / "redis"))
            names = [f"g{i}" for i in range(gateways)]
            for i, name in enumerate(names):
                launched.add_gateway(name, cluster={"redis_url": url, "gateway_id": name, "prefix": "bench"},
                                     **({} if i == 0 else {"workers": {"count": 0}}))
            for name in names:
                launched.wait_gateway(name)
            # the last gateway, which knows the worker only through Redis
            cluster_url = launched.gateway_ws(names[-1]) + "?record=false"
        raw = asyncio.run(probes(launched.worker_ws() + "?record=false", launched.ws_url + "?record=false",
                                 args.events, cluster_url, launched.worker_headers))
    result: dict[str, Any] = {"v2v_client_ms": V2V_CLIENT_MS, "probes": args.events}
    for kind, paths in raw.items():
        result[kind] = added(paths["direct"], paths["gateway"])
        if "cluster" in paths:
            result[f"{kind}_cluster"] = added(paths["direct"], paths["cluster"]) | {"gateways": gateways}
    return result


def added(direct: list[float], gateway: list[float]) -> dict[str, float]:
    d, g = np.asarray(direct), np.asarray(gateway)
    added_p50 = (np.percentile(g, 50) - np.percentile(d, 50)) / 2
    added_p99 = (np.percentile(g, 99) - np.percentile(d, 99)) / 2
    return {
        "rtt_direct_p50_ms": round(float(np.percentile(d, 50)), 3),
        "rtt_gateway_p50_ms": round(float(np.percentile(g, 50)), 3),
        "rtt_direct_p99_ms": round(float(np.percentile(d, 99)), 3),
        "rtt_gateway_p99_ms": round(float(np.percentile(g, 99)), 3),
        "added_per_event_p50_ms": round(float(added_p50), 3),
        "added_per_event_p99_ms": round(float(added_p99), 3),
        "share_of_v2v_pct": round(float(2 * added_p50 / V2V_CLIENT_MS * 100), 3),
    }


def report(r: dict[str, Any]) -> str:
    """Goals (docs/benchmarks.md): <= 0.2 ms p50 added per relayed event, and the two relayed events
    on a turn's critical path <= 2 % of V2V."""
    p50_goal, share_goal = f"p50 <= {ADDED_P50_GOAL_MS:g} ms", f"share <= {SHARE_GOAL_PCT:g} %"
    lines = ["| probe | RTT direct p50 / p99 (ms) | RTT via gateway p50 / p99 (ms) "
             "| added per relayed event p50 / p99 (ms) | 2 events as share of V2V | goal |", "|---|---|---|---|---|---|"]
    for kind in ("append", "delta-sized"):
        k = r[kind]
        lines.append(f"| {kind} | {k['rtt_direct_p50_ms']} / {k['rtt_direct_p99_ms']} | {k['rtt_gateway_p50_ms']} / "
                     f"{k['rtt_gateway_p99_ms']} | {k['added_per_event_p50_ms']} / {k['added_per_event_p99_ms']} | "
                     f"{k['share_of_v2v_pct']} % of {r['v2v_client_ms']:.0f} ms | "
                     f"{goal_mark(k['added_per_event_p50_ms'], ADDED_P50_GOAL_MS, p50_goal)}; "
                     f"{goal_mark(k['share_of_v2v_pct'], SHARE_GOAL_PCT, share_goal)} |")
    if "append_cluster" in r:
        n = r["append_cluster"]["gateways"]
        lines += ["", f"| probe | added per relayed event p50 / p99 (ms), 1 gateway | the same, one of {n} gateways "
                  "sharing a queue through Redis | ratio p50 | goal |", "|---|---|---|---|---|"]
        for kind in ("append", "delta-sized"):
            one, many = r[kind], r[f"{kind}_cluster"]
            a, b = one["added_per_event_p50_ms"], many["added_per_event_p50_ms"]
            ratio = f"{b / a:.2f}x" if a > 0 else "-"
            lines.append(f"| {kind} | {a} / {one['added_per_event_p99_ms']} | {b} / "
                         f"{many['added_per_event_p99_ms']} | {ratio} | {p50_goal}: 1 gateway "
                         f"{goal_mark(a, ADDED_P50_GOAL_MS)}, {n} gateways {goal_mark(b, ADDED_P50_GOAL_MS)} |")
    return "\n".join(lines)
