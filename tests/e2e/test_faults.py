"""Worker faults, injected on purpose, and what the client and the pool see (docs/reliability.md).

Test doubles (``HangingWorkerDouble``) live only here: a tiny asyncio HTTP server that answers
``/health`` like a ready worker and misbehaves on ``/ws/realtime``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import time
from typing import Self

import httpx
import pytest
import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import (
    TEXT_ITEM,
    closed_with,
    gateway_health,
    health,
    make_stack,
wait_idle,
    ws_url,
)
from tests.support.stack import free_port


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
READY = json.dumps({"state": "IDLE", "model_loaded": True, "slots": 1, "active_sessions": 0}).encode()


class HangingWorkerDouble:
    """Answers ``GET /health`` as a ready worker; on ``/ws/realtime`` it ``mode``:

    - ``hang_handshake``: reads the upgrade request and never answers it;
    - ``hang_open``: completes the WebSocket upgrade, then never sends or reads a byte
      (not even a pong) while keeping the socket open;
    - ``refuse``: answers the upgrade with HTTP 503.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.port = free_port()
        self.server: asyncio.Server | None = None
        self.upgrades = 0
        self._held: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc) -> None:
        for w in self._held:
            w.transport.abort()
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        path = head.split(" ", 2)[1]
        if path.startswith("/health"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(READY), READY))
            await writer.drain()
            writer.close()
            return
        self.upgrades += 1
        self._held.append(writer)
        if self.mode == "refuse":
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        if self.mode == "hang_open":
            key = next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                       if line.lower().startswith("sec-websocket-key:"))
            accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            writer.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
            await writer.drain()
        await asyncio.Event().wait()  # hang with the socket open


@pytest.fixture
def bare_stack(tmp_path):
    """A gateway with no worker of its own; doubles are registered through the admin API."""
    s = make_stack(tmp_path, 0, {"connect_timeout_s": 1.5}, queue={"max_wait_s": 3})
    s.start()
    yield s
    s.stop()


async def register(stack, url: str) -> str:
    async with httpx.AsyncClient(timeout=5) as http:
        r = await http.post(f"{stack.url}/api/admin/workers", json={"url": url},
                            headers={"Authorization": f"Bearer {stack.admin_token}"})
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        deadline = time.monotonic() + 10
        while (await health(stack))[0]["workers_healthy"] < 1:
            assert time.monotonic() < deadline, "double never turned healthy"
            await asyncio.sleep(0.05)
    return wid


@pytest.mark.parametrize("mode", ["hang_handshake", "hang_open", "refuse"])
async def test_worker_that_hangs_or_refuses_the_session(bare_stack, mode):
    async with HangingWorkerDouble(mode) as double:
        await register(bare_stack, double.url)
        t0 = time.monotonic()
        ws = await websockets.connect(ws_url(bare_stack))
        await recv_until(ws, "queue.assigned")
        err = await recv_until(ws, "error", timeout=5)
        code, _ = await closed_with(ws)
        took = time.monotonic() - t0
        assert err["error"]["code"] == "worker_unavailable"
        assert code == 1011
        assert double.upgrades == 1
        # connect_timeout_s = 1.5: once for the upgrade, or once more for session.created
        assert took < (4.0 if mode != "refuse" else 1.0), took
        await wait_idle(bare_stack, 1.0)
        print(f"{mode}: worker_unavailable + 1011 after {took:.2f}s")


async def test_worker_refusing_connections(bare_stack):
    """Nothing listens at the registered URL: probes fail, the worker never turns healthy, and a
    client waits in the queue only until ``queue.max_wait_s`` (3 s here)."""
    async with httpx.AsyncClient(timeout=5) as http:
        r = await http.post(f"{bare_stack.url}/api/admin/workers", json={"url": f"http://127.0.0.1:{free_port()}"},
                            headers={"Authorization": f"Bearer {bare_stack.admin_token}"})
        assert r.status_code == 201
    await asyncio.sleep(1.0)
    gw, _ = await health(bare_stack)
    assert gw["workers_healthy"] == 0 and gw["workers"][0]["health"] in ("unknown", "unhealthy")
    t0 = time.monotonic()
    ws = await websockets.connect(ws_url(bare_stack))
    err = await recv_until(ws, "error", timeout=6)
    code, _ = await closed_with(ws)
    assert err["error"]["code"] == "queue_timeout" and code == 1013
    assert 2.5 < time.monotonic() - t0 < 5
    await wait_idle(bare_stack, 1.0)


@pytest.fixture
def stack(tmp_path):
    s = make_stack(tmp_path, 1, {"ping_interval_s": 1.0}).start()
    yield s
    s.stop()


async def start_reply(ws) -> str:
    rec = await recv_until(ws, "session.recording")
    await recv_until(ws, "session.created")
    await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    await ws.send(json.dumps(TEXT_ITEM))
    await ws.send(json.dumps({"type": "response.create"}))
    await recv_until(ws, "response.output_audio.delta", timeout=60)
    return rec["session_id"]


async def test_worker_killed_mid_reply_recording_stays_readable(stack):
    ws = await websockets.connect(ws_url(stack, app="faults"))
    session_id = await start_reply(ws)
    await asyncio.sleep(0.5)  # let the recorder write a snapshot
    t0 = time.monotonic()
    stack.kill("worker0")
    err = await recv_until(ws, "error", timeout=3)
    code, _ = await closed_with(ws)
    assert err["error"]["code"] == "worker_failed" and code == 1011
    assert time.monotonic() - t0 < 2.0
    await wait_idle(stack, 1.0, down=[0])  # idle, and worker 0 stays dead (nothing restarts it)
    # the cut-off recording is readable and its replay is built on demand
    auth = {"Authorization": f"Bearer {stack.admin_token}"}
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.get(f"{stack.url}/api/sessions/{session_id}", headers=auth)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["meta"]["status"] == "live"  # nobody could finish it
        assert body["recording"]["events"], "no events recorded before the kill"
        wav = await http.get(f"{stack.url}/api/sessions/{session_id}/replay.wav", headers=auth)
        assert wav.status_code == 200 and wav.content[:4] == b"RIFF"


async def test_worker_hung_mid_reply_is_failed_by_ping_then_taken_back(stack):
    """SIGSTOP: the worker's sockets stay open but nothing answers. The gateway's ping (1 s here,
    ``workers.ping_interval_s``) ends the session with worker_failed; probes mark the worker
    unhealthy; after SIGCONT the pool takes it back once probes pass ``healthy_after``."""
    ws = await websockets.connect(ws_url(stack))
    await start_reply(ws)
    pid = stack.procs["worker0"].pid
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        err = await recv_until(ws, "error", timeout=10)
        failed_after = time.monotonic() - t0
        code, _ = await closed_with(ws)
        assert err["error"]["code"] == "worker_failed" and code == 1011
        assert failed_after < 6.0, failed_after  # ping 1 s + pong wait 1 s + close wait 2 s
        gw = await gateway_health(stack)  # the stopped worker cannot answer its own
        assert gw["slots_busy"] == 0 and gw["queue_length"] == 0
        assert gw["workers"][0]["health"] == "unhealthy"
        # a new client queues (no healthy worker) instead of being sent to the hung one
        waiter = await websockets.connect(ws_url(stack))
        await recv_until(waiter, "queue.position")
    finally:
        os.kill(pid, signal.SIGCONT)
    t1 = time.monotonic()
    await recv_until(waiter, "session.created", timeout=20)
    back_after = time.monotonic() - t1
    await waiter.close()
    await wait_idle(stack, 3.0)
    print(f"hung worker failed after {failed_after:.2f}s, taken back {back_after:.2f}s after SIGCONT")


@pytest.fixture
def default_stack(tmp_path):
    s = make_stack(tmp_path, 1).start()
    yield s
    s.stop()


async def test_client_that_stops_reading_gets_bounded_buffers_then_a_close(default_stack):
    """The client floods bad events (each answered by an ``error``) and never reads. Buffers fill
    up to their bounds; the worker's send queue (4000 events) fills and it ends the session with
    1008; the gateway frees the slot. Memory stays bounded (the gateway's RSS is checked)."""
    import psutil

    gw_proc = psutil.Process(default_stack.procs["gateway"].pid)
    rss0 = gw_proc.memory_info().rss
    ws = await websockets.connect(ws_url(default_stack, record="false"), max_queue=1)
    await recv_until(ws, "session.created")
    t0 = time.monotonic()
    bad = json.dumps({"type": "no.such.event", "pad": "x" * 200})
    for i in range(40000):
        try:
            await asyncio.wait_for(ws.send(bad), 5)
        except (TimeoutError, websockets.ConnectionClosed):
            break  # our own send buffer is full too: the server stopped reading us
        if i % 500 == 0:
            await asyncio.sleep(0)
    sent_for = time.monotonic() - t0
    # the worker gives up on the session, the gateway frees the slot
    deadline = time.monotonic() + 60
    while True:
        gw, workers = await health(default_stack)
        if gw["slots_busy"] == 0 and workers[0]["active_sessions"] == 0:
            break
        assert time.monotonic() < deadline, f"slow client still holds the slot: {gw} {workers}"
        await asyncio.sleep(0.2)
    freed_after = time.monotonic() - t0
    growth = gw_proc.memory_info().rss - rss0
    code, events = await closed_with(ws, timeout=10)
    print(f"slow client: sent {sent_for:.1f}s, slot freed after {freed_after:.1f}s, close {code}, "
          f"{len(events)} events read after, gateway RSS +{growth / 2**20:.1f} MiB")
    assert code in (1008, 1006)  # 1006 when the close frame could not get through the full buffers
    assert gw["workers"][0]["health"] == "healthy"  # a slow client is not the worker's failure
    assert growth < 100 * 2**20
    await wait_idle(default_stack, 1.0)
