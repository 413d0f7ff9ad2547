"""Several gateway processes on one real ``redis-server`` (``cluster.redis_url``), one real worker.

What a user of a multi-gateway deployment would notice: one FIFO whichever gateway a client
reached, never two sessions on a one-slot worker, a killed gateway's slot going to the next
client, and a Redis outage answered with a clear error instead of a hang or a leaked slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import subprocess
import time

import httpx
import pytest
import websockets

from launcher.processes import kill, spawn_module, stop_all
from launcher.redis_server import redis_ping, start_redis
from tests.support.realtime_client import Client
from tests.support.reliability import wait_meta
from tests.support.sdk_realtime import drain, opened, say, sdk, until
from tests.support.stack import Stack, free_port

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian redis-server not installed")

LEASE_TTL_S = 3.0


class Cluster:
    """Gateway ``a`` (with the worker in its config) from ``Stack``; more gateways on demand."""

    def __init__(self, tmp, redis_port: int) -> None:
        self.tmp = tmp
        self.redis_port = redis_port
        self.redis_dir = tmp / "redis"
        self.redis_dir.mkdir()
        self.redis = start_redis(self.redis_dir, redis_port)
        cluster = {"redis_url": f"redis://127.0.0.1:{redis_port}/0", "lease_ttl_s": LEASE_TTL_S, "gateway_id": "a"}
        self.stack = Stack(tmp, workers=1, cluster=cluster, queue={"capacity": 50})
        self.ports = {"a": self.stack.port}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> Cluster:
        self.stack.start()
        for name in ("b", "c"):
            self.start_gateway(name)
        for name in self.ports:
            self.wait_healthy(name)
        return self

    def start_gateway(self, name: str) -> None:
        config = json.loads(self.stack.config_path.read_text())
        port = self.ports.setdefault(name, free_port())
        config["gateway"] = {"port": port}
        config["workers"] = {**config["workers"], "count": 0}  # gateway-only: workers come from Redis
        config["cluster"] = {**config["cluster"], "gateway_id": name}
        path = self.tmp / f"config-{name}.json"
        path.write_text(json.dumps(config))
        self.procs[name] = spawn_module("gateway", "--config", str(path), log=self.tmp / f"gateway-{name}.log")

    def health(self, name: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.ports[name]}/health", timeout=3, headers=self.stack.admin_headers)

    def wait_healthy(self, name: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                body = self.health(name).json()
                if body.get("workers_healthy", 0) >= 1 and body.get("cluster", {}).get("ok"):
                    return body
            assert time.monotonic() < deadline, f"gateway {name} not healthy: {self.logs()}"
            time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in self.tmp.glob("*.log"))

    def kill(self, name: str) -> None:
        kill(self.procs.pop(name))
        del self.ports[name]

    def stop(self) -> None:
        stop_all(self.procs.values(), grace=10)
        self.stack.stop()
        self.redis.stop()

    def busy(self) -> int:
        out = subprocess.run(["redis-cli", "-p", str(self.redis_port), "hget", "omniduplex:worker:w0", "busy"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
        return int(out or 0)

    def worker_sessions(self) -> int:
        return self.stack.worker_health(0)["active_sessions"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"), free_port())
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(autouse=True)
def idle(cluster):
    """Each test starts with the slot free, an empty queue, and every gateway answering."""
    deadline = time.monotonic() + 20
    while cluster.busy() or any(cluster.health(n).json()["queue_length"] for n in cluster.ports):
        assert time.monotonic() < deadline, "a slot or queue entry was left behind"
        time.sleep(0.1)


class Waiter(Client):
    """A realtime client on one gateway that asked for the queue events."""

    def __init__(self, ws) -> None:
        super().__init__(ws, extensions=frozenset({"queue"}), timeout=30)

    @classmethod
    async def connect(cls, cluster: Cluster, gateway: str) -> Waiter:
        url = f"ws://127.0.0.1:{cluster.ports[gateway]}/v1/realtime?model=omniduplex-cascade&extensions=queue"
        return cls(await websockets.connect(url, max_size=None))

    async def drain(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    self.events.append(json.loads(await self.ws.recv()))

    def positions(self) -> list[int]:
        return [e["position"] for e in self.events if e["type"] == "queue.position"]

    async def close(self) -> None:  # no settling, no event checks: this test is about the queue
        await self.ws.close()


async def test_one_fifo_across_gateways(cluster):
    """The client queued on B before the one on A is served first, and each hears its place."""
    holder = await Waiter.connect(cluster, "a")
    await holder.until("session.created")
    first = await Waiter.connect(cluster, "b")
    assert (await first.until("queue.position"))["position"] == 1
    second = await Waiter.connect(cluster, "a")
    assert (await second.until("queue.position"))["position"] == 2
    # /admin on a third gateway lists the others' sessions and queue entries (refreshed each second)
    deadline = time.monotonic() + 5
    while True:
        admin = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{cluster.ports['c']}/api/admin/overview",
                                        headers={"Authorization": f"Bearer {cluster.stack.admin_token}"}, timeout=5)
        live = {(s["gateway"], s["state"]) for s in admin.json()["live"]}
        queue = [(e["gateway"], e["position"]) for e in admin.json()["queue"]]
        if live == {("a", "active"), ("b", "queued"), ("a", "queued")} and queue == [("b", 1), ("a", 2)]:
            break
        assert time.monotonic() < deadline, (live, queue)
        await asyncio.sleep(0.2)
    await holder.close()
    assigned = await first.until("queue.assigned", timeout=10)
    assert assigned["worker_id"] == "w0"
    await first.until("session.created")
    await second.drain(0.3)
    assert all(e["type"] != "queue.assigned" for e in second.events)
    assert second.positions()[-1] == 1  # moved up, heard through Redis from another gateway
    await first.close()
    await second.until("session.created", timeout=10)
    await second.close()


async def test_random_connects_never_share_the_slot(cluster):
    """200 clients over three gateways, leaving while queued or after their session began:
    the one-slot worker never runs two sessions, and every slot is free afterwards."""
    rng = random.Random(20)
    refused: list[str] = []
    peak = 0

    async def one(i: int) -> None:
        gateway = rng.choice(["a", "b", "c"])
        try:
            client = await Waiter.connect(cluster, gateway)
        except (OSError, websockets.WebSocketException) as exc:
            refused.append(f"{gateway}: {exc!r}")
            return
        try:
            if rng.random() < 0.4:  # gives up while queued (or just after being assigned)
                await asyncio.sleep(rng.uniform(0, 0.3))
                return
            created = await client.until("session.created", timeout=60)
            assert created
            await asyncio.sleep(rng.uniform(0, 0.05))
        except websockets.ConnectionClosed as exc:
            refused.append(f"{gateway}: closed {exc.rcvd}")
        finally:
            await client.close()

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, await asyncio.to_thread(cluster.worker_sessions))
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        for batch in range(0, 200, 8):
            await asyncio.gather(*(one(i) for i in range(batch, batch + 8)))
    finally:
        watcher.cancel()
    assert not refused, refused[:5]
    assert peak <= 1
    deadline = time.monotonic() + 15
    while cluster.busy() or cluster.worker_sessions():
        assert time.monotonic() < deadline, "a slot stayed leased"
        await asyncio.sleep(0.1)
    for name in cluster.ports:  # every gateway's mirror agrees within its refresh (1 s)
        while (body := cluster.health(name).json())["queue_length"] or body["slots_busy"]:
            assert time.monotonic() < deadline + 3, (name, body)
            await asyncio.sleep(0.1)


async def test_killed_gateway_frees_its_slot(cluster):
    """kill -9 of the gateway holding the slot: the client waiting on another gateway gets it
    within the lease time."""
    cluster.start_gateway("d")
    cluster.wait_healthy("d")
    holder = await Waiter.connect(cluster, "d")
    await holder.until("session.created")
    waiter = await Waiter.connect(cluster, "b")
    await waiter.until("queue.position")
    killed = time.monotonic()
    cluster.kill("d")
    await waiter.until("session.created", timeout=LEASE_TTL_S + 5)
    assert time.monotonic() - killed <= LEASE_TTL_S + 2
    await waiter.close()
    with contextlib.suppress(Exception):
        await holder.ws.close()


async def test_a_conversation_goes_on_through_another_gateway_after_its_gateway_is_killed(cluster):
    """Issue 72: kill -9 of the gateway that carries an SDK session mid-reply; the client comes
    back through another gateway with its resume token after the dead gateway was reaped: the
    same worker session answers with the earlier turns in context, and the slot was never freed
    meanwhile (a client waiting on a third gateway stays queued)."""
    cluster.start_gateway("d")
    cluster.wait_healthy("d")
    conn = await sdk(cluster.ports["d"]).realtime.connect(model="omniduplex-cascade",
                                                          extra_query={"extensions": "resume"}).enter()
    session_id, token = await opened(conn, 30.0)
    first = await say(conn, "My name is Ada. Tell me a long story about a lighthouse keeper.")
    await until(conn, "response.output_audio.delta")  # mid-reply
    cluster.kill("d")
    killed = time.monotonic()
    with pytest.raises(Exception):  # the SDK's socket died with its gateway
        await asyncio.wait_for(drain(conn), 10)
    waiter = await Waiter.connect(cluster, "c")
    await asyncio.sleep(max(0.0, killed + LEASE_TTL_S + 1.5 - time.monotonic()))  # the reaper has been
    await waiter.drain(0.3)
    assert cluster.busy() == 1 and not waiter.of("session.created"), "the held session's slot was freed"
    assert waiter.positions(), "the next client is queued behind the held session"
    async with sdk(cluster.ports["b"]).realtime.connect(
            model="omniduplex-cascade", extra_query={"extensions": "resume", "resume_token": token}) as conn:
        created = await until(conn, "session.created", 10)
        assert created.session.id == session_id and time.monotonic() - killed < 5 + 1
        back = await until(conn, "session.reattached", 10)
        assert back.session_id == session_id and back.items >= 2  # the user's message and the cut reply
        await conn.conversation.item.retrieve(item_id=first)
        assert (await until(conn, "conversation.item.retrieved", 10)).item.id == first
        second = await say(conn, "What was my name again?")
        assert (await until(conn, "response.done")).response.status == "completed"
        await conn.conversation.item.retrieve(item_id=second)
        assert (await until(conn, "conversation.item.retrieved", 10)).item.id == second
        assert cluster.busy() == 1 and cluster.worker_sessions() == 1
    await waiter.until("session.created", timeout=10)  # the deliberate close freed the slot for the next
    await waiter.close()
    meta = await wait_meta(cluster.stack, session_id)
    assert meta["status"] == "finished"
    recorded = (cluster.stack.sessions_dir / session_id / "recording.json").read_text()
    assert "lighthouse keeper" in recorded and "my name again" in recorded


def admin(cluster: Cluster, gateway: str, method: str, path: str) -> httpx.Response:
    return httpx.request(method, f"http://127.0.0.1:{cluster.ports[gateway]}{path}", timeout=5,
                         headers={"Authorization": f"Bearer {cluster.stack.admin_token}"})


async def until_true(check, timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def test_admin_actions_on_any_gateway(cluster):
    """Drain on C holds clients queued on A; B's operator cancels that entry, enables the worker,
    and C's ends a session running on A; each gateway's /metrics names itself."""
    def health_of(gateway: str) -> str:
        return cluster.health(gateway).json()["workers"][0]["health"]

    assert admin(cluster, "c", "POST", "/api/admin/workers/w0/disable").json()["health"] == "disabled"
    await until_true(lambda: health_of("a") == "disabled", what="drain not seen on gateway a")
    waiting = await Waiter.connect(cluster, "a")
    ticket = (await waiting.until("queue.position"))["ticket"]
    await until_true(lambda: admin(cluster, "b", "GET", "/api/admin/queue").json()["queue"], what="queue not listed")
    assert admin(cluster, "b", "DELETE", f"/api/admin/queue/{ticket}").status_code == 200
    assert (await waiting.until("error"))["error"]["code"] == "queue_cancelled"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await waiting.until("never", timeout=5)
    assert closed.value.rcvd.code == 4004

    assert admin(cluster, "b", "POST", "/api/admin/workers/w0/enable").status_code == 200
    await until_true(lambda: all(health_of(g) == "healthy" for g in cluster.ports), timeout=10,
                     what="enable not seen everywhere")
    running = await Waiter.connect(cluster, "a")
    session_id = (await running.until("session.created"))["session"]["id"]

    def listed() -> bool:
        live = admin(cluster, "c", "GET", "/api/admin/live").json()["sessions"]
        return any(s["session_id"] == session_id and s["gateway"] == "a" for s in live)

    await until_true(listed, what="gateway c does not list the session on gateway a")
    ended = admin(cluster, "c", "POST", f"/api/admin/sessions/{session_id}/end")
    assert ended.status_code == 200 and ended.json()["gateway"] == "a"
    assert (await running.until("error"))["error"]["code"] == "session_ended_by_operator"
    metrics = httpx.get(f"http://127.0.0.1:{cluster.ports['b']}/metrics", timeout=5).text
    assert 'omniduplex_gateway_info{gateway="b"' in metrics and "omniduplex_cluster_up 1.0" in metrics


async def test_redis_outage(cluster):
    """Redis stopped mid-load: the running session goes on, new ones get cluster_unavailable
    and close 1013, /health says why; Redis back (empty): the slot is counted and freed."""
    running = await Waiter.connect(cluster, "a")
    await running.until("session.created")
    queued = await Waiter.connect(cluster, "b")
    await queued.until("queue.position")
    cluster.redis.kill()
    error = await queued.until("error", timeout=10)  # the waiter is told, not left hanging
    assert error["error"]["code"] == "cluster_unavailable"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await queued.until("never", timeout=5)
    assert closed.value.rcvd.code == 1013
    late = await Waiter.connect(cluster, "c")
    assert (await late.until("error", timeout=10))["error"]["code"] == "cluster_unavailable"
    deadline = time.monotonic() + 10
    while cluster.health("b").status_code != 503:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)
    body = cluster.health("b").json()
    assert body["status"] == "unavailable" and "unreachable" in body["cluster"]["error"]
    await running.ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime",
                                                                            "instructions": "Be brief."}}))
    assert await running.until("session.updated", timeout=10)  # still relayed, Redis or not

    cluster.redis = start_redis(cluster.redis_dir, cluster.redis_port)  # back, empty
    for name in cluster.ports:
        cluster.wait_healthy(name, timeout=20)
    assert cluster.busy() == 1  # gateway a re-asserted its running session's lease
    await running.close()
    deadline = time.monotonic() + 10
    while cluster.busy():
        assert time.monotonic() < deadline, "the slot stayed leased after Redis came back"
        await asyncio.sleep(0.1)
    after = await Waiter.connect(cluster, "b")
    await after.until("session.created", timeout=15)
    await after.close()
    assert redis_ping(cluster.redis_port) == "+PONG"
