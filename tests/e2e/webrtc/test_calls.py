"""WebRTC calls end to end: a real ``aiortc`` peer as the browser, against a real gateway and cascade
worker (``/v1/realtime/calls``, issue 33).

- a spoken question in on the microphone track, the spoken answer out on the inbound track (not as
  ``response.output_audio.delta`` on the data channel), its transcript on the data channel,
  ``output_audio_buffer.started``/``stopped``; hangup frees the worker;
- barge-in: speaking while the answer plays clears the buffer and truncates the assistant's item to
  what the client received;
- the app server's multipart offer (``openai``'s own ``calls.create``) and the browser's ephemeral
  key: the call starts with that session, the wire formats pinned to what the tracks carry;
- the queue: a call waits for the worker with ``queue.position`` on the data channel, a call to a
  full queue is a 429 and leaves nothing behind; bad offers are 400s;
- a connection closed without hangup ends the call; a camera track reaches the worker as frames.

Every data-channel event is validated against the ``openai`` package's types.
"""

from __future__ import annotations

import asyncio
import re
import time
import wave

import httpx
import numpy as np
import pytest
import websockets
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from openai import AsyncOpenAI

from tests.support.realtime_client import recv_until
from tests.support.stack import Stack
from tests.support.webrtc_client import RATE, CallClient
from tests.support.whisper import hear, words

QUESTION = "What is the capital of France?"
LONG = "Tell me a long story about a dragon who learns to fly over the mountains."


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("webrtc"), workers=1, queue={"capacity": 1}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def speech(tts):
    """Spoken text as the microphone sends it: PCM16 mono 24 kHz, a little silence around it."""

    def make(text: str, tail_s: float = 1.2) -> bytes:
        pcm = b"".join(tts.synthesize(text, deterministic=True))
        return bytes(int(RATE * 0.3) * 2) + pcm + bytes(int(RATE * tail_s) * 2)

    return make


def calls_open(stack) -> float:
    """The gateway's ``omniduplex_webrtc_calls`` gauge."""
    text = httpx.get(f"{stack.url}/metrics", timeout=5).text
    line = next(x for x in text.splitlines() if x.startswith("omniduplex_webrtc_calls "))
    return float(line.split()[1])


async def settled(stack, timeout: float = 5.0) -> None:
    """Nothing left: no busy slot, no queue, no call, no session on the worker."""
    deadline = time.monotonic() + timeout
    while True:
        h, w = stack.health(), stack.worker_health()
        if h["slots_busy"] == 0 and h["queue_length"] == 0 and w["active_sessions"] == 0 and calls_open(stack) == 0:
            return
        assert time.monotonic() < deadline, f"left behind: gateway {h}, worker {w}, calls {calls_open(stack)}"
        await asyncio.sleep(0.05)


@pytest.fixture
async def call(stack):
    await settled(stack)
    clients: list[CallClient] = []

    def make(**kwargs) -> CallClient:
        clients.append(CallClient(stack.url, **kwargs))
        return clients[-1]

    yield make
    for c in clients:
        await c.close()
    await settled(stack)


def wav_pcm(path) -> bytes:
    with wave.open(str(path)) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1
        return w.readframes(w.getnframes())


def envelope_match(sent: bytes, got: bytes, frame_ms: int = 20) -> dict[str, float]:
    """How well ``got`` (a track's audio) carries ``sent`` (what the worker spoke), both PCM16 at
    RATE: the correlation of their log-loudness contours at the best lag, over ``sent``'s length,
    and ``got``'s voiced frames there against ``sent``'s (voiced: within 30 dB of the loudest)."""
    n = RATE * frame_ms // 1000

    def contour(pcm: bytes) -> np.ndarray:
        x = np.frombuffer(pcm[: len(pcm) // (2 * n) * 2 * n], "<i2").astype(np.float64).reshape(-1, n)
        return 20 * np.log10(np.sqrt((x**2).mean(axis=1)) + 1.0)

    a, b = contour(sent), contour(got)
    if len(b) < len(a):
        return {"correlation": 0.0, "voiced_ratio": 0.0, "lag_ms": 0.0}
    best, lag = -1.0, 0
    for k in range(len(b) - len(a) + 1):
        window = b[k:k + len(a)]
        if window.std() == 0:  # all silence here: no contour to follow
            continue
        r = float(np.corrcoef(a, window)[0, 1])
        if r > best:
            best, lag = r, k
    seg = b[lag:lag + len(a)]
    voiced_sent = int((a > a.max() - 30).sum())
    voiced_got = int((seg > a.max() - 30).sum())
    return {"correlation": round(best, 3), "voiced_ratio": round(voiced_got / max(1, voiced_sent), 3),
            "lag_ms": lag * frame_ms}


def no_audio_events(c: CallClient) -> None:
    assert c.invalid == []
    assert not c.of("response.output_audio.delta"), "audio must ride the track, not the data channel"


async def test_spoken_question_spoken_answer_then_hangup(stack, call, speech):
    c = call()
    await c.connect()
    created = await c.until("session.created", timeout=20)
    assert created["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    # the browser's canceller has the echo; the server's starts off on a call (issue 70)
    assert created["session"]["audio"]["input"]["echo_cancellation"] is None
    c.mic.say(speech(QUESTION))
    await c.until("input_audio_buffer.speech_started", timeout=20)
    await c.until("input_audio_buffer.speech_stopped", timeout=20)
    done = await c.until("response.done", timeout=60)
    assert done["response"]["status"] == "completed"
    transcript = (await c.until("response.output_audio_transcript.done"))["transcript"]
    assert "paris" in transcript.lower()
    started = await c.until("output_audio_buffer.started")
    stopped = await c.until("output_audio_buffer.stopped", timeout=30)
    assert started["response_id"] == stopped["response_id"] == done["response"]["id"]
    types = [e["type"] for e in c.events]
    assert types.index("response.done") < types.index("output_audio_buffer.stopped")
    await asyncio.sleep(0.2)  # the last frames in flight
    assert c.loud_ms(since=started["_t"]) >= 500, "the spoken answer did not arrive on the track"
    no_audio_events(c)

    r = await c.hangup()
    assert r.status_code == 200
    h = stack.health()
    assert h["slots_busy"] == 0 and h["queue_length"] == 0  # free when the hangup answers
    assert (await c.hangup()).status_code == 404
    # Recorded as any session: the user's audio (the appends the gateway made) and the reply's.
    recording = stack.sessions_dir / created["session"]["id"]
    deadline = time.monotonic() + 15
    while not (recording / "meta.json").exists():
        assert time.monotonic() < deadline, "the call's session was not recorded"
        await asyncio.sleep(0.1)
    assert any((recording / "user_audio").iterdir()) and any((recording / "ai_audio").iterdir())
    # What came out of the track is the answer the worker spoke, whole: its loudness contour, 20 ms
    # at a time, follows the worker's own reply audio (the recording's ai_audio) over all of it,
    # and as much of it is voiced. A call that lost, garbled or reordered pieces fails here.
    sent = b"".join(wav_pcm(f) for f in sorted((recording / "ai_audio").iterdir()))
    got = bytes(c.audio)
    match = envelope_match(sent, got)
    print(f"track vs the worker's reply audio: {match}")
    assert match["correlation"] >= 0.8 and 0.9 <= match["voiced_ratio"] <= 1.1, (transcript, match)
    # And it is the answer as a listener makes it out: the project's Whisper hears "Paris" in the
    # track's audio where the contour found the answer (0.5 s either side; not the idle track's
    # silence before and after, which says nothing). The worker's own audio is heard too, to tell
    # unclear speech (the product's TTS pieces: core/cascade/chunker.py) from a call that garbled it.
    at = match["lag_ms"] * RATE // 1000 * 2
    margin = RATE // 2 * 2
    answer = got[max(0, at - margin): at + len(sent) + margin]
    on_track, own = hear(answer, RATE), hear(sent, RATE)
    print(f"said {transcript!r}; Whisper hears on the track {on_track!r}, in the worker's own audio {own!r}")
    assert "paris" in words(on_track), (transcript, on_track, own)


async def test_barge_in_truncates_to_what_was_heard(stack, call, speech):
    c = call()
    await c.connect()
    await c.until("session.created", timeout=20)
    c.send("conversation.item.create", item={"type": "message", "role": "user",
                                             "content": [{"type": "input_text", "text": LONG}]})
    c.send("response.create", response={"max_output_tokens": 400})
    started = await c.until("output_audio_buffer.started", timeout=60)
    deadline = time.monotonic() + 30
    while c.played_ms(started["_t"], time.monotonic()) < 1200:  # let some of it play, however slow the worker
        assert time.monotonic() < deadline, "the reply never played 1.2 s"
        await asyncio.sleep(0.05)
    c.mic.say(speech(QUESTION))
    await c.until("input_audio_buffer.speech_started", timeout=20)
    cleared = await c.until("output_audio_buffer.cleared", timeout=10)
    assert cleared["response_id"] == started["response_id"]
    truncated = await c.until("conversation.item.truncated", timeout=20)
    item = (await c.until("response.output_item.added"))["item"]["id"]
    assert truncated["item_id"] == item
    # The reply's audio that reached the client between started and cleared (not the silence
    # the track sends when the worker falls behind).
    heard_ms = c.played_ms(started["_t"], cleared["_t"])
    assert abs(truncated["audio_end_ms"] - heard_ms) < 400, (truncated["audio_end_ms"], heard_ms)
    assert truncated["audio_end_ms"] > 1000
    # The item keeps what was heard: a short prefix of what the reply said.
    c.send("conversation.item.retrieve", item_id=item)
    kept = (await c.until("conversation.item.retrieved"))["item"]["content"][0]["transcript"]
    said = "".join(e["delta"] for e in c.of("response.output_audio_transcript.delta")
                   if e["item_id"] == item)
    assert kept and said.split()[: len(kept.split())] == kept.split() and len(kept) < len(said)
    # The interrupted answer stopped; the question after it gets its own answer.
    await c.until("response.done", count=2, timeout=60)
    assert c.of("response.done")[0]["response"]["status"] == "cancelled"
    no_audio_events(c)
    assert (await c.hangup()).status_code == 200


async def test_multipart_offer_with_session_via_openai_sdk(stack, call):
    c = call()
    sdk = AsyncOpenAI(api_key="unused", base_url=f"{stack.url}/v1", max_retries=0)
    session = {"type": "realtime", "instructions": "Answer like a pirate.",
               "audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}}}
    raw = await sdk.realtime.calls.with_raw_response.create(sdp=await c.offer(), session=session)
    assert raw.status_code == 201 and raw.headers["location"].startswith("/v1/realtime/calls/rtc_")
    await c.pc.setRemoteDescription(RTCSessionDescription(sdp=raw.content.decode(), type="answer"))
    c.call_id = raw.headers["location"].rsplit("/", 1)[-1]
    created = await c.until("session.created", timeout=20)
    assert created["session"]["instructions"] == "Answer like a pirate."
    audio_in = created["session"]["audio"]["input"]
    assert audio_in["turn_detection"] is None
    assert audio_in["format"] == {"type": "audio/pcm", "rate": 24000}  # the track's format, not G.711
    assert audio_in["echo_cancellation"] is None  # off on a call, with a session of its own too
    assert not c.of("session.updated")  # the config it started with is in session.created
    c.send("session.update", session={"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcma"}}}})
    updated = await c.until("session.updated")
    assert updated["session"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    no_audio_events(c)
    await sdk.realtime.calls.hangup(c.call_id)


async def test_ephemeral_key_offer_and_a_used_key(stack, call):
    minted = httpx.post(f"{stack.url}/v1/realtime/client_secrets", timeout=10,
                        json={"session": {"type": "realtime", "instructions": "Be brief."}}).json()
    c = call(headers={"Authorization": f"Bearer {minted['value']}"})
    await c.connect()
    created = await c.until("session.created", timeout=20)
    assert created["session"]["instructions"] == "Be brief."
    again = call(headers={"Authorization": f"Bearer {minted['value']}"})
    r = await again.post()
    assert r.status_code == 401 and "already used" in r.json()["error"]["message"]
    no_audio_events(c)
    assert (await c.hangup()).status_code == 200


async def test_queued_call_then_full_queue(stack, call):
    busy = await websockets.connect(f"ws://127.0.0.1:{stack.port}/v1/realtime")
    try:
        await recv_until(busy, "session.created")
        waiting = call(query="?extensions=queue", extensions=frozenset({"queue.position", "queue.assigned"}))
        await waiting.connect()  # answered at once, then queued
        position = await waiting.until("queue.position", timeout=10)
        assert position["position"] == 1
        full = call()
        r = await full.post()
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full", r.text
        assert stack.health()["queue_length"] == 1 and calls_open(stack) == 1  # only the waiting call
    finally:
        await busy.close()
    await waiting.until("queue.assigned", timeout=20)
    await waiting.until("session.created", timeout=20)
    no_audio_events(waiting)
    await waiting.close()  # no hangup: the closed connection ends the call


@pytest.mark.parametrize("case", ["garbage", "no_data_channel", "no_audio", "empty"])
async def test_bad_offers_are_400(stack, call, case):
    if case == "garbage":
        sdp = "hello, this is not SDP"
    elif case == "empty":
        sdp = ""
    else:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        if case == "no_data_channel":
            pc.addTransceiver("audio")
        else:
            pc.createDataChannel("oai-events")
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        await pc.close()
    r = await call().post(sdp=sdp)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_offer" and error["param"] == "sdp"
    expected = {"garbage": "v=0", "no_data_channel": "data channel", "no_audio": "no audio", "empty": "empty"}[case]
    assert expected in error["message"]
    assert calls_open(stack) == 0


async def test_camera_track_reaches_the_worker(stack, call):
    c = call(query="?extensions=all", extensions=frozenset({"input_image_buffer.appended", "session.metrics",
                                                            "queue.assigned", "session.recording"}),
             video=VideoStreamTrack())
    await c.connect()
    await c.until("session.created", timeout=20)
    frames = await c.until("input_image_buffer.appended", count=2, timeout=15)
    assert frames["frames_received"] >= 2
    assert not c.of("error")
    no_audio_events(c)
    assert (await c.hangup()).status_code == 200


async def test_operator_sees_and_ends_a_call(stack, call):
    c = call()
    await c.connect()
    created = await c.until("session.created", timeout=20)
    async with httpx.AsyncClient(base_url=stack.url, headers=stack.admin_headers, timeout=10) as admin:
        live = (await admin.get("/api/admin/live")).json()["sessions"]
        mine = [s for s in live if s.get("call_id") == c.call_id]
        assert mine and mine[0]["transport"] == "webrtc" and mine[0]["session_id"] == created["session"]["id"]
        r = await admin.post(f"/api/admin/sessions/{mine[0]['session_id']}/end")
        assert r.status_code == 200, r.text
    error = await c.until("error", timeout=10)
    assert error["error"]["code"] == "session_ended_by_operator"
    deadline = time.monotonic() + 10
    while c.pc.connectionState not in ("closed", "failed"):  # the gateway closed the connection
        assert time.monotonic() < deadline, c.pc.connectionState
        await asyncio.sleep(0.05)
    assert (await c.hangup()).status_code == 404
    no_audio_events(c)
