"""``/v1/realtime/calls`` in process: who may offer a call and what a refused offer leaves behind
(nothing: no call, no live session, no rate-limit slot), on a gateway with no workers and no room
in its queue (an offer that passes every check is then refused by the queue: 429 ``queue_full``).

Calls with a real peer and a real worker: ``tests/e2e/webrtc/test_calls.py``."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from core.config import AppConfig
from gateway.app import create_app
from tests.support.webrtc_client import OFFER

KEY = "sk-test-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
SDP = {"Content-Type": "application/sdp"}
CALLS = "/v1/realtime/calls"


def make_client(tmp_path, **sections) -> TestClient:
    config = AppConfig.model_validate({"data_dir": str(tmp_path), "workers": {"count": 0},
                                       "gateway": {"allowed_hosts": ["testserver"]},
                                       "admin": {"token": "a" * 24}, "queue": {"capacity": 0}, **sections})
    return TestClient(create_app(config))


def nothing_left(c: TestClient) -> None:
    state = c.app.state
    assert state.calls.calls == {} and state.live == {} and state.pool.queue_length == 0


def error(r, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["code"] == code and body["message"], body
    return body


def multipart(sdp: str = OFFER, session: dict | str | None = None) -> dict:
    files = {"sdp": (None, sdp.encode(), "application/sdp")}
    if session is not None:
        data = session if isinstance(session, str) else json.dumps(session)
        files["session"] = (None, data.encode(), "application/json")
    return files


def test_keys_on_a_keyed_service(tmp_path):
    # One open session per address: a refused call that kept its admission slot would make the
    # next one a 429 rate_limited instead of queue_full.
    with make_client(tmp_path, auth={"api_keys": [KEY], "per_ip": {"concurrent": 1}}) as c:
        error(c.post(CALLS, content=OFFER, headers=SDP), 401, "invalid_api_key")
        error(c.post(CALLS, content=OFFER, headers={**SDP, "Authorization": "Bearer wrong-key-123"}), 401,
              "invalid_api_key")
        unknown = error(c.post(CALLS, content=OFFER, headers={**SDP, "Authorization": "Bearer ek_" + "0" * 40}),
                        401, "invalid_api_key")
        assert "ephemeral" in unknown["message"]
        # The service's key passes; the full queue refuses it, as an HTTP answer.
        error(c.post(CALLS, content=OFFER, headers={**SDP, **AUTH}), 429, "queue_full")
        nothing_left(c)
        # A minted key passes too, once: a refused offer (here: by the queue) has spent it.
        minted = c.post("/v1/realtime/client_secrets", json={}, headers=AUTH).json()["value"]
        ek = {**SDP, "Authorization": f"Bearer {minted}"}
        error(c.post(CALLS, content="not sdp", headers=ek), 400, "invalid_offer")  # a bad offer does not
        error(c.post(CALLS, content=OFFER, headers=ek), 429, "queue_full")
        used = error(c.post(CALLS, content=OFFER, headers=ek), 401, "invalid_api_key")
        assert "already used" in used["message"]
        error(c.post(f"{CALLS}/rtc_0123/hangup", headers=AUTH), 404, "call_not_found")
        nothing_left(c)


def test_bodies(tmp_path):
    with make_client(tmp_path) as c:
        r = c.post(CALLS, content=OFFER, headers={"Content-Type": "text/plain"})
        assert r.status_code == 415, r.text
        error(c.post(CALLS, files={"session": (None, b"{}", "application/json")}), 400, "missing_required_parameter")
        bad = error(c.post(CALLS, files=multipart(session={"type": "realtime", "bogus": 1})), 400,
                    "unknown_parameter")
        assert bad["param"] == "session.bogus"
        error(c.post(CALLS, files=multipart(session="{not json")), 400, "invalid_json")
        error(c.post(CALLS, files=multipart(session=[1, 2])), 400, "invalid_type")
        # Nested past the parser's recursion: a 400 with the reason, not a 500 (found by the fuzz).
        deep = error(c.post(CALLS, files=multipart(session='{"a":' * 20_000 + "1" + "}" * 20_000)), 400,
                     "invalid_json")
        assert deep["param"] == "session" and "nested deeper" in deep["message"], deep
        # A lone surrogate in a string is not text: a 400 here, not a call that fails later (found by the fuzz:
        # the model name went into the worker's URL and the call died after its 201).
        lone = error(c.post(CALLS, files=multipart(session='{"type":"realtime","model":"\\ud800"}')), 400,
                     "invalid_json")
        assert lone["param"] == "session" and "surrogate" in lone["message"], lone
        error(c.post(CALLS, files=multipart(sdp="v=0\r\n")), 400, "invalid_offer")
        # A good multipart offer reaches the queue (and with no worker is refused there).
        error(c.post(CALLS, files=multipart(session={"type": "realtime", "instructions": "hi"})), 429, "queue_full")
        big = OFFER + "a=x:" + "y" * 400_000 + "\r\n"
        assert c.post(CALLS, content=big, headers=SDP).status_code == 413
        nothing_left(c)


@pytest.mark.parametrize("origin, status", [("https://elsewhere.example", 403), ("http://testserver", 429)])
def test_origin_of_a_browser_offer_on_a_keyed_service(tmp_path, origin, status):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        minted = c.post("/v1/realtime/client_secrets", json={}, headers=AUTH).json()["value"]
        r = c.post(CALLS, content=OFFER, headers={**SDP, "Authorization": f"Bearer {minted}", "Origin": origin})
        assert r.status_code == status, r.text  # 429: admitted, then no room in the queue
        nothing_left(c)


KEY2 = "sk-other-tenant-456789"
AUTH2 = {"Authorization": f"Bearer {KEY2}"}
ADMIN = {"Authorization": "Bearer " + "a" * 24}


def test_an_ephemeral_key_cannot_replace_the_session_it_was_minted_with(tmp_path):
    with make_client(tmp_path, auth={"api_keys": [KEY]}) as c:
        minted = c.post("/v1/realtime/client_secrets", headers=AUTH, json={
            "session": {"type": "realtime", "model": "omniduplex-cascade", "instructions": "Only about cats."}})
        ek = {"Authorization": f"Bearer {minted.json()['value']}"}
        override = {"type": "realtime", "model": "omniduplex-omni", "instructions": "Anything."}
        refused = error(c.post(CALLS, files=multipart(session=override), headers=ek), 400, "session_not_allowed")
        assert refused["param"] == "session" and "minted" in refused["message"]
        nothing_left(c)
        # The refusal spent nothing: the key still opens its call (refused here by the full queue).
        error(c.post(CALLS, content=OFFER, headers={**SDP, **ek}), 429, "queue_full")


def test_only_the_calls_own_key_hangs_it_up_or_joins_it(tmp_path):
    """Call ids show on the admin page, in logs and in ``Location``: another tenant's key that
    learns one finds no call (404, or ``call_not_found`` on a sideband), as with an unknown id."""
    with make_client(tmp_path, auth={"api_keys": [KEY, KEY2]}, queue={"capacity": 4}) as c:
        minted = c.post("/v1/realtime/client_secrets", json={}, headers=AUTH).json()["value"]
        for opener in (AUTH, {"Authorization": f"Bearer {minted}"}):  # the key itself, or its ephemeral key
            r = c.post(CALLS, content=OFFER, headers={**SDP, **opener})
            assert r.status_code == 201, r.text
            call_id = r.headers["location"].rsplit("/", 1)[1]
            error(c.post(f"{CALLS}/{call_id}/hangup", headers=AUTH2), 404, "call_not_found")
            with c.websocket_connect(f"/v1/realtime?call_id={call_id}", headers=AUTH2) as ws:
                assert ws.receive_json()["error"]["code"] == "call_not_found"
                assert ws.receive()["code"] == 1008
            assert call_id in c.app.state.calls.calls  # untouched
            assert c.post(f"{CALLS}/{call_id}/hangup", headers=AUTH).status_code == 200
            nothing_left(c)
        r = c.post(CALLS, content=OFFER, headers={**SDP, **AUTH})
        call_id = r.headers["location"].rsplit("/", 1)[1]
        assert c.post(f"{CALLS}/{call_id}/hangup", headers=ADMIN).status_code == 200  # the operator may
        nothing_left(c)


def rejected_sections(n: int, kind: str = "audio") -> str:
    """``OFFER`` with ``n`` more ``kind`` sections on port 0 ("rejected" in SDP terms). aiortc
    ignores the port: each would still get a transceiver, and once connected a decoder thread."""
    section = "\r\n".join([
        f"m={kind} 0 UDP/TLS/RTP/SAVPF 111", "c=IN IP4 0.0.0.0", "a=mid:{mid}", "a=recvonly", "a=rtcp-mux",
        "a=rtpmap:111 opus/48000/2" if kind == "audio" else "a=rtpmap:111 VP8/90000",
        "a=ice-ufrag:abcd", "a=ice-pwd:0123456789abcdefghijkl",
        "a=fingerprint:sha-256 " + ":".join(["AB"] * 32), "a=setup:actpass", ""])
    return OFFER + "".join(section.replace("{mid}", str(10 + i)) for i in range(n))


@pytest.mark.parametrize("route", [CALLS, "/v1/live/sessions"])
def test_every_m_line_counts_port_0_included(tmp_path, route):
    """Finding 3 (issue 68): 150 extra ``m=audio 0`` sections were answered 201 with 151 active
    sections. Each is refused before any peer connection or queue place exists."""
    with make_client(tmp_path) as c:
        for n, kind in ((150, "audio"), (1, "audio"), (2, "video")):
            offer = rejected_sections(n, kind)
            assert len(offer.encode()) < 64 * 1024  # under the offer's size limit: only the count refuses it
            if route == CALLS:
                r = c.post(CALLS, content=offer, headers=SDP)
            else:
                r = c.post(route, json={"session": {"model": "omniduplex-cascade"},
                                        "transport": {"type": "webrtc", "sdp": offer}})
            refused = error(r, 400, "invalid_offer")
            count = n + 1 if kind == "audio" else n
            assert f"{count} {kind} m-lines" in refused["message"], refused
            nothing_left(c)
