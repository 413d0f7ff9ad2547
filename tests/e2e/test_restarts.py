"""Restarts end to end, with real processes and the real cascade model (docs/reliability.md).

- The supervisor (``python -m launcher``) restarts a ``kill -9``'d worker; the gateway
  fails the session on it, queues new clients meanwhile, and takes the worker back once probes
  pass ``health.healthy_after``; SIGTERM then stops everything and leaves no process behind.
- The gateway is killed (``kill -9``) or stopped (SIGTERM) while two recorded sessions are open
  on one worker (2 slots); the worker finishes both recordings, and the restarted gateway lists
  and serves them and runs new sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time

import httpx
import psutil
import pytest
import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import (
    closed_with,
    gateway_health,
    health,
    make_stack,
    open_session,
say,
    wait_idle,
    wait_meta,
    ws_url,
)
from tests.support.helpers import gone


STARTED = re.compile(r"\[supervisor\] started (worker \d+|gateway) \(pid (\d+)\)")
LONG_REPLY = "Count slowly from one to thirty."


def started(log) -> list[tuple[str, int]]:
    """(child name, pid) for every start the supervisor logged, in order."""
    return [(name, int(pid)) for name, pid in STARTED.findall(log.read_text())]


def ours(pid: int, marker: str) -> bool:
    """Still running and started with our config file (never signal a recycled pid)."""
    try:
        return not gone(pid) and any(marker in arg for arg in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


async def until(predicate, timeout: float, what: str, step: float = 0.05) -> float:
    """Poll an async predicate; returns when it held (time.monotonic())."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"no {what} within {timeout}s"
        await asyncio.sleep(step)
    return time.monotonic()


# ---------------------------------------------------------------------------- supervisor


@pytest.fixture
def supervised(tmp_path):
    stack = make_stack(tmp_path, 1)
    sup = stack.start_supervisor()
    log = tmp_path / "supervisor.log"
    yield stack, sup, log
    # Normally a no-op (the test stopped it): the supervisor, then any child it left behind
    # (each child runs in its own process group).
    marker = str(stack.config_path)
    for pid in [sup.pid, *(pid for _, pid in started(log))]:
        if ours(pid, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    sup.wait(10)


async def test_supervisor_restarts_a_killed_worker_and_the_pool_takes_it_back(supervised):
    stack, sup, log = supervised
    t_boot = time.monotonic()
    stack.wait_healthy(1, timeout=180)  # nothing is connected yet: blocking the loop is fine
    booted_in = time.monotonic() - t_boot
    worker_pid = dict(started(log))["worker 0"]

    ws, _ = await open_session(stack, record="false")
    await say(ws, LONG_REPLY)
    await recv_until(ws, "response.output_audio.delta", timeout=60)
    t0 = time.monotonic()
    os.kill(worker_pid, signal.SIGKILL)  # the worker alone, not its process group
    err = await recv_until(ws, "error", timeout=5)
    code, _ = await closed_with(ws)
    error_after = time.monotonic() - t0
    assert err["error"]["code"] == "worker_failed" and code == 1011, (err, code)
    assert error_after < 3.0, error_after

    # While the worker is down (or loading), a new client waits in the queue.
    gw = await gateway_health(stack)
    assert gw["workers_healthy"] == 0 and gw["slots_busy"] == 0, gw
    waiter_events: list[dict] = []
    t_wait = time.monotonic()
    waiter = await websockets.connect(ws_url(stack, record="false"))
    await recv_until(waiter, "queue.position", timeout=5, log=waiter_events)

    async def restarted() -> bool:
        return len([n for n, _ in started(log) if n == "worker 0"]) == 2

    async def healthy() -> bool:
        return (await gateway_health(stack))["workers_healthy"] == 1

    restart = asyncio.create_task(until(restarted, 30, "worker restart"))
    back = asyncio.create_task(until(healthy, 180, "healthy worker", step=0.02))
    try:
        await recv_until(waiter, "queue.assigned", timeout=180, log=waiter_events)
        t_assigned = time.monotonic()
        restarted_after, healthy_after = await restart - t0, await back - t0
    finally:
        restart.cancel()
        back.cancel()
    await recv_until(waiter, "session.created", timeout=30, log=waiter_events)
    await say(waiter, "Say hello.")
    done = await recv_until(waiter, "response.done", timeout=90, log=waiter_events)
    served_in = time.monotonic() - t_assigned
    assert done["response"]["status"] == "completed", done
    assert not [ev for ev in waiter_events if ev["type"] == "error"], waiter_events
    queued = [ev for ev in waiter_events if ev["type"] == "queue.position"]
    await waiter.close()
    await wait_idle(stack, 3.0)

    text = log.read_text()
    assert re.search(r"\[supervisor\] worker 0 exited with code -9; restarting in [\d.]+s", text), text[-3000:]
    assert text.count("[worker 0] ready") == 2  # the model loaded again
    new_pid = [pid for name, pid in started(log) if name == "worker 0"][-1]
    assert new_pid != worker_pid and gone(worker_pid)
    assert [n for n, _ in started(log)].count("gateway") == 1  # the gateway was never restarted

    # SIGTERM stops everything: every child (and theirs) gone, exit code 0.
    children = {p.pid for p in psutil.Process(sup.pid).children(recursive=True)}
    every_pid = children | {pid for _, pid in started(log)}
    t_stop = time.monotonic()
    sup.send_signal(signal.SIGTERM)
    while sup.poll() is None:
        assert time.monotonic() - t_stop < 60, "supervisor did not stop in 60s"
        await asyncio.sleep(0.05)
    stopped_in = time.monotonic() - t_stop
    assert sup.returncode == 0, log.read_text()[-3000:]
    assert "[supervisor] stopped" in log.read_text()
    left = [pid for pid in every_pid if not gone(pid)]
    assert not left, [psutil.Process(p).cmdline() for p in left]
    print(f"\nsupervisor: stack up in {booted_in:.1f}s; kill -9 worker -> worker_failed + 1011 in "
          f"{error_after:.2f}s, restarted (new pid) {restarted_after:.1f}s, healthy again "
          f"{healthy_after:.1f}s after the kill; waiter queued {t_assigned - t_wait:.1f}s "
          f"({len(queued)} queue.position events), served a full reply {served_in:.1f}s after "
          f"assignment; SIGTERM stopped {len(every_pid)} processes in {stopped_in:.1f}s")


# ---------------------------------------------------------------------------- gateway


@pytest.fixture
def two_slot_stack(tmp_path):
    s = make_stack(tmp_path, 1, {"slots": 2}).start()
    yield s
    s.stop()


async def worker_health(stack) -> dict:
    async with httpx.AsyncClient(timeout=2) as http:
        return (await http.get(f"{stack.worker_url(0)}/health", headers=stack.worker_headers)).json()


async def turn(ws, text: str, until_kind: str = "response.done") -> dict:
    await say(ws, text)
    return await recv_until(ws, until_kind, timeout=90)


@pytest.mark.parametrize("how", ["kill", "term"])
async def test_gateway_restart_while_sessions_are_recorded(two_slot_stack, how):
    stack = two_slot_stack
    # a: one turn done, the second mid-reply; b: one turn done, idle between turns.
    (a, rec_a), (b, rec_b) = await asyncio.gather(open_session(stack, app="restarts"),
                                                  open_session(stack, app="restarts"))
    done_a, done_b = await asyncio.gather(turn(a, "Say hello."), turn(b, "Say hello."))
    assert done_a["response"]["status"] == done_b["response"]["status"] == "completed"
    await turn(a, LONG_REPLY, "response.output_audio.delta")
    gw, _ = await health(stack)
    assert gw["slots_busy"] == 2, gw
    assert (await worker_health(stack))["active_sessions"] == 2

    gateway = stack.procs["gateway"]
    t0 = time.monotonic()
    if how == "kill":
        stack.kill("gateway")
    else:
        gateway.terminate()
    (code_a, _), (code_b, _) = await asyncio.gather(closed_with(a, 15), closed_with(b, 15))
    closed_after = time.monotonic() - t0
    while gateway.poll() is None:
        assert time.monotonic() - t0 < 30, "gateway did not exit in 30s after SIGTERM"
        await asyncio.sleep(0.05)
    exited_after = time.monotonic() - t0
    # kill -9: no close frame. SIGTERM: uvicorn closes every open WebSocket with 1012 (service restart).
    expected = {1006} if how == "kill" else {1001, 1012}
    assert code_a in expected and code_b in expected, (code_a, code_b)

    async def slots_free() -> bool:
        return (await worker_health(stack))["active_sessions"] == 0

    freed_after = await until(slots_free, 15, "free worker slots") - t0
    metas = {}
    for ws_rec in (rec_a, rec_b):
        metas[ws_rec["session_id"]] = await wait_meta(stack, ws_rec["session_id"], timeout=30)
    finished_after = time.monotonic() - t0
    for sid, meta in metas.items():
        d = stack.sessions_dir / sid
        assert meta["end_reason"] == "client_closed", meta  # the gateway, the worker's client, went away
        wav = d / "merged_replay.wav"
        assert wav.is_file() and wav.stat().st_size > 44 * 10, wav
        recording = json.loads((d / "recording.json").read_text())
        assert recording["complete"] is True
        kinds = [e["type"] for e in recording["events"]]
        assert kinds[-1] == "session_end"
        assert "reply_audio" in kinds and "reply_text" in kinds
        dones = [e for e in recording["events"] if e["type"] == "response_done"]
        assert dones and dones[0]["status"] == "completed", dones
        user_turns = kinds.count("user_text")
        assert user_turns == (2 if sid == rec_a["session_id"] else 1), kinds

    t1 = time.monotonic()
    stack.start_gateway()
    stack.wait_healthy(1, timeout=60)  # no socket is open: blocking the loop is fine
    back_after = time.monotonic() - t1

    auth = {"Authorization": f"Bearer {stack.admin_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        listing = (await http.get("/api/admin/sessions", headers=auth)).json()["sessions"]
        listed = {s["id"]: s for s in listing}
        for rec in (rec_a, rec_b):
            sid = rec["session_id"]
            assert listed[sid]["status"] == "finished" and listed[sid]["end_reason"] == "client_closed"
            token = rec["share_url"].split("token=", 1)[1]
            r = await http.get(f"/api/sessions/{sid}", params={"token": token})
            assert r.status_code == 200 and r.json()["recording"]["events"], r.text
            assert (await http.get(f"/s/{sid}", params={"token": token})).status_code == 200
            wav = await http.get(f"/api/sessions/{sid}/replay.wav", params={"token": token})
            assert wav.status_code == 200 and wav.content[:4] == b"RIFF"

    t2 = time.monotonic()
    c, rec_c = await open_session(stack, app="restarts")
    assert (await turn(c, "Say hello."))["response"]["status"] == "completed"
    await c.close()
    new_session_in = time.monotonic() - t2
    assert (await wait_meta(stack, rec_c["session_id"]))["end_reason"] == "client_closed"
    await wait_idle(stack, 3.0)
    print(f"\ngateway {how}: both clients closed ({code_a}, {code_b}) in {closed_after:.2f}s, gateway "
          f"exited in {exited_after:.2f}s; worker slots free {freed_after:.2f}s and both recordings "
          f"finished {finished_after:.2f}s after the fault; restarted gateway healthy in "
          f"{back_after:.1f}s; a new session served in {new_session_in:.1f}s")
