"""Recordings end to end: real worker and gateway processes, a client speaking in real time.

The directory holds every file, ``recording.json`` validates against the published schema, the
merged replay lasts as long as the session and puts the reply where the client heard it; cut-off
sessions stay readable; the viewer data is reachable only with the share or admin token.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import wave
from pathlib import Path

import cv2
import httpx
import jsonschema
import numpy as np
import pytest
import websockets

from tests.support.realtime_client import recv_until
from tests.support.reliability import say, wait_meta
from tests.support.stack import ROOT, Stack

SCHEMA = json.loads((ROOT / "docs" / "recording.schema.json").read_text())
VOICED = 0.02
CHUNK_MS = 40
RATE = 24000


# ``stack``: the suite's shared default stack (``tests/conftest.py``).


@pytest.fixture(scope="module")
def question(tts) -> np.ndarray:
    pcm = b"".join(tts.synthesize("What is the capital of France?", deterministic=True))
    return np.frombuffer(pcm, dtype="<i2")


def ws_url(stack, **params) -> str:
    q = "&".join(f"{k}={v}" for k, v in {"model": "omniduplex-cascade", "extensions": "all", **params}.items())
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?{q}"


def jpeg_b64(color=(30, 160, 40)) -> str:
    img = np.full((120, 160, 3), color, dtype=np.uint8)
    return base64.b64encode(cv2.imencode(".jpg", img)[1].tobytes()).decode()


async def stream_realtime(ws, pcm: np.ndarray) -> list[float]:
    """Send 40 ms chunks at real time; returns each chunk's send time."""
    step = RATE * CHUNK_MS // 1000
    sent = []
    t0 = time.monotonic()
    for n, i in enumerate(range(0, len(pcm), step)):
        await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
        sent.append(time.monotonic())
        chunk = pcm[i:i + step].astype("<i2").tobytes()
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()}))
    return sent


def read_stereo(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with wave.open(str(path)) as w:
        assert w.getnchannels() == 2 and w.getframerate() == RATE
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    return pcm[0::2], pcm[1::2]


async def test_session_recording_is_complete_and_on_the_wall_clock(stack, question):
    log: list = []
    opened = time.monotonic()
    async with websockets.connect(ws_url(stack, app="test")) as ws:
        rec = await recv_until(ws, "session.recording", log=log, timed=True)
        await recv_until(ws, "session.created", log=log, timed=True)
        await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
        await recv_until(ws, "session.updated", log=log, timed=True)
        await ws.send(json.dumps({"type": "input_image_buffer.append", "image": jpeg_b64()}))
        await recv_until(ws, "input_image_buffer.appended", log=log, timed=True)
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{jpeg_b64((200, 0, 0))}"}]}}))
        await recv_until(ws, "conversation.item.done", log=log, timed=True)
        sent = await stream_realtime(ws, question)
        # The user's last voiced sample, on the client's clock.
        last_voiced = int(np.flatnonzero(np.abs(question) > VOICED * 32768)[-1])
        step = RATE * CHUNK_MS // 1000
        user_end = sent[last_voiced // step] + (last_voiced % step) / RATE
        await asyncio.sleep(2.0)  # the reply starts a good 2 s after the user stopped
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send(json.dumps({"type": "response.create"}))
        first_delta = await recv_until(ws, "response.output_audio.delta", log=log, timeout=60, timed=True)
        got_first = log[-1][0]
        done = await recv_until(ws, "response.done", log=log, timeout=60, timed=True)
        assert done["response"]["status"] == "completed"
        await asyncio.sleep(1.0)
    closed = time.monotonic()

    session_id = rec["session_id"]
    assert rec["share_url"].startswith(f"/s/{session_id}?token=")
    meta = await wait_meta(stack, session_id)
    d = stack.sessions_dir / session_id
    assert meta["end_reason"] == "client_closed" and meta["app"] == "test"
    for sub in ("user_audio", "ai_audio", "user_frames", "user_images"):
        assert any((d / sub).iterdir()), f"{sub}/ is empty"
    assert (d / "merged_replay.wav").is_file() and (d / "merged_replay.mp4").is_file()
    assert not list(d.rglob("*.tmp"))
    recording = json.loads((d / "recording.json").read_text())
    jsonschema.validate(recording, SCHEMA)
    assert recording["complete"] is True
    kinds = {e["type"] for e in recording["events"]}
    assert {"user_audio", "user_frame", "user_image", "user_transcript", "reply_text", "reply_audio",
            "turn_metrics", "session_end"} <= kinds, kinds

    user, ai = read_stereo(d / "merged_replay.wav")
    assert abs(len(user) / RATE - (closed - opened)) < 0.5, (len(user) / RATE, closed - opened)
    # Where the client heard the reply start relative to the user's last voiced sample...
    reply = np.frombuffer(base64.b64decode(first_delta["delta"]), dtype="<i2")
    onset = np.flatnonzero(np.abs(reply) > VOICED * 32768)
    assert onset.size, "the first audio delta is silent; pick a later one"
    heard_gap = got_first + onset[0] / RATE - user_end
    assert heard_gap > 2.0
    # ...is where the replay has it.
    ai_start = int(np.flatnonzero(np.abs(ai) > VOICED)[0])
    user_voiced = np.flatnonzero(np.abs(user[:ai_start]) > VOICED)
    replay_gap = (ai_start - user_voiced[-1]) / RATE
    assert abs(replay_gap - heard_gap) < 0.1, (replay_gap, heard_gap)


async def test_viewer_data_needs_the_share_or_admin_token(stack, question):
    log: list = []
    async with websockets.connect(ws_url(stack)) as ws:
        rec = await recv_until(ws, "session.recording", log=log, timed=True)
        await recv_until(ws, "session.created", log=log, timed=True)
        await say(ws, "Say hello.")
        await recv_until(ws, "response.done", log=log, timeout=60, timed=True)
    sid = rec["session_id"]
    await wait_meta(stack, sid)
    token = rec["share_url"].split("token=", 1)[1]
    base = f"{stack.url}/api/sessions/{sid}"
    async with httpx.AsyncClient(timeout=30) as client:
        ok = await client.get(base, params={"token": token})
        assert ok.status_code == 200
        body = ok.json()
        assert "share_token_sha256" not in body["meta"]
        assert body["recording"]["events"][0]["type"] == "user_text"
        assert (await client.get(f"{stack.url}/s/{sid}", params={"token": token})).status_code == 200
        assert (await client.get(f"{base}/replay.wav", params={"token": token})).headers["content-type"] == "audio/wav"
        zipped = await client.get(f"{base}/download.zip", params={"token": token})
        assert zipped.status_code == 200 and zipped.content[:2] == b"PK"
        for bad in ({}, {"token": "wrong"}, {"token": token[:-1]}):
            assert (await client.get(base, params=bad)).status_code == 404
            assert (await client.get(f"{stack.url}/s/{sid}", params=bad)).status_code == 404
        assert (await client.get(f"{stack.url}/api/sessions/sess_{'0' * 32}", params={"token": token})).status_code == 404
        assert (await client.get(f"{base}/files/..%2fmeta.json/x", params={"token": token})).status_code == 404
        assert (await client.get(f"{base}/files/user_audio/..%2f..%2fmeta.json", params={"token": token})).status_code == 404
        admin = {"Authorization": f"Bearer {stack.admin_token}"}
        assert (await client.get(base, headers=admin)).status_code == 200
        listing = await client.get(f"{stack.url}/api/admin/sessions", headers=admin)
        assert any(s["id"] == sid for s in listing.json()["sessions"])
        assert (await client.get(f"{stack.url}/api/admin/sessions", params={"token": token})).status_code == 401


async def test_recording_off_for_one_session(stack):
    log: list = []
    async with websockets.connect(ws_url(stack, record="false")) as ws:
        first = await recv_until(ws, "session.created", log=log, timed=True)
    assert not any(ev["type"] == "session.recording" for _, ev in log), log
    assert not (stack.sessions_dir / first["session"]["id"]).exists()


async def test_client_gone_mid_reply_leaves_a_readable_recording(stack, question):
    log: list = []
    ws = await websockets.connect(ws_url(stack))
    rec = await recv_until(ws, "session.recording", log=log, timed=True)
    await recv_until(ws, "session.created", log=log, timed=True)
    await say(ws, "Tell me a long story about a dragon.")
    await recv_until(ws, "response.output_audio.delta", log=log, timeout=60, timed=True)
    ws.transport.abort()  # vanish without a close frame
    meta = await wait_meta(stack, rec["session_id"])
    assert meta["end_reason"] == "client_closed"
    recording = json.loads((stack.sessions_dir / rec["session_id"] / "recording.json").read_text())
    jsonschema.validate(recording, SCHEMA)
    assert any(e["type"] == "reply_audio" for e in recording["events"])


async def test_worker_killed_mid_reply_leaves_a_recording_up_to_that_moment(tmp_path):
    s = Stack(tmp_path, workers=1).start()
    try:
        log: list = []
        async with websockets.connect(ws_url(s)) as ws:
            rec = await recv_until(ws, "session.recording", log=log, timed=True)
            await recv_until(ws, "session.created", log=log, timed=True)
            await say(ws, "Tell me a long story about a dragon.")
            await recv_until(ws, "response.output_audio.delta", log=log, timeout=60, timed=True)
            await asyncio.sleep(1.5)  # a snapshot lands at least every second
            s.kill("worker0")
        d = s.sessions_dir / rec["session_id"]
        recording = json.loads((d / "recording.json").read_text())
        jsonschema.validate(recording, SCHEMA)
        assert recording["complete"] is False
        assert any(e["type"] == "reply_audio" for e in recording["events"])
        assert json.loads((d / "meta.json").read_text())["status"] == "live"  # cut off, never finished
        # The viewer builds the missing replay on demand.
        r = httpx.get(f"{s.url}/api/sessions/{rec['session_id']}/replay.wav",
                      headers={"Authorization": f"Bearer {s.admin_token}"}, timeout=30)
        assert r.status_code == 200 and r.content[:4] == b"RIFF"
        user, ai = read_stereo(d / "merged_replay.wav")
        assert np.abs(ai).max() > VOICED
    finally:
        s.stop()


async def test_limit_and_worker_shutdown_both_finish_the_recording(tmp_path):
    s = Stack(tmp_path, workers=1, limits={"pause_timeout_s": 1}).start()
    try:
        log: list = []
        async with websockets.connect(ws_url(s)) as ws:
            rec = await recv_until(ws, "session.recording", log=log, timed=True)
            await recv_until(ws, "session.created", log=log, timed=True)
            await ws.send(json.dumps({"type": "session.pause"}))
            await recv_until(ws, "session.paused", log=log, timed=True)
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
        meta = await wait_meta(s, rec["session_id"])
        assert meta["end_reason"] == "pause timeout" and meta["close_code"] == 4002

        async with websockets.connect(ws_url(s)) as ws:
            rec = await recv_until(ws, "session.recording", log=log, timed=True)
            await recv_until(ws, "session.created", log=log, timed=True)
            await say(ws, "Hello.", respond=False)
            await recv_until(ws, "conversation.item.done", log=log, timed=True)
            s.procs["worker0"].terminate()  # SIGTERM: a graceful worker shutdown
            meta = await wait_meta(s, rec["session_id"])
        assert meta["end_reason"] == "worker_shutdown", meta
        assert s.procs["worker0"].wait(20) is not None
    finally:
        s.stop()
