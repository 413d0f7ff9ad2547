"""Hostile clients of both dialects and of the call routes on a real stack (issue 68).

The engine is ``devtools/fuzz.py`` (shared with ``python -m bench fuzz``): Realtime and Live
WebSocket sessions get scripts of nesting bombs, huge and binary frames, wrong types, unknown
types, invalid base64, text that is not JSON, events out of order and floods; the call routes get
hostile bodies and offers. What a user would notice is asserted: after every hostile client, a
fresh session of its dialect is served within 1 s of it leaving and every slot is idle within
1 s; no session ends as ``worker_error``, nothing logs a traceback, no call route answers 5xx (or
2xx to what it must refuse), and neither process grows.

~25 s of fuzzing on the suite's shared stack; ``OMNIDUPLEX_LONG=1`` fuzzes for 5 minutes,
``OMNIDUPLEX_FUZZ_S`` for as long as it says; ``OMNIDUPLEX_FUZZ_SEED`` replays a run (its seed is
printed first).
"""

from __future__ import annotations

import os
import random
import time

import websockets

from devtools import fuzz
from tests.support.realtime_client import recv_until
from tests.support.reliability import LONG, wait_idle

SECONDS = float(os.environ.get("OMNIDUPLEX_FUZZ_S") or (300 if LONG else 25))
SEED = int(os.environ["OMNIDUPLEX_FUZZ_SEED"]) if os.environ.get("OMNIDUPLEX_FUZZ_SEED") else None
# RSS growth over the run. A hostile session's queues are freed when it ends; what stays is the
# allocator's high-water mark of the biggest frames (5 MiB, parsed) and the model's per-shape state.
WORKER_GROWTH_MB = 150
GATEWAY_GROWTH_MB = 40


# ``stack``: the suite's shared default stack (``tests/conftest.py``).


def target_of(stack) -> fuzz.Target:
    return fuzz.Target(url=stack.url, admin_headers=stack.admin_headers, worker_url=stack.worker_url(),
                       worker_headers=stack.worker_headers, gateway_pid=stack.procs["gateway"].pid,
                       worker_pid=stack.procs["worker0"].pid, gateway_log=stack.tmp / "gateway.log",
                       worker_log=stack.tmp / "worker0.log")


async def test_hostile_clients_leave_the_worker_serving(stack):
    result = await fuzz.run(target_of(stack), SECONDS, SEED)
    figures = result.as_dict()
    print(fuzz.table(figures))
    assert not result.failures, "\n".join(result.failures[:10])
    assert result.crashed_readers == 0 and not figures["tracebacks"].get("gateway"), figures["first_traceback"]
    assert result.slots_held == 0
    probes = sum(result.cases.values())
    assert result.sessions_served == probes and probes >= 10, figures
    assert all(result.cases[kind] for kind in fuzz.KINDS), figures["cases"]  # every surface was driven
    assert result.events_sent >= 1000, figures
    for name, limit in (("worker", WORKER_GROWTH_MB), ("gateway", GATEWAY_GROWTH_MB)):
        rss = result.rss(name)
        assert rss["end"] - rss["start"] < limit, f"{name} RSS grew {rss}"


async def flood_then_abort(stack, frame: str, n: int) -> None:
    """Send ``n`` copies of ``frame`` on a Realtime session, abort the socket (no close frame,
    nothing read), then a fresh session must be served within 1 s and every slot idle."""
    url = fuzz.Target(stack.url, {}, "", {}).ws("/v1/realtime", record=False)
    async with websockets.connect(url) as ws:
        await recv_until(ws, "session.created")
        for _ in range(n):
            await ws.send(frame)
        ws.transport.abort()  # the worker is still working through them
    served_s, why = await fuzz.probe(fuzz.Target(stack.url, {}, "", {}), "realtime", time.monotonic())
    assert served_s is not None and served_s < fuzz.SERVE_WITHIN_S, (served_s, why)
    await wait_idle(stack, 1.0)


async def test_a_client_that_floods_then_leaves_frees_its_slot_at_once(stack):
    """What the fuzz found first: 3,000 events the worker answers with an error each, then the
    client aborts without reading. The gateway stopped reading the worker when its relay ended,
    the worker's close frame waited behind the unread errors, and the slot stayed held for the
    whole 2 s close timeout; the next client waited for it."""
    await flood_then_abort(stack, fuzz.dumps({"type": "nope"}), 3000)


async def test_a_client_that_floods_audio_then_leaves_frees_its_slot_at_once(stack):
    """Found by the fuzz next: 10,000 appends of 20 ms (200 s of audio in a burst), then the
    client aborts. The worker worked through every append it had received (each runs the VAD)
    before it saw the close: the next client was refused for 2.5-3.9 s. The worker now reads its
    client ahead of the session (``worker/read_ahead.py``) and drops what a client that left had
    sent, and the gateway resets the worker socket of a client that left."""
    append = {"type": "input_audio_buffer.append", "audio": fuzz.pcm_b64(random.Random(7), 20)}
    await flood_then_abort(stack, fuzz.dumps(append), 10_000)
