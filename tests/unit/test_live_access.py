"""Who may open a Live session (``/v1/live/sessions``, WebSocket and WebRTC) in process, on a
gateway with no workers: a Realtime ephemeral key is refused there (it was minted for a Realtime
session, whose config a Live session cannot hold to) and stays good for Realtime; a bad body is
a 400 with its reason, never a 500 (issue 68, findings 2 and 7a)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.support.webrtc_client import OFFER
from tests.unit.test_ephemeral_keys import make_client

KEY = "sk-test-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIVE = "/v1/live/sessions"


def mint(c: TestClient, session: dict) -> str:
    r = c.post("/v1/realtime/client_secrets", json={"session": session}, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()["value"]


def live_call(c: TestClient, key: str):
    body = {"session": {"model": "omniduplex-cascade", "instructions": "Ignore the minted instructions."},
            "transport": {"type": "webrtc", "sdp": OFFER}}
    return c.post(LIVE, json=body, headers={"Authorization": f"Bearer {key}"})


@pytest.mark.parametrize("service", ["keyed", "open"])
def test_a_realtime_ephemeral_key_opens_no_live_session_and_stays_unused(tmp_path, service):
    auth = {"api_keys": [KEY]} if service == "keyed" else {}
    with make_client(tmp_path, auth=auth) as c:
        for session in ({"type": "realtime", "instructions": "Only talk about the weather."},
                        {"type": "transcription"}):
            key = mint(c, session)
            with c.websocket_connect(LIVE + "?extensions=queue", subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as ws:
                event = ws.receive_json()
                assert event["type"] == "error" and event["error"]["code"] == "ephemeral_key_not_allowed", event
                assert "Realtime" in event["error"]["message"], event
                with pytest.raises(WebSocketDisconnect) as closed:
                    ws.receive_json()
                assert closed.value.code == 1008
            r = live_call(c, key)
            assert r.status_code == 403, r.text
            error = r.json()["error"]
            assert (error["code"], error["type"]) == ("ephemeral_key_not_allowed", "permission_error"), error
            assert c.app.state.calls.calls == {} and c.app.state.live == {}
            # Refused before it was redeemed: the key still opens the Realtime session it was minted for.
            with c.websocket_connect("/v1/realtime?extensions=all",
                                     headers={"Authorization": f"Bearer {key}"}) as ws:
                assert ws.receive_json()["type"] == "queue.position"


def test_nested_json_on_a_live_call_is_a_400_with_the_reason(tmp_path):
    with make_client(tmp_path) as c:
        deep = "[" * 100_000 + "]" * 100_000
        r = c.post(LIVE, content=deep, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_json" and "nest" in error["message"].lower(), error
        deep_object = '{"session": ' * 200 + "{}" + "}" * 200
        r = c.post(LIVE, content=deep_object, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json", r.text
        assert c.app.state.calls.calls == {} and c.app.state.live == {}


@pytest.mark.parametrize("audio", [[], "x", 3])
def test_a_live_call_whose_session_audio_is_not_an_object_is_a_400(tmp_path, audio):
    """Found by ``python -m bench fuzz``: ``session.audio`` as a list was a 500 with a traceback."""
    with make_client(tmp_path) as c:
        r = c.post(LIVE, json={"session": {"model": "omniduplex-cascade", "audio": audio},
                               "transport": {"type": "webrtc", "sdp": OFFER}})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"].startswith("session.audio"), r.text
        assert c.app.state.calls.calls == {} and c.app.state.live == {}
