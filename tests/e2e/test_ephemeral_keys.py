"""Ephemeral keys end to end (issue 33, part 1).

- A real gateway and worker, the official ``openai`` SDK: an app server mints a key with the
  service's key, a browser-like client (the key in the subprotocol) and the SDK (the key as its
  ``api_key``) open one session each, whose ``session.created`` already carries the minted
  instructions, turn detection, modalities and session id, in the GA and the beta dialect; a second use, a wrong key:
  401-shaped ``invalid_api_key`` and close 1008, and the slot is free again.
- Several gateways on one real ``redis-server``: a key minted on gateway A is redeemed once on
  gateway B, and a second try on A is refused; two gateways redeeming the same key at the same
  moment give it to one; Redis holds only the key's SHA-256, and forgets it after its lifetime.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time

import pytest
import websockets
from fastapi.testclient import TestClient
from openai import AsyncOpenAI

from core.config import AppConfig
from gateway.access import ephemeral_keys
from gateway.access.ephemeral_keys import (GRACE_S, MAX_TTL_S, MINTER_MAX_BYTES, Grant, KeyRefusal, KeyStoreFull,
                                           Redeemed, RedisKeys, key_hash)
from gateway.app import create_app
from tests.support.stack import Stack

KEY = "sk-test-0123456789"
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="Debian redis-server not installed")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("stack"), workers=1, auth={"api_keys": [KEY]}).start()
    yield s
    s.stop()


def sdk(stack, key: str = KEY) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=key, base_url=f"{stack.url}/v1", websocket_base_url=f"ws://127.0.0.1:{stack.port}/v1",
                       max_retries=0)


async def refusal(stack, key: str) -> tuple[dict, int]:
    """The error event and close code of ``/v1/realtime`` opened as a browser does, with ``key``."""
    async with websockets.connect(f"ws://127.0.0.1:{stack.port}/v1/realtime",
                                  subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        return event, ws.close_code


async def wait_idle(stack, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while (h := stack.health())["slots_busy"] or h["queue_length"]:
        assert time.monotonic() < deadline, f"a slot or queue entry was left behind: {h}"
        await asyncio.sleep(0.05)


async def test_a_browser_opens_one_session_with_a_minted_key(stack):
    secret = await sdk(stack).realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 60},
        session={"type": "realtime", "instructions": "Answer like a pirate.", "max_output_tokens": 200,
                 "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}})
    async with websockets.connect(f"ws://127.0.0.1:{stack.port}/v1/realtime",
                                  subprotocols=["realtime", f"openai-insecure-api-key.{secret.value}"]) as ws:
        assert ws.subprotocol == "realtime"
        created = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert created["type"] == "session.created", created
        session = created["session"]
        # (the cascade has one voice: what it does with a minted voice is the unit tests' double's)
        assert session["instructions"] == "Answer like a pirate." and session["max_output_tokens"] == 200
        assert session["audio"]["input"]["turn_detection"]["eagerness"] == "high"
        assert session["id"] == secret.session.id
        # The client's own update still works, as with OpenAI.
        await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "instructions": "Hi."}}))
        updated = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert updated["type"] == "session.updated" and updated["session"]["instructions"] == "Hi."
    event, code = await refusal(stack, secret.value)
    assert code == 1008 and event["error"]["code"] == "invalid_api_key" and "already used" in event["error"]["message"]
    event, code = await refusal(stack, "ek_" + "f" * 48)
    assert code == 1008 and event["error"]["code"] == "invalid_api_key"
    await wait_idle(stack)


async def test_the_sdk_connects_with_a_minted_key_in_both_dialects(stack):
    app_server = sdk(stack)
    secret = await app_server.realtime.client_secrets.create(
        session={"type": "realtime", "instructions": "Be brief.", "output_modalities": ["text"]})
    async with sdk(stack, secret.value).realtime.connect(model="omniduplex-cascade") as conn:
        created = await asyncio.wait_for(conn.recv(), 30)
        assert created.type == "session.created"
        assert created.session.instructions == "Be brief." and created.session.output_modalities == ["text"]
    beta = await app_server.beta.realtime.sessions.create(instructions="Be kind.", turn_detection=None,
                                                          modalities=["text"])
    async with sdk(stack, beta.client_secret.value).beta.realtime.connect(model="omniduplex-cascade") as conn:
        created = await asyncio.wait_for(conn.recv(), 30)
        assert created.type == "session.created"
        assert created.session.instructions == "Be kind." and created.session.modalities == ["text"]
        assert created.session.turn_detection is None and created.session.id == beta.id
    await wait_idle(stack)


# --------------------------------------------------------------------------- several gateways, one Redis


def gateway(tmp_path, redis_url: str, name: str) -> TestClient:
    config = AppConfig.model_validate({
        "data_dir": str(tmp_path / name), "workers": {"count": 0}, "admin": {"token": "a" * 24},
        "gateway": {"allowed_hosts": ["testserver"]}, "auth": {"api_keys": [KEY]},
        "cluster": {"redis_url": redis_url, "gateway_id": name, "prefix": f"ek{tmp_path.name[-20:]}"}})
    return TestClient(create_app(config))


def first_event(c: TestClient, key: str) -> dict:
    with c.websocket_connect("/v1/realtime?extensions=all", headers={"Authorization": f"Bearer {key}"}) as ws:
        return ws.receive_json()


@needs_redis
def test_a_key_minted_on_one_gateway_is_redeemed_once_on_another(tmp_path, redis_url):
    with gateway(tmp_path, redis_url, "a") as a, gateway(tmp_path, redis_url, "b") as b:
        minted = a.post("/v1/realtime/client_secrets", json={"session": {"type": "realtime", "instructions": "x"}},
                        headers={"Authorization": f"Bearer {KEY}"}).json()
        on_b = first_event(b, minted["value"])
        assert on_b["type"] == "queue.position", on_b  # admitted on B (no worker here: it waits)
        again = first_event(a, minted["value"])
        assert again["error"]["code"] == "invalid_api_key" and "already used" in again["error"]["message"]
        unknown = first_event(b, "ek_" + "0" * 48)
        assert "invalid ephemeral key" in unknown["error"]["message"]
        assert isinstance(a.app.state.ephemeral_keys, RedisKeys)


@needs_redis
async def test_redis_redeems_atomically_keeps_hashes_and_expires(tmp_path, redis_url):
    import redis.asyncio as aioredis

    clients = [aioredis.from_url(redis_url) for _ in range(2)]
    prefix = f"ekt{tmp_path.name[-20:]}"
    now = [time.time()]
    a, b = (RedisKeys(c, prefix, clock=lambda: now[0]) for c in clients)
    try:
        for _ in range(20):  # two gateways at the same moment: one gets it
            minted = await a.mint(Grant(session={"type": "realtime"}), 60, "ip:a")
            results = await asyncio.gather(a.redeem(minted.value), b.redeem(minted.value))
            assert sorted(type(r).__name__ for r in results) == ["KeyRefusal", "Redeemed"]
            assert KeyRefusal("used") in results
        minted = await a.mint(Grant(session={"type": "realtime", "instructions": "secret"}, model="m"), 10, "ip:a")
        stored = await clients[0].keys(f"{prefix}:ek:*")
        assert f"{prefix}:ek:{key_hash(minted.value)}".encode() in stored
        assert not any(minted.value.encode() in k for k in stored)
        assert 10 < await clients[0].ttl(f"{prefix}:ek:{key_hash(minted.value)}") <= 10 + GRACE_S  # Redis forgets it
        now[0] += 10
        assert await b.redeem(minted.value) == KeyRefusal("expired")
        assert await a.redeem(minted.value) == KeyRefusal("expired")
        fresh = await a.mint(Grant(session={"type": "realtime"}, model="m"), 10, "ip:a")
        redeemed = await b.redeem(fresh.value)
        assert isinstance(redeemed, Redeemed) and redeemed.grant.model == "m"
    finally:
        for c in clients:
            await c.aclose()


@needs_redis
async def test_redis_keeps_a_quota_per_minter_and_a_cap_across_the_cluster(tmp_path, redis_url, monkeypatch):
    """Issue 45: the Redis store had no cap at all. One minter's large two-hour keys fill only its
    own quota (on every gateway); a key used or expired gives its share back, once."""
    import redis.asyncio as aioredis

    clients = [aioredis.from_url(redis_url) for _ in range(2)]
    prefix = f"ekq{tmp_path.name[-20:]}"
    now = [time.time()]
    a, b = (RedisKeys(c, prefix, clock=lambda: now[0]) for c in clients)
    big = Grant(session={"type": "realtime", "instructions": "x" * 200_000})
    try:
        minted = []
        with pytest.raises(KeyStoreFull) as full:
            for i in range(400):  # 400 x 200 kB: more than the cluster's 64 MB; through both gateways
                minted.append(await (a, b)[i % 2].mint(big, MAX_TTL_S, "ip:203.0.113.7"))
        assert "this address has" in str(full.value) and full.value.retry_after_s == MAX_TTL_S
        assert 0 < len(minted) * 200_000 <= MINTER_MAX_BYTES
        await b.mint(big, MAX_TTL_S, "key:tenant-b")  # another minter still mints
        for _ in range(2):  # redeemed (and refused again): given back once
            await b.redeem(minted[0].value)
        await a.mint(big, MAX_TTL_S, "ip:203.0.113.7")
        with pytest.raises(KeyStoreFull):
            await a.mint(big, MAX_TTL_S, "ip:203.0.113.7")
        assert await a.redeem(minted[0].value) == KeyRefusal("used")  # the tombstone stays

        monkeypatch.setattr(ephemeral_keys, "MAX_KEYS", len(minted) + 2)  # the cluster's cap
        await a.mint(Grant(session={}), 10, "ip:198.51.100.1")
        with pytest.raises(KeyStoreFull, match="on this cluster") as full:
            await b.mint(Grant(session={}), 10, "ip:198.51.100.2")
        assert full.value.retry_after_s == 10
        now[0] += 10  # the 10 s key expired: its place is free
        await b.mint(Grant(session={}), 10, "ip:198.51.100.2")
    finally:
        for c in clients:
            await c.aclose()
