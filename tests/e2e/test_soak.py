"""Soak: mixed sessions with random disconnects, for a while (docs/reliability.md).

Short form (CI): 30 s of load. Long form: ``OMNIDUPLEX_SOAK_S=1800``. Three client loops share
one worker with two slots, so the queue is used too. Each loop picks a scenario at random
(seeded, printed on failure): typed or spoken turns heard to the end, a cancel, a pause, bad
events, or a disconnect (clean close or TCP abort) while queued, right after assignment or
mid-reply. Afterwards:

- no leaked slot: gateway and worker idle within 2 s;
- bounded memory: gateway and worker RSS growth after warm-up under fixed limits;
- every recorded session finished, complete, schema-valid, with its replay and no temp files.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import jsonschema
import psutil
import pytest
import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import (
    end,
    health,
    make_stack,
    open_session,
say,
    wait_idle,
    wait_meta,
    ws_url,
)
from tests.support.stack import ROOT


SOAK_S = float(os.environ.get("OMNIDUPLEX_SOAK_S", "30"))
CLIENTS = 3
WARMUP_S = min(20.0, SOAK_S / 3)
# After warm-up. The worker's models keep per-shape state that settles at a few hundred MB
# (onnxruntime's arena for Piper, CTranslate2 and torch kernels per input length); the leaks
# this test found grew without end: ~5 MB/s, +1.5 GB in 5 minutes.
GATEWAY_GROWTH_MB = 20
WORKER_GROWTH_MB = 350
SCHEMA = json.loads((ROOT / "docs" / "recording.schema.json").read_text())
QUESTIONS = ["What is the capital of France?", "Name three colours.", "Count from one to five.",
             "Tell me a short story about a cat."]


@dataclass
class Tally:
    """What the loops did: scenario counts, recorded sessions and how each was meant to end."""

    runs: Counter = field(default_factory=Counter)
    recorded: dict[str, str] = field(default_factory=dict)  # session id -> scenario
    replied: set[str] = field(default_factory=set)  # sessions that heard a whole reply
    errors: list[str] = field(default_factory=list)


async def _open(stack, tally: Tally, scenario: str):
    """Connect and wait for the worker; returns (ws, session id or None if not recorded)."""
    ws, rec = await open_session(stack, timeout=120)
    if rec is None:
        return ws, None
    tally.recorded[rec["session_id"]] = scenario
    return ws, rec["session_id"]


async def _hear_reply(ws, timeout: float = 90) -> str:
    """The reply's status; ``incomplete`` (max_output_tokens reached) is a whole reply too."""
    status = (await recv_until(ws, "response.done", timeout=timeout))["response"]["status"]
    return "completed" if status == "incomplete" else status


async def typed_turns(stack, rng, tally):
    ws, sid = await _open(stack, tally, "typed_turns")
    for _ in range(rng.randint(1, 2)):
        await say(ws, rng.choice(QUESTIONS))
        assert (await _hear_reply(ws)) == "completed"
    tally.replied.add(sid)
    await ws.close()


async def spoken_turn(stack, rng, tally, speech: bytes):
    ws, sid = await _open(stack, tally, "spoken_turn")
    await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    step = 24000 * 2 * 40 // 1000
    for i in range(0, len(speech), step):
        await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                  "audio": base64.b64encode(speech[i:i + step]).decode()}))
    await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    await ws.send(json.dumps({"type": "response.create"}))
    assert (await _hear_reply(ws)) == "completed"
    tally.replied.add(sid)
    await ws.close()


async def cancel_then_turn(stack, rng, tally):
    ws, sid = await _open(stack, tally, "cancel_then_turn")
    await say(ws, "Tell me a long story about a dragon.")
    await recv_until(ws, "response.output_audio.delta", timeout=90)
    await ws.send(json.dumps({"type": "response.cancel"}))
    assert (await _hear_reply(ws)) == "cancelled"
    await say(ws, "Say hello.")
    assert (await _hear_reply(ws)) == "completed"
    tally.replied.add(sid)
    await ws.close()


async def pause_resume_and_bad_events(stack, rng, tally):
    ws, sid = await _open(stack, tally, "pause_and_bad_events")
    await ws.send(json.dumps({"type": "session.pause"}))
    await recv_until(ws, "session.paused")
    await asyncio.sleep(rng.uniform(0, 1))
    await ws.send(json.dumps({"type": "session.resume"}))
    await recv_until(ws, "session.resumed")
    for bad in ('{"type": "no.such.event"}', "not json", json.dumps({"type": "input_audio_buffer.append",
                                                                     "audio": "@@not base64@@"})):
        await ws.send(bad)
        await recv_until(ws, "error")
    await say(ws, "Say hello.")
    assert (await _hear_reply(ws)) == "completed"
    tally.replied.add(sid)
    await end(ws, rng.choice(["close", "abort"]))


async def leave_mid_reply(stack, rng, tally):
    ws, _ = await _open(stack, tally, "leave_mid_reply")
    await say(ws, "Tell me a long story about a dragon.")
    await recv_until(ws, "response.output_audio.delta", timeout=90)
    await asyncio.sleep(rng.uniform(0, 1.5))
    await end(ws, rng.choice(["close", "abort"]))


async def leave_early(stack, rng, tally):
    """Gone while queued or right after assignment, possibly before the worker said anything."""
    ws = await websockets.connect(ws_url(stack))
    first = json.loads(await asyncio.wait_for(ws.recv(), 30))
    if first["type"] == "session.recording":
        tally.recorded[first["session_id"]] = "leave_early"
    await asyncio.sleep(rng.uniform(0, 0.3))
    await end(ws, rng.choice(["close", "abort"]))


async def _client_loop(stack, seed: int, deadline: float, tally: Tally, speech: bytes) -> None:
    rng = random.Random(seed)
    scenarios = [typed_turns, cancel_then_turn, pause_resume_and_bad_events, leave_mid_reply,
                 leave_early, leave_early]
    while time.monotonic() < deadline:
        pick = rng.choice(scenarios + ["spoken"])
        name = "spoken_turn" if pick == "spoken" else pick.__name__
        try:
            if pick == "spoken":
                await spoken_turn(stack, rng, tally, speech)
            else:
                await pick(stack, rng, tally)
            tally.runs[name] += 1
        except (AssertionError, websockets.ConnectionClosed, TimeoutError) as exc:
            tally.errors.append(f"client {seed} {name}: {type(exc).__name__}: {exc}")
            return


def _rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


async def _sample_rss(stack, deadline: float, samples: dict[str, list[tuple[float, float]]]) -> None:
    t0 = time.monotonic()
    while time.monotonic() < deadline:
        for name in ("gateway", "worker0"):
            samples[name].append((time.monotonic() - t0, _rss_mb(stack.procs[name].pid)))
        gw, workers = await health(stack)
        assert gw["slots_busy"] <= 2 and all(w["active_sessions"] <= 2 for w in workers), (gw, workers)
        await asyncio.sleep(2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = make_stack(tmp_path_factory.mktemp("soak"), workers=1, worker_settings={"slots": 2},
                   queue={"capacity": 16},
                   auth={"per_ip": {"sessions_per_minute": 100000, "concurrent": 64}}).start()
    yield s
    s.stop()


async def test_soak_mixed_sessions_with_random_disconnects(stack, tts):
    speech = b"".join(tts.synthesize("What is the capital of France?", deterministic=True))
    tally = Tally()
    samples: dict[str, list[tuple[float, float]]] = {"gateway": [], "worker0": []}
    seed = int(os.environ.get("OMNIDUPLEX_SOAK_SEED", "0")) or random.randrange(1, 10**6)
    started = time.monotonic()
    deadline = started + SOAK_S
    await asyncio.gather(_sample_rss(stack, deadline, samples),
                         *(_client_loop(stack, seed + i, deadline, tally, speech) for i in range(CLIENTS)))
    took = time.monotonic() - started
    report = f"seed {seed}, {took:.0f}s: {dict(tally.runs)}"
    print(f"\nsoak {report}")
    assert not tally.errors, f"{report}\n" + "\n".join(tally.errors)

    idle_after = await wait_idle(stack, timeout=2.0)

    for name, points in samples.items():
        warm = [mb for t, mb in points if t >= WARMUP_S] or [points[-1][1]]
        growth = max(warm) - warm[0]
        limit = GATEWAY_GROWTH_MB if name == "gateway" else WORKER_GROWTH_MB
        print(f"{name}: RSS {points[0][1]:.0f} MB at start, {warm[0]:.0f} after warm-up, "
              f"max {max(warm):.0f}, growth {growth:.1f} MB (limit {limit})")
        assert growth < limit, f"{name} RSS grew {growth:.0f} MB after warm-up: {points}"

    unfinished = []
    for session_id, scenario in tally.recorded.items():
        try:
            meta = await wait_meta(stack, session_id, timeout=30)
        except AssertionError as exc:
            unfinished.append(f"{scenario}: {exc}")
            continue
        d = stack.sessions_dir / session_id
        recording = json.loads((d / "recording.json").read_text())
        jsonschema.validate(recording, SCHEMA)
        assert recording["complete"] is True, (scenario, session_id)
        assert meta["end_reason"] == "client_closed", (scenario, meta)
        assert (d / "merged_replay.wav").stat().st_size > 44, (scenario, session_id)
        assert not list(d.rglob("*.tmp")), (scenario, session_id)
        if session_id in tally.replied:
            kinds = {e["type"] for e in recording["events"]}
            assert {"reply_text", "reply_audio", "turn_metrics", "session_end"} <= kinds, (scenario, kinds)
    assert not unfinished, "\n".join(unfinished)
    # Sessions whose client left before it learnt the id (queued, then gone) are recorded too.
    on_disk = {d.name for d in stack.sessions_dir.iterdir() if d.is_dir()}
    for session_id in on_disk - tally.recorded.keys():
        meta = await wait_meta(stack, session_id, timeout=30)
        assert json.loads((stack.sessions_dir / session_id / "recording.json").read_text())["complete"], meta
    print(f"idle {idle_after:.2f}s after the load; {len(tally.recorded)} recordings complete, "
          f"{len(tally.replied)} with whole replies, {len(on_disk)} on disk")
    assert sum(tally.runs.values()) >= CLIENTS and tally.replied
