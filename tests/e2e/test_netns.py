"""A worker on "another host", cut off from the gateway without a word (docs/reliability.md).

The worker runs in its own network namespace, joined to the root namespace (gateway, test
client) by a veth pair: ``10.231.X.1`` here, ``10.231.X.2`` there. The cut drops every packet
silently in both directions (a ``blackhole`` qdisc on both ends of the veth; ``ip link set down``
where that qdisc is missing): no RST, no FIN, connects hang, exactly what a dead switch or a
pulled cable looks like. Needs root (``ip netns``); skipped otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time

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


IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
PREFIX = "odx"  # namespace odx-<pid>, veth ends odx<pid>a (here) and odx<pid>b (the worker's)
PING_S = 1.0  # workers.ping_interval_s: both ends of the gateway<->worker link ping this often

SHORT_ITEM = {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "Say hello."}]}}


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=10)


class Link:
    """A namespace for the worker and the veth pair to it; ``cut``/``restore`` the pair."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.ns = f"{PREFIX}-{pid}"
        self.here, self.there = f"{PREFIX}{pid}a", f"{PREFIX}{pid}b"
        used = _run(IP, "-4", "-o", "addr", check=False).stdout  # other runs' 10.231.X.1 ends
        x = next(n for n in ((pid + k) % 250 + 1 for k in range(250)) if f" 10.231.{n}." not in used)
        self.gateway_ip, self.worker_ip = f"10.231.{x}.1", f"10.231.{x}.2"
        self.ends = [("", self.here), (self.ns, self.there)]  # (namespace, device); "" = root
        self.how = ""

    @staticmethod
    def ip(ns: str, *args: str, check: bool = True) -> None:
        _run(IP, *(["-n", ns] if ns else []), *args, check=check)

    @staticmethod
    def tc(ns: str, *args: str, check: bool = True) -> None:
        _run(*([IP, "netns", "exec", ns] if ns else []), TC, *args, check=check)

    def create(self) -> None:
        _run(IP, "netns", "add", self.ns)  # the caller skips the test if this fails
        _run(IP, "link", "add", self.here, "type", "veth", "peer", "name", self.there)
        _run(IP, "link", "set", self.there, "netns", self.ns)
        self.ip("", "addr", "add", f"{self.gateway_ip}/24", "dev", self.here)
        self.ip(self.ns, "addr", "add", f"{self.worker_ip}/24", "dev", self.there)
        for ns, dev in [*self.ends, (self.ns, "lo")]:
            self.ip(ns, "link", "set", dev, "up")

    def cut(self) -> None:
        """Drop everything both ways, silently (the sockets on either side learn nothing)."""
        try:
            for ns, dev in self.ends:
                self.tc(ns, "qdisc", "replace", "dev", dev, "root", "blackhole")
            self.how = "blackhole qdisc"
        except subprocess.CalledProcessError:  # no sch_blackhole: a downed link drops silently too
            for ns, dev in self.ends:
                self.ip(ns, "link", "set", dev, "down")
            self.how = "link down"

    def restore(self) -> None:
        for ns, dev in self.ends:
            self.tc(ns, "qdisc", "del", "dev", dev, "root", check=False)
            self.ip(ns, "link", "set", dev, "up")

    def destroy(self) -> None:
        _run(IP, "link", "del", self.here, check=False)  # takes its peer with it
        _run(IP, "netns", "del", self.ns, check=False)

    @staticmethod
    def remove_stale() -> None:
        """Namespaces left by a test run that was killed before its finalizer (pid gone)."""
        for line in _run(IP, "netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.strip() else ""
            pid = name.removeprefix(f"{PREFIX}-")
            if name.startswith(f"{PREFIX}-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                _run(IP, "link", "del", f"{PREFIX}{pid}a", check=False)
                _run(IP, "netns", "del", name, check=False)


@pytest.fixture
def netns_stack(tmp_path):
    if os.geteuid() != 0 or not os.path.exists(IP):
        pytest.skip(f"needs root and ip netns (euid {os.geteuid()}, {IP} exists: {os.path.exists(IP)})")
    Link.remove_stale()
    link = Link()
    stack = None
    try:
        try:
            link.create()
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"needs root and ip netns: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
        stack = make_stack(tmp_path, 1, {"ping_interval_s": PING_S}, worker_host=link.worker_ip,
                           worker_prefix=[IP, "netns", "exec", link.ns])
        stack.start()
        yield stack, link
    finally:
        if stack is not None:
            stack.stop()
        link.destroy()
        assert link.ns not in _run(IP, "netns", "list", check=False).stdout


async def worker_health_inside(stack, link) -> dict | None:
    """The worker's /health asked from inside its namespace (works while the veth is cut);
    None if it does not answer within 2 s."""
    code = ("import sys, urllib.request as u; print(u.urlopen(u.Request(sys.argv[1], headers="
            "{'Authorization': sys.argv[2]}), timeout=2).read().decode())")
    proc = await asyncio.create_subprocess_exec(
        IP, "netns", "exec", link.ns, sys.executable, "-S", "-c", code, f"{stack.worker_url(0)}/health",
        stack.worker_headers["Authorization"],
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(proc.communicate(), 10)
    return json.loads(out) if proc.returncode == 0 else None


async def worker_idle_inside(stack, link, since: float) -> float:
    """Seconds from ``since`` until the worker, asked inside its namespace, holds no session."""
    while ((await worker_health_inside(stack, link)) or {}).get("active_sessions") != 0:
        await asyncio.sleep(0.1)
    return time.monotonic() - since


async def worker_idle_via_veth(stack, timeout: float) -> float:
    """Seconds until the worker's /health, asked from here through the veth, shows no session."""
    t0 = time.monotonic()
    last: object = None
    async with httpx.AsyncClient(timeout=2, trust_env=False) as http:
        while time.monotonic() - t0 < timeout:
            try:
                last = (await http.get(f"{stack.worker_url(0)}/health", headers=stack.worker_headers)).json()
                if last["active_sessions"] == 0:
                    return time.monotonic() - t0
            except httpx.HTTPError as exc:
                last = exc
            await asyncio.sleep(0.1)
    raise AssertionError(f"worker not idle through the veth within {timeout}s: {last!r}")


async def test_worker_cut_off_by_the_network_mid_reply(netns_stack):
    """Silent network cut during a spoken reply: the gateway fails the session by its ping,
    the worker frees its slot by its own ping, and after the link is back the pool takes the
    worker back and serves the client that queued meanwhile."""
    stack, link = netns_stack
    # 1. healthy through the veth
    gw, workers = await health(stack)
    assert gw["workers_healthy"] == 1 and gw["workers"][0]["url"] == stack.worker_url(0), gw
    assert workers and workers[0]["active_sessions"] == 0, workers
    # 2. a spoken reply is streaming
    ws = await websockets.connect(ws_url(stack, app="netns"))
    await recv_until(ws, "session.created", timeout=30)
    await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    await ws.send(json.dumps(TEXT_ITEM))
    await ws.send(json.dumps({"type": "response.create"}))
    await recv_until(ws, "response.output_audio.delta", timeout=60)
    assert ((await worker_health_inside(stack, link)) or {}).get("active_sessions") == 1
    # 3. cut the wire, silently
    t_cut = time.monotonic()
    link.cut()
    freed_task = asyncio.create_task(worker_idle_inside(stack, link, t_cut))
    try:
        # 4. the client hears worker_failed and a 1011 close; the pool holds nothing
        err = await recv_until(ws, "error", timeout=15)
        detected = time.monotonic() - t_cut
        code, _ = await closed_with(ws, timeout=10)
        closed = time.monotonic() - t_cut
        assert err["error"]["code"] == "worker_failed", err
        assert code == 1011, code
        assert closed < 10.0, closed  # gateway ping 1 s + pong wait 1 s + close wait 2 s (+ busy CPU)
        gw = await gateway_health(stack)
        assert gw["slots_busy"] == 0 and gw["queue_length"] == 0, gw
        assert gw["workers"][0]["health"] == "unhealthy", gw
        # a new client queues instead of being sent into the dead link
        waiter = await websockets.connect(ws_url(stack, app="netns"))
        await recv_until(waiter, "queue.position", timeout=5)
        await asyncio.sleep(1.0)  # probes keep failing: still queued, never assigned
        gw = await gateway_health(stack)
        assert gw["queue_length"] == 1 and gw["slots_busy"] == 0 and gw["workers_healthy"] == 0, gw
        # 5a. the worker, on its side, notices by its own ping that the gateway is gone
        freed = await asyncio.wait_for(freed_task, 20)
        assert freed < 10.0, freed  # worker ping 1 s + pong wait 1 s + session teardown
    finally:
        freed_task.cancel()
        t_restore = time.monotonic()
        link.restore()
    outage = t_restore - t_cut
    # 5b. back on the wire: the worker's /health through the veth, then the pool takes it back
    reachable = await worker_idle_via_veth(stack, 10)
    await recv_until(waiter, "session.created", timeout=20)
    back = time.monotonic() - t_restore
    gw = await gateway_health(stack)
    assert gw["workers"][0]["health"] == "healthy" and gw["slots_busy"] == 1, gw
    # ... and serves the waiter a full spoken reply
    await waiter.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
    await waiter.send(json.dumps(SHORT_ITEM))
    await waiter.send(json.dumps({"type": "response.create"}))
    seen: list[dict] = []
    done = await recv_until(waiter, "response.done", timeout=60, log=seen)
    assert done["response"]["status"] == "completed", done
    assert any(ev["type"] == "response.output_audio.delta" for ev in seen)
    await waiter.close()
    # 6. every slot idle
    await wait_idle(stack, 5.0)
    print(f"\nnetns cut ({link.how}, ping {PING_S:g} s): worker_failed after {detected:.2f}s, "
          f"close {code} after {closed:.2f}s; the worker freed its slot {freed:.2f}s after the cut "
          f"(outage {outage:.1f}s); after restore: worker /health via veth in {reachable:.2f}s, "
          f"taken back and the waiter assigned in {back:.2f}s")
