"""A call's audio crosses the gateway-worker socket as binary frames (``core/audio_frames.py``), not
base64 in JSON (issue 71): on a connection its gateway opened for a call a microphone frame is
heard as the same append would be, in both dialects, and recorded, and the reply's audio leaves as
frames carrying what the deltas would; anywhere else a binary frame is the ``invalid_json`` error
it always was (the public protocols stay JSON)."""

from __future__ import annotations

import asyncio
import base64
import json
import wave

import numpy as np
import pytest

from core.audio_frames import mic_frame, read_mic_frame, read_reply_frame
from core.config import LimitsConfig
from core.protocol import Dialect, ProtocolError
from tests.support.scripted_backend import ScriptedBackend, quiet, tone
from tests.support.session_channel import SessionChannel
from worker.live.channel import LiveChannel
from worker.recorder import RecorderPool
from worker.session import RealtimeSession

RATE = 24000
SPOKEN = quiet(0.3, RATE) + tone(0.8, RATE) + quiet(1.6, RATE)


def frames_of(pcm: bytes, ms: int = 40) -> list[bytes]:
    step = RATE * 2 * ms // 1000
    return [mic_frame(pcm[i:i + step], RATE) for i in range(0, len(pcm), step)]


async def stream(client: SessionChannel, messages: list) -> None:
    for m in messages:
        client.inbox.put_nowait(m)
        await asyncio.sleep(0)


def test_a_frame_carries_its_pcm_and_rate_and_nothing_else_passes_for_one():
    pcm = np.arange(-480, 480, dtype="<i2").tobytes()
    assert read_mic_frame(mic_frame(pcm, RATE)) == (pcm, RATE)
    for bad in (b"", b"OD", b"XX" + mic_frame(pcm, RATE)[2:], b'{"type": "input_audio_buffer.append"}'):
        with pytest.raises(ProtocolError) as refused:
            read_mic_frame(bad)
        assert refused.value.code == "invalid_json", bad
    with pytest.raises(ProtocolError) as odd:
        read_mic_frame(mic_frame(b"\x00\x00\x00", RATE))
    assert odd.value.code == "invalid_audio"


class FramesChannel(SessionChannel):
    """A client in memory that also keeps the binary frames it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    async def send(self, message) -> None:
        if isinstance(message, bytes):
            self.frames.append(message)
            return
        await super().send(message)


async def run_realtime(messages: list, binary_audio: bool, recorder=None, reply: bool = False) -> FramesChannel:
    client = FramesChannel()
    backend = ScriptedBackend(["Hello", "there."], transcript="hello")
    session = RealtimeSession(client, backend, Dialect(False), LimitsConfig(), binary_audio=binary_audio,
                              binary_reply=binary_audio, recorder=recorder)
    task = asyncio.create_task(session.run())
    await client.until("session.created")
    client.client("session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": {
        "type": "server_vad", "create_response": reply}}}})
    await client.until("session.updated")
    await stream(client, messages)
    if reply:
        await client.until("response.done")
    await asyncio.sleep(0.3)
    client.inbox.put_nowait(None)
    await asyncio.wait_for(task, 10)
    backend.close()
    return client


async def test_a_calls_microphone_frames_are_heard_as_its_appends_are():
    appends = [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(read_mic_frame(f)[0]).decode()})
               for f in frames_of(SPOKEN)]
    as_json = await run_realtime(appends, binary_audio=False)
    as_frames = await run_realtime(frames_of(SPOKEN), binary_audio=True)
    assert not as_frames.of("error"), as_frames.of("error")
    for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                 "input_audio_buffer.committed"):
        assert len(as_frames.of(kind)) == len(as_json.of(kind)) == 1, kind
    for kind, field in (("input_audio_buffer.speech_started", "audio_start_ms"),
                        ("input_audio_buffer.speech_stopped", "audio_end_ms")):
        assert as_frames.of(kind)[0][field] == as_json.of(kind)[0][field]


async def test_a_binary_frame_on_a_public_connection_is_still_refused():
    client = await run_realtime(frames_of(SPOKEN)[:3], binary_audio=False)
    errors = client.of("error")
    assert len(errors) == 3 and {e["error"]["code"] for e in errors} == {"invalid_json"}, errors
    assert not client.of("input_audio_buffer.speech_started")


async def test_a_frame_at_another_rate_than_the_sessions_is_refused():
    client = await run_realtime([mic_frame(bytes(1920), 16000)], binary_audio=True)
    (error,) = client.of("error")
    assert error["error"]["code"] == "invalid_audio" and "16000 Hz" in error["error"]["message"], error


async def test_the_recording_keeps_what_the_frames_carried(tmp_path):
    pool = RecorderPool(tmp_path)
    rec = pool.open("sess_" + "1" * 32, {"app": "test"})
    await run_realtime(frames_of(SPOKEN), binary_audio=True, recorder=rec)  # the session finishes it
    pool.shutdown()  # every write done
    heard = b""
    for path in sorted((pool.root / ("sess_" + "1" * 32) / "user_audio").glob("*.wav")):
        with wave.open(str(path)) as w:
            assert w.getframerate() == RATE
            heard += w.readframes(w.getnframes())
    assert heard == SPOKEN


async def test_a_calls_reply_audio_leaves_as_frames_carrying_what_the_deltas_would():
    appends = [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(read_mic_frame(f)[0]).decode()})
               for f in frames_of(SPOKEN)]
    public = await run_realtime(appends, binary_audio=False, reply=True)
    call = await run_realtime(frames_of(SPOKEN), binary_audio=True, reply=True)
    sent = b"".join(base64.b64decode(e["delta"]) for e in public.of("response.output_audio.delta"))
    assert sent and not public.frames
    assert not call.of("response.output_audio.delta"), "a call's reply audio never goes as JSON"
    got = [read_reply_frame(f) for f in call.frames]
    done = call.of("response.done")[0]["response"]
    assert {(rid, iid) for rid, iid, _ in got} == {(done["id"], done["output"][0]["id"])}
    assert b"".join(pcm for _, _, pcm in got) == sent  # the same audio, sample for sample
    assert [e["type"] for e in call.events if e["type"] != "session.updated"] == [
        e["type"] for e in public.events if e["type"] not in ("response.output_audio.delta", "session.updated")]


class LiveClient(FramesChannel):
    def validation_error(self, event: dict) -> str | None:
        return None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.inbox.put_nowait(None)


async def live_transcripts(muted: bool) -> LiveClient:
    client = LiveClient()
    backend = ScriptedBackend(["Sure."], transcript="what is the weather")
    live = LiveChannel(client, "sess_live_frames", "omni", max_session_s=600, binary_audio=True)
    task = asyncio.create_task(RealtimeSession(live, backend, Dialect(False), LimitsConfig(), binary_audio=True,
                                               extensions=frozenset({"response.resumed"})).run())
    client.client("session.start", session={"model": "gpt-live-1"})
    await client.until("session.started")
    if muted:
        client.client("session.input_audio.mute")
        await client.until("session.input_audio.muted")
    for frame in frames_of(SPOKEN):
        client.inbox.put_nowait(frame)
        await asyncio.sleep(0.04)
    if not muted:
        await client.until("session.input_transcript.delta")
    await asyncio.sleep(0.5)
    client.client("session.close")
    await client.until("session.closed")
    await asyncio.wait_for(task, 10)
    backend.close()
    return client


async def test_a_live_calls_frames_are_heard_and_silence_while_muted():
    heard = await live_transcripts(muted=False)
    assert not heard.of("error"), heard.of("error")
    assert heard.of("session.input_transcript.delta")[0]["delta"] == " what is the weather"
    muted = await live_transcripts(muted=True)
    assert not muted.of("error") and not muted.of("session.input_transcript.delta")
    assert muted.of("session.closed")[0]["usage"]["seconds"] >= 2.6  # the timeline went on
    # The reply's audio left as frames of Live's one stream, never as JSON deltas.
    assert heard.frames and not heard.of("session.output_audio.delta")
    assert {read_reply_frame(f)[:2] for f in heard.frames} == {("live", "")}
