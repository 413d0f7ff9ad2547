"""The recorder's turn-taking events from synthetic server/client event sequences: one ``barge_in``
per interruption with who cut the reply, every truncation, backchannels and resumed replies; the
recording validates against the published schema and the replay cuts where the item was cut."""

from __future__ import annotations

import base64
import json

import jsonschema
import numpy as np
import pytest

from core.replay import RATE, render_tracks
from worker.recorder import RecorderPool
from tests.support.stack import ROOT

SCHEMA = json.loads((ROOT / "docs" / "recording.schema.json").read_text())
SID = "sess_" + "0" * 32


@pytest.fixture
def pool(tmp_path):
    p = RecorderPool(tmp_path)
    yield p
    p.shutdown()


def open_rec(pool):
    return pool.open(SID, {"app": "test"})


def finish(pool, rec) -> dict:
    rec.finish("client_closed", 1000).result(timeout=30)
    doc = json.loads((pool.root / SID / "recording.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    return doc


def of(rec_or_doc, kind: str) -> list[dict]:
    events = rec_or_doc["events"] if isinstance(rec_or_doc, dict) else rec_or_doc.events
    return [e for e in events if e["type"] == kind]


def later(rec, ms: float) -> None:
    """The recorder's clock moves on ``ms``."""
    rec.t0 -= ms / 1000


def audio(item: str, response: str, ms: int = 500) -> dict:
    pcm = np.full(RATE * ms // 1000, 6000, dtype="<i2").tobytes()  # constant: every sample counts as sound
    return {"type": "response.output_audio.delta", "response_id": response, "item_id": item,
            "delta": base64.b64encode(pcm).decode()}


def created(response: str) -> dict:
    return {"type": "response.created", "response": {"id": response, "status": "in_progress", "output": []}}


def done(response: str, item: str, status: str = "completed", reason: str | None = None) -> dict:
    r = {"id": response, "status": status, "output": [
        {"id": item, "type": "message", "role": "assistant", "content": [{"type": "output_audio", "transcript": "Once"}]}]}
    if reason:
        r["status_details"] = {"type": status, "reason": reason}
    return {"type": "response.done", "response": r}


def speech(kind: str = "started", item: str = "item_u1") -> dict:
    return {"type": f"input_audio_buffer.speech_{kind}", "item_id": item, "audio_start_ms": 5000}


def truncated(item: str, ms: int) -> dict:
    return {"type": "conversation.item.truncated", "event_id": "evt_1", "item_id": item, "content_index": 0,
            "audio_end_ms": ms}


def truncate(item: str, ms: int, event_id: str = "evt_client") -> dict:
    return {"type": "conversation.item.truncate", "event_id": event_id, "item_id": item, "content_index": 0,
            "audio_end_ms": ms}


def test_server_barge_in_while_generating_is_one_server_barge_in_at_the_speech(pool):
    """speech_started, the cancel (turn_detected), the server's own truncation: one barge_in."""
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(speech())
    rec.server_event(done("resp_1", "item_a", "cancelled", "turn_detected"))
    rec.server_event(truncated("item_a", 420))
    doc = finish(pool, rec)
    [barge] = of(doc, "barge_in")
    [started] = of(doc, "speech_started")
    assert barge["source"] == "server" and barge["item_id"] == "item_a"
    assert barge["t"] == started["t"]  # dated at the decision, not at the cancel
    [cut] = of(doc, "truncated")
    assert cut == {"t": cut["t"], "type": "truncated", "item_id": "item_a", "audio_end_ms": 420, "source": "server"}


def test_server_truncation_of_a_reply_done_generating_is_a_server_barge_in(pool):
    """The reply finished generating but is still heard: no cancel, only the server's truncation."""
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1", 1000))
    rec.server_event(done("resp_1", "item_a"))
    rec.server_event(speech())
    rec.server_event(truncated("item_a", 800))
    doc = finish(pool, rec)
    [barge] = of(doc, "barge_in")
    assert barge["source"] == "server" and barge["audio_end_ms"] == 800 and barge["item_id"] == "item_a"
    assert barge["t"] == of(doc, "speech_started")[0]["t"]


def test_client_truncate_after_the_server_cut_adds_the_cut_not_a_second_barge_in(pool):
    """A WebSocket page: the server cancels on speech_started, then the page reports what it played."""
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(speech())
    rec.server_event(done("resp_1", "item_a", "cancelled", "turn_detected"))
    rec.client_event(truncate("item_a", 300), 24000)  # the session calls this before writing the reply
    rec.server_event(truncated("item_a", 300))
    doc = finish(pool, rec)
    [barge] = of(doc, "barge_in")
    assert barge["source"] == "server" and "audio_end_ms" not in barge
    [cut] = of(doc, "truncated")
    assert cut["source"] == "client" and cut["audio_end_ms"] == 300


def test_client_truncate_of_an_uncut_reply_is_a_client_barge_in(pool):
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(done("resp_1", "item_a"))
    rec.client_event(truncate("item_a", 250), 24000)
    rec.server_event(truncated("item_a", 250))
    doc = finish(pool, rec)
    [barge] = of(doc, "barge_in")
    assert barge["source"] == "client" and barge["audio_end_ms"] == 250 and barge["item_id"] == "item_a"


def test_a_calls_gateway_truncate_is_the_servers_cut(pool):
    """On WebRTC the gateway plays the reply and truncates it on speech_started (event id gw_...)."""
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(done("resp_1", "item_a"))
    rec.server_event(speech())
    rec.client_event(truncate("item_a", 640, event_id="gw_evt_123"), 24000)
    rec.server_event(truncated("item_a", 640))
    doc = finish(pool, rec)
    [barge] = of(doc, "barge_in")
    assert barge["source"] == "server" and barge["audio_end_ms"] == 640
    assert of(doc, "truncated")[0]["source"] == "server"


def test_cancel_long_after_the_last_speech_is_dated_at_the_cancel(pool):
    rec = open_rec(pool)
    rec.server_event(speech())
    rec.server_event(speech("stopped"))
    rec.server_event(created("resp_1"))
    later(rec, 10000)
    rec.server_event(done("resp_1", "item_a", "cancelled", "turn_detected"))
    [barge] = of(rec, "barge_in")
    assert barge["t"] >= 10000 and barge["t"] == of(rec, "response_done")[0]["t"]
    finish(pool, rec)


def test_backchannel_is_recorded_without_a_barge_in(pool):
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event({"type": "input_audio_buffer.backchannel", "event_id": "evt_b", "item_id": "item_a",
                      "audio_start_ms": 2300, "audio_end_ms": 2710, "transcript": "Mm-hmm."})
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(done("resp_1", "item_a"))
    doc = finish(pool, rec)
    [bc] = of(doc, "backchannel")
    assert bc == {"t": bc["t"], "type": "backchannel", "item_id": "item_a", "transcript": "Mm-hmm.",
                  "audio_start_ms": 2300, "audio_end_ms": 2710}
    assert not of(doc, "barge_in") and not of(doc, "truncated")


def test_backchannel_with_no_reply_item_and_missing_fields(pool):
    rec = open_rec(pool)
    rec.server_event({"type": "input_audio_buffer.backchannel", "item_id": None, "transcript": None})
    [bc] = of(finish(pool, rec), "backchannel")
    assert bc["item_id"] is None and bc["transcript"] == "" and bc["audio_start_ms"] is None


def test_false_interruption_resumed(pool, tmp_path):
    """A cough cuts the reply (server barge-in, truncated to what was heard), no words follow, and
    a new response plays the rest: barge_in, then resumed naming both items; the replay plays the
    cut item up to the cut and the resumed one after it."""
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1", 1000))
    later(rec, 600)
    rec.server_event(speech())
    rec.server_event(done("resp_1", "item_a", "cancelled", "turn_detected"))
    rec.server_event(truncated("item_a", 600))
    later(rec, 300)
    rec.server_event(speech("stopped"))
    rec.server_event(created("resp_2"))
    rec.server_event({"type": "response.resumed", "event_id": "evt_r", "response_id": "resp_2", "item_id": "item_b",
                      "resumed_item_id": "item_a", "audio_start_ms": 600})
    rec.server_event(audio("item_b", "resp_2", 400))
    rec.server_event(done("resp_2", "item_b"))
    later(rec, 1000)
    doc = finish(pool, rec)
    [barge] = of(doc, "barge_in")
    [resumed] = of(doc, "resumed")
    assert barge["item_id"] == "item_a" and barge["source"] == "server"
    assert resumed == {"t": resumed["t"], "type": "resumed", "response_id": "resp_2", "item_id": "item_b",
                       "resumed_item_id": "item_a", "audio_start_ms": 600}
    assert resumed["t"] > barge["t"]
    _, ai = render_tracks(pool.root / SID, doc)
    loud = np.abs(ai) > 0.01
    assert 0.95 <= np.count_nonzero(loud) / RATE <= 1.05  # 600 ms of item_a + 400 ms of item_b
    assert loud[int(0.55 * RATE)] and not loud[int(0.7 * RATE)] and loud[int(1.0 * RATE)]  # the cut, then the rest


def test_each_interruption_of_a_session_gets_its_own_barge_in(pool):
    rec = open_rec(pool)
    for n, item in enumerate(("item_a", "item_b"), 1):
        rec.server_event(created(f"resp_{n}"))
        rec.server_event(audio(item, f"resp_{n}"))
        rec.server_event(speech())
        rec.server_event(done(f"resp_{n}", item, "cancelled", "turn_detected"))
        rec.server_event(truncated(item, 200))
    doc = finish(pool, rec)
    assert [b["item_id"] for b in of(doc, "barge_in")] == ["item_a", "item_b"]
    assert all(b["source"] == "server" for b in of(doc, "barge_in"))


def test_a_cancel_for_another_reason_is_no_barge_in(pool):
    rec = open_rec(pool)
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(done("resp_1", "item_a", "cancelled", "client_cancelled"))
    assert not of(finish(pool, rec), "barge_in")


def test_speech_before_the_reply_does_not_date_its_cut(pool):
    """The question's speech_started is not the interruption of the reply that answers it."""
    rec = open_rec(pool)
    rec.server_event(speech())
    rec.server_event(speech("stopped"))
    rec.server_event(created("resp_1"))
    rec.server_event(audio("item_a", "resp_1"))
    rec.server_event(done("resp_1", "item_a"))
    rec.client_event(truncate("item_a", 100), 24000)
    rec.server_event(truncated("item_a", 100))
    [barge] = of(rec, "barge_in")
    assert barge["t"] == of(rec, "truncated")[0]["t"] > of(rec, "speech_started")[0]["t"]
    finish(pool, rec)
