"""Ephemeral keys in process (issue 33, part 1): minting (``/v1/realtime/client_secrets``, beta
``/v1/realtime/sessions``) with and without the service's key, lifetimes, the session config checked
at mint time, answers that validate against the ``openai`` package's types and the real ``openai``
client; redeeming on ``/v1/realtime`` once, within the lifetime (the clock is moved, not waited
for); and a session that starts with the minted config (the proxy against a worker double).
Several gateways on one Redis: ``tests/e2e/test_ephemeral_keys.py``."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient
from openai import OpenAI
from openai.types.beta.realtime.session_create_response import SessionCreateResponse
from openai.types.realtime.client_secret_create_response import ClientSecretCreateResponse
from pydantic import ValidationError
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.server import serve

from core.config import AppConfig
from gateway.access.ephemeral_keys import (GRACE_S, MAX_KEYS, MAX_TTL_S, MINTER_MAX_BYTES, MINTER_MAX_KEYS, Grant,
                                           KeyRefusal, KeyStoreFull, MemoryKeys, Redeemed, key_hash, minter_of)
from gateway.app import create_app
from gateway.realtime.proxy import RealtimeProxy
from gateway.realtime.request import SessionRequest, granted
from tests.unit.test_transport_seam import MemoryChannelDouble, one_worker_pool

ADMIN = "a" * 24
KEY = "sk-test-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
WS = "/v1/realtime?extensions=all"


def make_client(tmp_path, **sections) -> TestClient:
    config = AppConfig.model_validate({"data_dir": str(tmp_path), "workers": {"count": 0},
                                       "gateway": {"allowed_hosts": ["testserver"]},
                                       "admin": {"token": ADMIN}, **sections})
    return TestClient(create_app(config))


def mint(c: TestClient, body: dict | None = None, headers: dict | None = AUTH, beta: bool = False):
    path = "/v1/realtime/sessions" if beta else "/v1/realtime/client_secrets"
    return c.post(path, json=body if body is not None else {}, headers=headers or {})


def first_event(c: TestClient, key: str, how: str = "bearer", origin: str | None = None) -> tuple[dict, int | None]:
    """The first event of ``/v1/realtime`` opened with ``key`` and, if refused, the close code."""
    headers = {"Origin": origin} if origin else {}
    protocols = None
    if how == "bearer":
        headers["Authorization"] = f"Bearer {key}"
    else:  # what a browser sends
        protocols = ["realtime", f"openai-insecure-api-key.{key}"]
    with c.websocket_connect(WS, headers=headers, subprotocols=protocols) as ws:
        event = ws.receive_json()
        if event["type"] != "error":
            return event, None
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        return event, closed.value.code


# --------------------------------------------------------------------------- minting


def test_minting_needs_the_service_key_when_keys_are_configured(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        for headers in (None, {"Authorization": "Bearer wrong-key-123"}):
            r = mint(c, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", r.text
            assert mint(c, headers=headers, beta=True).status_code == 401
        minted = mint(c).json()
        assert minted["value"].startswith("ek_") and len(minted["value"]) > 40
        assert mint(c, headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200  # the admin token too
        # An ephemeral key cannot mint another.
        assert mint(c, headers={"Authorization": f"Bearer {minted['value']}"}).status_code == 401


def test_an_open_service_mints_for_anyone_rate_limited_per_address(tmp_path):
    with make_client(tmp_path, auth={"per_ip": {"sessions_per_minute": 2}}) as c:
        assert mint(c, headers=None).status_code == 200
        assert mint(c, headers=None, beta=True).status_code == 200
        r = mint(c, headers=None)
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert "ephemeral keys" in r.json()["error"]["message"] and int(r.headers["retry-after"]) > 0


def test_lifetime_default_and_bounds(tmp_path):
    with make_client(tmp_path) as c:
        keys: MemoryKeys = c.app.state.ephemeral_keys
        now = int(keys.clock())
        assert now + 599 <= mint(c).json()["expires_at"] <= now + 601  # 600 s by default
        for seconds in (10, 7200):
            body = {"expires_after": {"anchor": "created_at", "seconds": seconds}}
            assert mint(c, body).json()["expires_at"] - now in (seconds, seconds + 1)
        cases = [({"expires_after": {"seconds": 9}}, "expires_after.seconds", "integer_below_min_value"),
                 ({"expires_after": {"seconds": 7201}}, "expires_after.seconds", "integer_above_max_value"),
                 ({"expires_after": {"seconds": "60"}}, "expires_after.seconds", "invalid_value"),
                 ({"expires_after": {"anchor": "now", "seconds": 60}}, "expires_after.anchor", "invalid_value"),
                 ({"expires_in": 60}, "expires_in", "unknown_parameter")]
        for body, param, code in cases:
            error = mint(c, body).json()["error"]
            assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error"), error
        error = mint(c, {"client_secret": {"expires_after": {"anchor": "created_at", "seconds": 9000}}},
                     beta=True).json()["error"]
        assert error["param"] == "client_secret.expires_after.seconds" and "7200" in error["message"]
        beta = mint(c, {"client_secret": {"expires_after": {"anchor": "created_at", "seconds": 30}}}, beta=True)
        assert beta.json()["client_secret"]["expires_at"] - now in (30, 31)


def test_mint_answers_validate_against_the_openai_types(tmp_path):
    with make_client(tmp_path) as c:
        ga = mint(c, {"session": {"type": "realtime", "model": "omniduplex-cascade", "instructions": "Be brief.",
                                  "audio": {"output": {"voice": "alloy"}, "input": {"turn_detection": None}},
                                  "tools": [{"type": "function", "name": "clock", "parameters": {"type": "object"}}],
                                  "tool_choice": "auto"}}).json()
        parsed = ClientSecretCreateResponse.model_validate(ga)
        assert parsed.session.type == "realtime" and parsed.session.instructions == "Be brief."
        assert parsed.session.audio.output.voice == "alloy" and parsed.session.id.startswith("sess_")
        assert parsed.session.audio.input.format.type == "audio/pcm"  # the default the session starts with
        transcription = mint(c, {"session": {"type": "transcription"}}).json()
        assert ClientSecretCreateResponse.model_validate(transcription).session.type == "transcription"
        beta = mint(c, {"instructions": "Be brief.", "voice": "alloy", "modalities": ["text"]}, beta=True).json()
        parsed_beta = SessionCreateResponse.model_validate(beta)
        assert parsed_beta.client_secret.value.startswith("ek_") and parsed_beta.instructions == "Be brief."
        assert beta["object"] == "realtime.session" and beta["model"] == "omniduplex-cascade"


@pytest.mark.parametrize("session, param, code", [
    ({"type": "realtime", "instructions": 3}, "session.instructions", "invalid_type"),
    ({"type": "realtime", "voice": "alloy"}, "session.voice", "unknown_parameter"),  # GA: audio.output.voice
    ({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}}},
     "session.audio.input.format.rate", "invalid_value"),
    ({"type": "realtime", "audio": {"output": {"speed": 3}}}, "session.audio.output.speed", "invalid_value"),
    ({"type": "realtime", "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": True}]},
     "session.tools[0].strict", "unknown_parameter"),
    ({"type": "realtime", "tools": [{"type": "mcp", "server_label": "x"}]}, "session.tools[0].server_url",
     "missing_required_parameter"),
    ({"type": "realtime", "tools": [{"type": "mcp", "server_label": "x", "connector_id": "connector_gmail"}]},
     "session.tools[0].connector_id", "unsupported_value"),
    ({"type": "realtime", "max_output_tokens": 5000}, "session.max_output_tokens", "invalid_value"),
    ({"instructions": "no type"}, "session.type", "missing_required_parameter"),
    ({"type": "conversation"}, "session.type", "invalid_value"),
])
def test_the_session_config_is_checked_at_mint_time(tmp_path, session, param, code):
    with make_client(tmp_path) as c:
        r = mint(c, {"session": session})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["param"], error["code"]) == (param, code) and param in error["message"], error


def test_an_mcp_tool_is_minted_and_its_secrets_are_not_echoed(tmp_path):
    tool = {"type": "mcp", "server_label": "shop", "server_url": "https://tools.example.com/mcp",
            "require_approval": "never", "headers": {"X-Api-Key": "very-secret-1"}, "authorization": "very-secret-2"}
    with make_client(tmp_path) as c:
        r = mint(c, {"session": {"type": "realtime", "tools": [tool]}})
        assert r.status_code == 200, r.text
        assert r.json()["session"]["tools"] == [{k: v for k, v in tool.items() if k not in ("headers", "authorization")}]
        assert "very-secret" not in r.text
        beta = mint(c, {"tools": [tool]}, beta=True)
        assert beta.status_code == 400 and beta.json()["error"]["param"] == "tools[0].type", beta.text


def test_our_extensions_and_the_beta_shape_pass_the_check(tmp_path):
    with make_client(tmp_path) as c:
        ours = {"type": "realtime", "temperature": 0.5, "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": {"type": "model_duplex"}}}}
        assert mint(c, {"session": ours}).status_code == 200
        r = mint(c, {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}, "input_audio_format": "g711_ulaw",
                     "tool_choice": "auto", "max_response_output_tokens": "inf"}, beta=True)
        assert r.status_code == 200, r.text
        error = mint(c, {"turn_detection": {"type": "server_vad", "bogus": 1}}, beta=True).json()["error"]
        assert error["param"] == "turn_detection.bogus" and error["code"] == "unknown_parameter"
        assert mint(c, {"session": "realtime"}).status_code == 400
        r = c.post("/v1/realtime/client_secrets", content=b"[1, 2]", headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_the_openai_python_client_mints_through_the_gateway(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        client = OpenAI(api_key=KEY, base_url="http://testserver/v1", http_client=c, max_retries=0)
        secret = client.realtime.client_secrets.create(
            expires_after={"anchor": "created_at", "seconds": 120},
            session={"type": "realtime", "instructions": "Speak like a pirate.",
                     "audio": {"output": {"voice": "marin"}}})
        assert secret.value.startswith("ek_") and secret.session.instructions == "Speak like a pirate."
        beta = client.beta.realtime.sessions.create(instructions="Be brief.", voice="verse")
        assert beta.client_secret.value.startswith("ek_") and beta.voice == "verse"
        with pytest.raises(Exception) as refused:
            OpenAI(api_key="wrong-key-123", base_url="http://testserver/v1", http_client=c,
                   max_retries=0).realtime.client_secrets.create()
        assert getattr(refused.value, "status_code", None) == 401


def test_api_keys_may_not_look_like_ephemeral_keys(tmp_path):
    with pytest.raises(ValidationError) as err:
        AppConfig.model_validate({"auth": {"api_keys": ["ek_0123456789abcdef"]}})
    assert "auth.api_keys" in str(err.value) or "api_keys" in str(err.value)
    assert "ek_" in str(err.value)


# --------------------------------------------------------------------------- redeeming


def test_a_key_opens_one_websocket_session(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        for how in ("bearer", "subprotocol"):
            key = mint(c).json()["value"]
            event, code = first_event(c, key, how)
            assert code is None and event["type"] == "queue.position", event  # admitted (no worker: it waits)
            event, code = first_event(c, key, how)
            assert code == 1008 and event["error"]["code"] == "invalid_api_key", event
            assert "already used" in event["error"]["message"]
        event, code = first_event(c, "ek_" + "0" * 48)
        assert code == 1008 and event["error"]["code"] == "invalid_api_key"
        assert "invalid ephemeral key" in event["error"]["message"]
        metrics = c.get("/metrics").text
        assert 'omniduplex_rejected_sessions_total{reason="invalid_api_key"} 3.0' in metrics


def test_an_expired_key_is_refused(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        keys: MemoryKeys = c.app.state.ephemeral_keys
        start = float(int(keys.clock()))
        keys.clock = lambda: start
        key = mint(c, {"expires_after": {"anchor": "created_at", "seconds": 10}}).json()["value"]
        keys.clock = lambda: start + 10.5
        event, code = first_event(c, key)
        assert code == 1008 and "expired" in event["error"]["message"]
        event, _ = first_event(c, key)
        assert "expired" in event["error"]["message"]  # still expired, not "used"
        keys.clock = lambda: start + 9  # (a key is only good before its expiry)
        fresh = mint(c, {"expires_after": {"anchor": "created_at", "seconds": 10}}).json()["value"]
        keys.clock = lambda: start + 18.9
        assert first_event(c, fresh)[1] is None


def test_a_refused_connection_leaves_the_key_unused(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        key = mint(c).json()["value"]
        admin = {"Authorization": f"Bearer {ADMIN}"}
        assert c.put("/api/admin/apps/api", json={"enabled": False}, headers=admin).status_code == 200
        assert first_event(c, key)[0]["error"]["code"] == "app_disabled"
        assert c.put("/api/admin/apps/api", json={"enabled": True}, headers=admin).status_code == 200
        assert first_event(c, key, origin="https://evil.example")[0]["error"]["code"] == "origin_not_allowed"
        assert first_event(c, key)[1] is None  # still good


def test_ephemeral_key_origins_follow_the_cors_rule(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY], "allowed_origins": ["https://app.example"]}) as c:
        assert first_event(c, mint(c).json()["value"], "subprotocol", origin="https://app.example")[1] is None
        event, code = first_event(c, mint(c).json()["value"], "subprotocol", origin="https://other.example")
        assert code == 1008 and event["error"]["code"] == "origin_not_allowed"
    with make_client(tmp_path / "open") as c:  # an open service: the same rule (issue 68)
        event, code = first_event(c, mint(c).json()["value"], "subprotocol", origin="https://other.example")
        assert code == 1008 and event["error"]["code"] == "origin_not_allowed"
        assert first_event(c, mint(c).json()["value"], "subprotocol", origin="http://testserver")[1] is None
        with c.websocket_connect(WS, headers={"Origin": "https://other.example"}) as ws:
            assert ws.receive_json()["error"]["code"] == "origin_not_allowed"
    with make_client(tmp_path / "open-listed", auth={"allowed_origins": ["https://app.example"]}) as c:
        assert first_event(c, mint(c).json()["value"], "subprotocol", origin="https://app.example")[1] is None


def test_a_full_store_and_an_unreachable_redis_are_clear_refusals(tmp_path, monkeypatch):
    from gateway.access import ephemeral_keys
    from gateway.pool.redis_queue import ClusterUnavailable

    with make_client(tmp_path) as c:
        monkeypatch.setattr(ephemeral_keys, "MAX_KEYS", 2)
        key = mint(c).json()["value"]
        assert mint(c).status_code == 200
        r = mint(c)
        assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_keys"

        async def unreachable(value):
            raise ClusterUnavailable("the shared queue's Redis is unreachable (refused)")

        keys = c.app.state.ephemeral_keys
        monkeypatch.setattr(keys, "redeem", unreachable)
        event, code = first_event(c, key)
        assert code == 1013 and event["error"]["code"] == "cluster_unavailable"
        monkeypatch.undo()
        assert first_event(c, key)[1] is None  # it stayed unused


def test_one_api_key_cannot_lock_the_others_out_of_minting(tmp_path):
    """Issue 45: ~256 large two-hour keys from one client filled the gateway's 64 MB and every other
    client got 429 for two hours. Each minter now has a quota; using one of its keys gives it back."""
    other = {"Authorization": "Bearer sk-test-other-tenant"}
    big = {"expires_after": {"anchor": "created_at", "seconds": 7200},
           "session": {"type": "realtime", "instructions": "x" * 250_000}}
    with make_client(tmp_path, auth={"api_keys": [KEY, "sk-test-other-tenant"]}) as c:
        minted = []
        for _ in range(300):
            r = mint(c, big)
            if r.status_code != 200:
                break
            minted.append(r.json()["value"])
        error = r.json()["error"]
        assert r.status_code == 429 and error["code"] == "too_many_keys", r.text
        assert "this API key has" in error["message"] and "limit" in error["message"], error
        assert 0 < int(r.headers["retry-after"]) <= 7200
        assert mint(c, big, headers=other).status_code == 200  # another tenant still mints
        assert first_event(c, minted[0])[1] is None  # used: its quota is given back
        assert mint(c, big).status_code == 200


async def test_the_memory_store_gives_each_minter_a_quota():
    now = [1000.0]
    keys = MemoryKeys(clock=lambda: now[0])
    big = Grant(session={"type": "realtime", "instructions": "x" * 200_000})
    minted = []
    with pytest.raises(KeyStoreFull) as full:
        for _ in range(400):  # 400 x 200 kB: more than the whole store's 64 MB
            minted.append(await keys.mint(big, MAX_TTL_S, "ip:203.0.113.7"))
    assert "this address has" in str(full.value) and full.value.retry_after_s == MAX_TTL_S
    assert 0 < len(minted) * 200_000 <= MINTER_MAX_BYTES
    small = Grant(session={"type": "realtime"})
    for _ in range(MINTER_MAX_KEYS):  # the keys' count has its quota too
        await keys.mint(small, 60, "key:tenant-b")
    with pytest.raises(KeyStoreFull, match="this API key has 1250 unused"):
        await keys.mint(small, 60, "key:tenant-b")
    await keys.mint(big, MAX_TTL_S, "ip:198.51.100.1")  # others still mint
    assert isinstance(await keys.redeem(minted[0].value), Redeemed)  # used: the quota is given back
    await keys.redeem(minted[0].value)  # (once)
    await keys.mint(big, MAX_TTL_S, "ip:203.0.113.7")
    with pytest.raises(KeyStoreFull):
        await keys.mint(big, MAX_TTL_S, "ip:203.0.113.7")
    now[0] += 60  # expired: given back too
    await keys.mint(small, 60, "key:tenant-b")


async def test_a_few_addresses_cannot_fill_the_store():
    """Issue 68, finding 7d: on an open service (where each address is a minter) 16 addresses at
    their quota filled the 20,000-key store. An address now holds a small share (an IPv6 host's
    whole /64 is one address), so a few of them leave the store nearly empty."""
    keys = MemoryKeys(clock=lambda: 1000.0)
    small = Grant(session={"type": "realtime"})
    for i in range(16):
        with pytest.raises(KeyStoreFull, match="this address has") as full:
            for _ in range(MAX_KEYS):
                await keys.mint(small, 600, minter_of(None, f"203.0.113.{i}"))
        assert full.value.retry_after_s == 600
    assert len(keys) <= MAX_KEYS // 8, len(keys)
    await keys.mint(small, 600, minter_of(None, "198.51.100.1"))  # another address still mints
    for _ in range(MINTER_MAX_KEYS):  # an API key (an app server minting for its pages) keeps its larger share
        await keys.mint(small, 600, minter_of("tenant", "203.0.113.1"))
    # The addresses of one IPv6 host (its /64) are one minter; an IPv4-mapped one is its IPv4 address.
    assert minter_of(None, "2001:db8:0:1::1") == minter_of(None, "2001:db8:0:1:ffff::2")
    assert minter_of(None, "2001:db8:0:2::1") != minter_of(None, "2001:db8:0:1::1")
    assert minter_of(None, "::ffff:203.0.113.9") == minter_of(None, "203.0.113.9")


def test_an_open_service_mints_an_address_a_bounded_share(tmp_path):
    with make_client(tmp_path) as c:
        for _ in range(200):
            r = mint(c, headers=None)
            if r.status_code != 200:
                break
        error = r.json()["error"]
        assert r.status_code == 429 and error["code"] == "too_many_keys", r.text
        assert "this address has" in error["message"] and int(r.headers["retry-after"]) > 0
        assert len(c.app.state.ephemeral_keys) <= MAX_KEYS // 100


async def test_the_memory_store_keeps_hashes_and_forgets_old_keys():
    now = [1000.0]
    keys = MemoryKeys(clock=lambda: now[0])
    minted = await keys.mint(Grant(session={"type": "realtime", "instructions": "x"}), 60, "ip:a")
    assert minted.expires_at == 1060 and minted.value not in repr(keys._entries)
    assert list(keys._entries) == [key_hash(minted.value)]
    redeemed = await keys.redeem(minted.value)
    assert isinstance(redeemed, Redeemed) and redeemed.grant.session["instructions"] == "x"
    assert await keys.redeem(minted.value) == KeyRefusal("used")
    assert await keys.redeem("ek_nope") == KeyRefusal("invalid")
    now[0] += 60 + GRACE_S + 11
    await keys.mint(Grant(session={}), 60, "ip:a")  # minting prunes what is past its grace
    assert len(keys) == 1 and await keys.redeem(minted.value) == KeyRefusal("invalid")


# --------------------------------------------------------------------------- the session starts with the config


@pytest.fixture
async def config_worker():
    """A worker double that answers session.update as the worker does (``worker/session.py``),
    or with an ``error`` when the update carries ``tools``."""
    seen: list[dict] = []

    async def handler(conn) -> None:
        session = {"object": "realtime.session", "id": "sess_default", "instructions": "default", "voice": "joe"}
        await conn.send(json.dumps({"type": "session.created", "event_id": "e0", "session": session}))
        async for message in conn:
            event = json.loads(message)
            seen.append(event)
            if event["type"] == "session.update" and "tools" in event["session"]:
                await conn.send(json.dumps({"type": "error", "error": {"code": "invalid_value", "param": "tools"}}))
            elif event["type"] == "session.update":
                session = {**session, **event["session"]}
                await conn.send(json.dumps({"type": "session.updated", "event_id": "e1", "session": session}))
            else:
                await conn.send(json.dumps({"type": "echo", "of": event["type"]}))

    async with serve(handler, "127.0.0.1", 0) as server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", seen


async def test_the_session_starts_with_the_minted_config(config_worker):
    url, seen = config_worker
    pool = one_worker_pool(url)
    grant = Grant(session={"type": "realtime", "instructions": "Be brief."}, session_id="sess_minted",
                  model="omniduplex-omni")
    request = granted(SessionRequest(), grant)
    assert (request.model, request.session_id, request.beta) == ("omniduplex-omni", "sess_minted", False)
    client = MemoryChannelDouble()
    await client.inbox.put(json.dumps({"type": "response.create"}))  # sent before the worker was assigned
    proxy = RealtimeProxy(client, request, pool, AppConfig.model_validate({"recording": {"enabled": False}}))
    running = asyncio.create_task(proxy.run())
    created = await client.next_event()
    assert created["type"] == "session.created" and created["session"]["instructions"] == "Be brief."
    assert created["session"]["voice"] == "joe"  # what the worker decides stays
    assert await client.next_event() == {"type": "echo", "of": "response.create"}  # no session.updated before it
    assert [e["type"] for e in seen] == ["session.update", "response.create"]  # the config first
    assert proxy.session_id == "sess_minted"
    await client.inbox.put(None)
    await asyncio.wait_for(running, 5)
    assert pool.snapshot(with_queue=False)["busy"] == 0


async def test_a_config_the_worker_refuses_is_reported_and_the_session_goes_on(config_worker):
    url, _ = config_worker
    pool = one_worker_pool(url)
    grant = Grant(session={"type": "realtime", "tools": [{"type": "function", "name": "f"}]}, beta=True)
    client = MemoryChannelDouble()
    proxy = RealtimeProxy(client, granted(SessionRequest(), grant), pool, AppConfig())
    running = asyncio.create_task(proxy.run())
    assert (await client.next_event())["session"]["instructions"] == "default"
    assert (await client.next_event())["type"] == "error"
    await client.inbox.put(json.dumps({"type": "input_audio_buffer.clear"}))
    assert await client.next_event() == {"type": "echo", "of": "input_audio_buffer.clear"}
    await client.inbox.put(None)
    await asyncio.wait_for(running, 5)
    assert pool.snapshot(with_queue=False)["busy"] == 0


def test_sessions_opened_with_ephemeral_keys_count_against_the_minting_key(tmp_path):
    """``auth.per_key.concurrent`` holds however the key's sessions are opened: a tenant limited to
    two cannot mint its way to more; the refused ephemeral key stays unused."""
    with make_client(tmp_path, auth={"api_keys": [KEY], "per_key": {"concurrent": 2}}) as c:
        ek1, ek2 = (mint(c).json()["value"] for _ in range(2))
        with c.websocket_connect(WS, headers=AUTH) as direct:
            assert direct.receive_json()["type"] == "queue.position"
            with c.websocket_connect(WS, headers={"Authorization": f"Bearer {ek1}"}) as first:
                assert first.receive_json()["type"] == "queue.position"
                refused, code = first_event(c, ek2)
                assert (refused["error"]["code"], code) == ("too_many_sessions", 4029)
                assert "API key" in refused["error"]["message"]
        event, code = first_event(c, ek2)  # the others closed: the same key now opens its session
        assert event["type"] == "queue.position" and code is None
