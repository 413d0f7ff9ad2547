"""WebRTC calls (issue 33): voice-to-voice against WebSocket in one run, gateway CPU per live call,
and many calls relayed at once without an audio underrun.

    python -m bench calls                          # all three parts: V2V and transport x3 runs, 0/1/5/10/20 calls
    python -m bench calls --parts v2v --prompts 8 --runs 3
    python -m bench calls --parts transport --seconds 10 --runs 3
    python -m bench calls --parts load --calls 1 5 10 20 --hold 10
    python -m bench calls --parts transport load --seconds 2 --calls 2 --hold 1   # the e2e test's size

**V2V** (a real gateway and one cascade worker): the same spoken prompts (the pipeline's Piper
voice, as ``bench serve``) streamed in real time, (a) over the WebSocket as 40 ms PCM16
``input_audio_buffer.append`` events, as our pages send them, and (b) over a WebRTC call from an
``aiortc`` peer (this module's own client, a browser stand-in): a microphone track of 20 ms frames,
Opus-encoded by aiortc, JSON on the ``oai-events`` data channel. One fresh session or call per
prompt, server VAD (500 ms of silence ends the turn), ``max_output_tokens`` 48; the transports
alternate prompt by prompt (which goes first alternates too), so load drifts hit both alike.

The clock: both clients send audio as a microphone captures it, each chunk when its last sample
has been "spoken" (chunk n of d seconds leaves at t0 + (n+1)d), and V2V runs from the instant the
last voiced sample was spoken (t0 + its index / 24 kHz) to the first reply audio the client can
play: on the WebSocket the first ``response.output_audio.delta``; on the call the first decoded
frame of reply audio out of the inbound track. Reply frames are told from the gateway's idle
frames exactly: the gateway sends a fixed 3-byte Opus silence frame while nothing plays, so an RTP
packet with any other payload is reply audio, and a decoded frame carries its packet's RTP
timestamp. What the call's figure includes and the WebSocket's does not:

- packetisation: 20 ms frames (the WebSocket's 40 ms chunks cost more here);
- the gateway's receiver: aiortc's audio jitter buffer releases a frame when the 4th after it has
  arrived (80 ms); then Opus decoding, resampling and 40 ms appends;
- on the way out: Opus encoding at the gateway, the track's 20 ms tick, and the bench client's own
  receiver: aiortc's jitter buffer (80 ms again) and decoder. A browser's adaptive jitter buffer
  on a clean network holds less; so the client-side jitter buffer is shown apart: "wire" is the
  arrival of the first reply packet (before any jitter buffer), "track" the decoded frame.

The legs are split with events both transports carry: ``input_audio_buffer.speech_stopped``
(input: how late the worker heard the silence), ``response.created``, and on the call
``output_audio_buffer.started`` (the gateway's track took the first reply frame).

The worker's own V2V (``session.metrics``: speech stopped -> first audio) is kept per turn, and
"V2V less the worker's own V2V" takes the model's time out of each turn: on a loaded machine the
model's time swings by seconds and hides the transports' difference.

**Transport** (a real gateway and ``bench/synthetic_worker.py --probe``, no model): a WebSocket
session and a call at once, each microphone sending a loud 100 ms burst every 0.49 s; the worker
answers each burst's onset with the time its chunk arrived, and every 0.5 s sends a one-delta
reply with the time it was sent (one monotonic clock on one machine). One-way latency in (a sample
spoken -> its chunk at the worker) and out (the delta -> the first reply packet, and the decoded
frame) per transport; their sum is what a turn costs each transport, without the model.

**Load** (a real gateway and ``bench/synthetic_worker.py --paced``, a test double that streams
one endless reply per session in real time, so no model competes for the CPU): at each level K,
K calls at once, each sending a continuous Opus microphone track (pre-encoded speech-like tone:
the gateway decodes, resamples and relays it) and receiving reply audio (the gateway decodes the
deltas' base64 and Opus-encodes them). After the calls are up and playing, the gateway process's
CPU time (``psutil``, all threads; the event loop's thread apart) over ``--hold`` seconds, while a
separate process times ``GET /health`` every 100 ms (the loop's responsiveness); a level of 0
calls first gives the idle figures. Underruns as in ``bench serve`` (a player that starts at the
first reply frame and plays in real time; a frame more than 100 ms late is one), counted on every
call over the window (steady state: not while the other calls connect), with "dry" frames (idle
frames in the middle of the reply: the gateway had nothing queued at a tick) beside them, and the
same rule on the reply packets' arrival ("on the wire", before the client's jitter buffer).

The bench's own clients and the synthetic worker run on the same cores as the gateway; their CPU
is printed next to the gateway's. The load average is printed at the start and end of each part.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fractions
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from bench.launch import Launched, raise_fd_limit
from bench.serving import MAX_TOKENS, SPOKEN_PROMPTS, UNDERRUN_MS, continuity
from bench.stats import goal_mark, median_spread, summary

RATE = 24000
FRAME_S = 0.02
FRAME = int(RATE * FRAME_S)
WS_CHUNK_S = 0.04
LEAD_S = 0.5  # silence before the speech
TAIL_S = 12.0  # silence after it, at most (the client stops at the reply's end)
VOICED = 0.02 * 32768  # a sample louder than this is voiced (bench serve's rule)
OPUS_SILENCE = b"\xf8\xff\xfe"  # the gateway's idle frame (gateway/realtime/webrtc/tracks.py)
V2V_GOAL_MS = 60.0  # WebRTC V2V p50 at most this much above the WebSocket's
CPU_GOAL_PCT = 5.0  # gateway CPU per live call, % of one core
UNDERRUN_GOAL = 0
MANY_CALLS = 20
PROBE_EVERY_S = 0.1
QUERY = "?record=false&app=bench&extensions=session.metrics"  # V2V sessions: the worker's own V2V after each reply

# The /health prober: its own process, so the bench's busy event loop does not time itself.
PROBE = r"""
import json, sys, time, httpx
url, seconds, every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
out = []
with httpx.Client(timeout=10) as c:
    c.get(url)
    print("ready", flush=True)
    sys.stdin.readline()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        c.get(url)
        out.append((time.perf_counter() - t) * 1000)
        time.sleep(every)
print(json.dumps(out), flush=True)
"""


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------------------------------- client


def _media_classes():
    """aiortc and PyAV, imported when a call is made (the module's --help stays light)."""
    import av
    from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
    from aiortc.mediastreams import MediaStreamError

    return av, MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription, MediaStreamError


def make_tracks():
    av, MediaStreamTrack, _, _, _, MediaStreamError = _media_classes()

    class PacedMic(MediaStreamTrack):
        """A microphone's clock: frame n is handed to aiortc at t0 + (n+1) * 20 ms, when its last
        sample has been captured."""

        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self._t0: float | None = None
            self._n = 0

        async def _next(self) -> int:
            """Wait for the next frame's time; its number."""
            if self.readyState != "live":
                raise MediaStreamError
            if self._t0 is None:
                self._t0 = time.monotonic()
            n = self._n
            self._n += 1
            wait = self._t0 + (n + 1) * FRAME_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            return n

    class SpeechMic(PacedMic):
        """PCM16 mono 24 kHz frames of what is queued (silence otherwise). ``speech_t0``: when the
        first sample of the last ``say`` was captured."""

        def __init__(self) -> None:
            super().__init__()
            self._pcm = bytearray()
            self._fresh = False
            self.speech_t0: float | None = None

        def say(self, pcm: bytes) -> None:
            self._pcm = bytearray(pcm)
            self._fresh = True
            self.speech_t0 = None

        def stop_speaking(self) -> None:
            self._pcm = bytearray()

        async def recv(self):
            n = await self._next()
            if self._fresh and self._pcm:
                self._fresh = False
                self.speech_t0 = self._t0 + n * FRAME_S
            chunk = bytes(self._pcm[: FRAME * 2])
            del self._pcm[: FRAME * 2]
            frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
            frame.planes[0].update(chunk + bytes(FRAME * 2 - len(chunk)))
            frame.pts, frame.sample_rate, frame.time_base = n * FRAME, RATE, fractions.Fraction(1, RATE)
            return frame

    class PacketMic(PacedMic):
        """A continuous microphone of pre-encoded 20 ms Opus packets (no encoding in the bench's
        process)."""

        def __init__(self, packets: list[bytes]) -> None:
            super().__init__()
            self._packets = packets

        async def recv(self):
            n = await self._next()
            packet = av.Packet(self._packets[n % len(self._packets)])
            packet.pts, packet.time_base = n * 960, fractions.Fraction(1, 48000)
            return packet

    return SpeechMic, PacketMic


def opus_packets(pcm: bytes, rate: int = RATE) -> list[bytes]:
    """PCM16 mono -> 20 ms Opus packets (48 kHz, voip, 32 kbit/s), as a browser's microphone sends."""
    import av

    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate, codec.format, codec.layout, codec.sample_rate = 32000, "s16", "mono", 48000
    codec.time_base = fractions.Fraction(1, 48000)
    codec.options = {"application": "voip"}
    resampler = av.AudioResampler(format="s16", layout="mono", rate=48000)
    frame = av.AudioFrame(format="s16", layout="mono", samples=len(pcm) // 2)
    frame.planes[0].update(pcm)
    frame.sample_rate, frame.time_base, frame.pts = rate, fractions.Fraction(1, rate), 0
    out: list[bytes] = []
    for f in resampler.resample(frame) + resampler.resample(None):
        f.pts = None
        out += [bytes(p) for p in codec.encode(f)]
    out += [bytes(p) for p in codec.encode(None)]
    return out


class BenchCall:
    """One call from the client's side: offer, data channel events with arrival times, and the
    inbound track's frames classified as reply audio or the gateway's idle frames."""

    def __init__(self, base_url: str, mic, query: str = "?record=false&app=bench") -> None:
        _, _, RTCConfiguration, RTCPeerConnection, _, _ = _media_classes()
        self.base_url, self.query = base_url, query
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = mic
        self.pc.addTrack(mic)
        self.dc = self.pc.createDataChannel("oai-events")
        self.events: list[tuple[float, dict]] = []
        self.wire: list[float] = []  # arrival of each reply RTP packet
        self.frames: list[tuple[float, bool]] = []  # (arrival, is reply audio) of each decoded frame
        self._reply_ts: set[int] = set()
        self.call_id: str | None = None
        self.connect_ms: float | None = None
        self._new = asyncio.Event()
        self._opened = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.dc.on("open", self._opened.set)
        self.dc.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        receiver = self.pc.getTransceivers()[0].receiver
        handle = receiver._handle_rtp_packet

        async def hooked(packet, arrival_time_ms: int) -> None:
            if packet.payload != OPUS_SILENCE:
                self.wire.append(time.monotonic())
                self._reply_ts.add(packet.timestamp)
            await handle(packet, arrival_time_ms)

        receiver._handle_rtp_packet = hooked  # the RTP router looks it up on the instance
        # aiortc maps RTP timestamps to its frames' pts (from 0): note which pts are reply audio.
        self._reply_pts: set[int] = set()
        mapper = receiver._RTCRtpReceiver__timestamp_mapper
        mapped = mapper.map

        def noting(timestamp: int) -> int:
            pts = mapped(timestamp)
            if timestamp in self._reply_ts:
                self._reply_ts.discard(timestamp)
                self._reply_pts.add(pts)
            return pts

        mapper.map = noting

    async def connect(self, timeout: float = 30.0) -> None:
        _, _, _, _, RTCSessionDescription, _ = _media_classes()
        t = time.monotonic()
        await self.pc.setLocalDescription(await self.pc.createOffer())
        async with httpx.AsyncClient(timeout=timeout) as http:
            answer = await http.post(f"{self.base_url}/v1/realtime/calls{self.query}", content=self.pc.localDescription.sdp,
                                     headers={"Content-Type": "application/sdp"})
        if answer.status_code != 201:
            raise RuntimeError(f"call refused: {answer.status_code} {answer.text[:300]}")
        self.call_id = answer.headers["location"].rsplit("/", 1)[-1]
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer.text, type="answer"))
        await asyncio.wait_for(self._opened.wait(), timeout)
        self.connect_ms = (time.monotonic() - t) * 1000

    def _on_message(self, message: str | bytes) -> None:
        self.events.append((time.monotonic(), json.loads(message)))
        self._new.set()

    def send(self, event: dict) -> None:
        self.dc.send(json.dumps(event))

    def first(self, kind: str, since: float = 0.0) -> float | None:
        return next((t for t, e in self.events if e["type"] == kind and t >= since), None)

    async def until(self, kind: str, timeout: float = 60.0, since: float = 0.0) -> float:
        deadline = time.monotonic() + timeout
        while (t := self.first(kind, since)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} within {timeout:.0f} s; saw {[e['type'] for _, e in self.events[-12:]]}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), left)
        return t

    def _on_track(self, track) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._read(track)))

    async def _read(self, track) -> None:
        *_, MediaStreamError = _media_classes()
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            reply = frame.pts in self._reply_pts
            self._reply_pts.discard(frame.pts)
            self.frames.append((time.monotonic(), reply))

    def first_reply_frame(self, since: float = 0.0) -> float | None:
        return next((t for t, reply in self.frames if reply and t >= since), None)

    def playout(self, start: float, end: float) -> dict[str, Any]:
        """Underruns of the reply frames from the first at or after ``start`` to ``end``, and the
        idle frames among them (dry ticks at the gateway); ``wire_underruns``: the same rule on the
        reply packets' arrival, before the client's jitter buffer and decoder (late there: late
        from the gateway; late only after: the client's own receiver)."""
        frames = [(t, r) for t, r in self.frames if start <= t <= end]
        first = next((i for i, (_, r) in enumerate(frames) if r), None)
        if first is None:
            return {"late_at": [], "reply_frames": 0, "underruns": 0, "worst_late_ms": 0.0, "dry_frames": 0, "wire_underruns": 0,
                    "wire_worst_late_ms": 0.0}
        last = max(i for i, (_, r) in enumerate(frames) if r)
        span = frames[first:last + 1]
        underruns, worst = continuity([(t, FRAME_S) for t, r in span if r])
        wire_underruns, wire_worst = continuity([(t, FRAME_S) for t in self.wire if start <= t <= end])
        due, late_at = None, []
        for t, r in span:  # when the late frames came (continuity's rule), to see if calls stalled together
            if r:
                if due is not None and (t - due) * 1000 > UNDERRUN_MS:
                    late_at.append(t)
                due = max(due or t, t) + FRAME_S
        return {"late_at": late_at, "reply_frames": sum(r for _, r in span), "underruns": underruns, "worst_late_ms": round(worst, 1),
                "dry_frames": sum(not r for _, r in span), "wire_underruns": wire_underruns,
                "wire_worst_late_ms": round(wire_worst, 1)}

    async def hangup(self) -> None:
        if self.call_id:
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient(timeout=15) as http:
                    await http.post(f"{self.base_url}/v1/realtime/calls/{self.call_id}/hangup")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await self.pc.close()


# ---------------------------------------------------------------------------------------- V2V


def last_voiced(pcm: np.ndarray) -> int:
    return int(np.flatnonzero(np.abs(pcm.astype(np.int32)) > VOICED)[-1])


async def ws_turn(ws_url: str, speech: np.ndarray) -> dict[str, Any]:
    """One spoken prompt over a fresh WebSocket session; times relative to the last voiced sample."""
    import websockets

    audio = np.concatenate([np.zeros(int(LEAD_S * RATE), "<i2"), speech, np.zeros(int(TAIL_S * RATE), "<i2")])
    lv = int(LEAD_S * RATE) + last_voiced(speech)
    step = int(WS_CHUNK_S * RATE)
    r: dict[str, Any] = {"transport": "websocket"}
    marks: dict[str, float] = {}
    async with websockets.connect(ws_url, max_size=None, compression=None, ping_interval=None,
                                  open_timeout=120) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), 120))["type"] != "session.created":
            pass
        await ws.send(json.dumps({"type": "session.update", "session": {"max_output_tokens": MAX_TOKENS}}))
        while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "session.updated":
            pass

        async def send() -> None:
            t0 = time.monotonic()
            marks["last_voiced"] = t0 + lv / RATE
            for i in range(0, audio.size, step):
                await asyncio.sleep(max(0.0, t0 + (i + step) / RATE - time.monotonic()))
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(audio[i:i + step].tobytes()).decode()}))

        sender = asyncio.create_task(send())
        times: dict[str, float] = {}
        audio_in: list[tuple[float, float]] = []
        try:
            while True:
                ev = json.loads(await asyncio.wait_for(ws.recv(), 60))
                now = time.monotonic()
                kind = ev["type"]
                if kind in ("input_audio_buffer.speech_stopped", "response.created") and kind not in times:
                    times[kind] = now
                elif kind == "response.output_audio.delta":
                    audio_in.append((now, len(base64.b64decode(ev["delta"])) / 2 / RATE))
                elif kind == "response.done":
                    break
                elif kind == "error":
                    r.setdefault("errors", []).append(ev.get("error", {}).get("message"))
            with contextlib.suppress(TimeoutError):  # the worker's own figures follow response.done
                while (ev := json.loads(await asyncio.wait_for(ws.recv(), 5)))["type"] != "session.metrics":
                    pass
                r["worker_v2v_ms"] = ev["metrics"].get("v2v_ms")
        finally:
            sender.cancel()
    mark = marks["last_voiced"]
    r["v2v_ms"] = (audio_in[0][0] - mark) * 1000 if audio_in else None
    r["speech_stopped_ms"] = _rel(times.get("input_audio_buffer.speech_stopped"), mark)
    r["response_created_ms"] = _rel(times.get("response.created"), mark)
    r["underruns"], r["worst_late_ms"] = continuity(audio_in)
    r["audio_s"] = round(sum(d for _, d in audio_in), 2)
    return r


def _rel(t: float | None, mark: float) -> float | None:
    return None if t is None else round((t - mark) * 1000, 1)


async def rtc_turn(base_url: str, speech: np.ndarray) -> dict[str, Any]:
    """One spoken prompt over a fresh WebRTC call; times relative to the last voiced sample."""
    SpeechMic, _ = make_tracks()
    mic = SpeechMic()
    call = BenchCall(base_url, mic, QUERY)
    r: dict[str, Any] = {"transport": "webrtc"}
    try:
        await call.connect()
        r["connect_ms"] = round(call.connect_ms, 1)
        await call.until("session.created", timeout=120)
        t = time.monotonic()
        call.send({"type": "session.update", "session": {"max_output_tokens": MAX_TOKENS}})
        await call.until("session.updated", timeout=30, since=t)
        pcm = np.concatenate([np.zeros(int(LEAD_S * RATE), "<i2"), speech]).astype("<i2")
        mic.say(pcm.tobytes())
        t_say = time.monotonic()
        await call.until("response.done", timeout=60, since=t_say)
        with contextlib.suppress(TimeoutError):
            await call.until("session.metrics", timeout=5, since=t_say)
        with contextlib.suppress(TimeoutError):
            await call.until("output_audio_buffer.stopped", timeout=30, since=t_say)
        await asyncio.sleep(0.25)  # the last frames through the client's jitter buffer
        end = time.monotonic()
        mark = mic.speech_t0 + (int(LEAD_S * RATE) + last_voiced(speech)) / RATE
        first_frame = call.first_reply_frame(mark)
        first_wire = next((t for t in call.wire if t >= mark), None)
        r["v2v_ms"] = _rel(first_frame, mark)
        r["v2v_wire_ms"] = _rel(first_wire, mark)
        r["speech_stopped_ms"] = _rel(call.first("input_audio_buffer.speech_stopped", mark), mark)
        r["response_created_ms"] = _rel(call.first("response.created", mark), mark)
        r["started_ms"] = _rel(call.first("output_audio_buffer.started", mark), mark)
        metrics = next((e["metrics"] for t, e in call.events if e["type"] == "session.metrics" and t >= t_say), {})
        r["worker_v2v_ms"] = metrics.get("v2v_ms")
        play = call.playout(mark, end)
        r.update(underruns=play["underruns"], worst_late_ms=play["worst_late_ms"], dry_frames=play["dry_frames"],
                 wire_underruns=play["wire_underruns"],
                 audio_s=round(play["reply_frames"] * FRAME_S, 2))
        errors = [e.get("error", {}).get("message") for _, e in call.events if e["type"] == "error"]
        if errors:
            r["errors"] = errors
    finally:
        await call.hangup()
        await call.close()
    return r


async def v2v_run(launched: Launched, speech: dict[str, np.ndarray], prompts: int, log) -> list[dict[str, Any]]:
    ws_url = launched.ws_url + QUERY
    turns = {"websocket": lambda s: ws_turn(ws_url, s), "webrtc": lambda s: rtc_turn(launched.url, s)}
    rows: list[dict[str, Any]] = []
    for i in range(prompts):
        text = SPOKEN_PROMPTS[i % len(SPOKEN_PROMPTS)]
        order = ["websocket", "webrtc"] if i % 2 == 0 else ["webrtc", "websocket"]
        for transport in order:
            try:
                row = await turns[transport](speech[text])
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                row = {"transport": transport, "error": repr(exc)[:300]}
            row["prompt"] = text
            rows.append(row)
            log(f"  {transport:9s} {text!r}: " + (f"error {row['error']}" if "error" in row else
                f"V2V {row['v2v_ms']} ms (wire {row.get('v2v_wire_ms', '-')}), speech_stopped "
                f"{row['speech_stopped_ms']}, created {row['response_created_ms']}, worker's V2V {row.get('worker_v2v_ms')}, "
                f"underruns {row['underruns']}"))
    return rows


V2V_KEYS = ("v2v_ms", "v2v_wire_ms", "speech_stopped_ms", "response_created_ms", "started_ms", "worker_v2v_ms",
            "v2v_less_worker_ms", "v2v_wire_less_worker_ms")


def v2v_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in rows:  # the turn less the model's own time (speech stopped -> first audio at the worker)
        if r.get("worker_v2v_ms") is not None:
            for key in ("v2v_ms", "v2v_wire_ms"):
                if r.get(key) is not None:
                    r[key.replace("_ms", "_less_worker_ms")] = round(r[key] - r["worker_v2v_ms"], 1)
    for transport in ("websocket", "webrtc"):
        mine = [r for r in rows if r["transport"] == transport]
        ok = [r for r in mine if "error" not in r and r.get("v2v_ms") is not None]
        s: dict[str, Any] = {"n": len(ok), "errors": len(mine) - len(ok),
                             "underruns": sum(r["underruns"] for r in ok),
                             "worst_late_ms": max((r["worst_late_ms"] for r in ok), default=0.0),
                             "dry_frames": sum(r.get("dry_frames", 0) for r in ok),
                             "wire_underruns": sum(r.get("wire_underruns", 0) for r in ok)}
        for key in V2V_KEYS:
            vals = [r[key] for r in ok if r.get(key) is not None]
            if vals:
                sm = summary(vals)
                s[key] = {"p50": sm["p50"], "p90": sm["p90"]}
        out[transport] = s
    ws, rtc = out["websocket"].get("v2v_ms"), out["webrtc"].get("v2v_ms")
    out["diff_p50_ms"] = round(rtc["p50"] - ws["p50"], 1) if ws and rtc else None
    wire = out["webrtc"].get("v2v_wire_ms")
    out["diff_wire_p50_ms"] = round(wire["p50"] - ws["p50"], 1) if ws and wire else None
    ws, rtc = out["websocket"].get("v2v_less_worker_ms"), out["webrtc"].get("v2v_less_worker_ms")
    out["diff_less_worker_p50_ms"] = round(rtc["p50"] - ws["p50"], 1) if ws and rtc else None
    wire = out["webrtc"].get("v2v_wire_less_worker_ms")
    out["diff_wire_less_worker_p50_ms"] = round(wire["p50"] - ws["p50"], 1) if ws and wire else None
    return out


def part_v2v(prompts: int, runs: int, log) -> dict[str, Any]:
    from core.cascade.tts import PiperTts

    tts = PiperTts()
    texts = [SPOKEN_PROMPTS[i % len(SPOKEN_PROMPTS)] for i in range(prompts)]
    speech = {p: np.frombuffer(b"".join(tts.synthesize(p, deterministic=True)), dtype="<i2") for p in set(texts)}
    del tts
    result: dict[str, Any] = {"prompts": prompts, "max_output_tokens": MAX_TOKENS, "runs": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()

            async def go() -> None:
                log("v2v warm-up (one turn per transport)")
                await v2v_run(launched, speech, 1, log)
                for k in range(runs):
                    la = loadavg()
                    log(f"v2v run {k + 1}/{runs}, load average {la}")
                    t0 = time.monotonic()
                    rows = await v2v_run(launched, speech, prompts, log)
                    result["runs"].append({"loadavg_start": la, "loadavg_end": loadavg(),
                                           "wall_s": round(time.monotonic() - t0, 1),
                                           "summary": v2v_summary(rows), "rows": rows})

            asyncio.run(go())
    runs_s = [r["summary"] for r in result["runs"]]

    def med(path: tuple[str, ...]) -> dict[str, Any]:
        vals = []
        for s in runs_s:
            v: Any = s
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            vals.append(v)
        return median_spread(vals)

    result["median"] = {
        "diff_p50_ms": med(("diff_p50_ms",)), "diff_wire_p50_ms": med(("diff_wire_p50_ms",)),
        "diff_less_worker_p50_ms": med(("diff_less_worker_p50_ms",)),
        "diff_wire_less_worker_p50_ms": med(("diff_wire_less_worker_p50_ms",)),
        **{f"{t}_{k}_{q}": med((t, k, q)) for t in ("websocket", "webrtc") for k in V2V_KEYS for q in ("p50", "p90")
           if any(k in s[t] for s in runs_s)},
        "underruns": {t: sum(s[t]["underruns"] for s in runs_s) for t in ("websocket", "webrtc")},
        "webrtc_wire_underruns": sum(s["webrtc"].get("wire_underruns", 0) for s in runs_s),
        "webrtc_dry_frames": sum(s["webrtc"].get("dry_frames", 0) for s in runs_s),
    }
    return result


# ---------------------------------------------------------------------------------------- transport


PROBE_PERIOD_S = 0.49  # a burst every 0.49 s: its onset falls anywhere in a 20 or 40 ms chunk
PROBE_LOUD = 3000  # bench/synthetic_worker.py's LOUD


def probe_pattern(seconds: float) -> tuple[np.ndarray, list[int]]:
    """Quiet with a 100 ms voiced burst every PROBE_PERIOD_S; the index of each burst's first loud sample."""
    from bench.synthetic_worker import voiced_deltas

    burst = np.frombuffer(base64.b64decode(voiced_deltas()[0]), dtype="<i2")
    period = int(PROBE_PERIOD_S * RATE)
    pcm = np.zeros(int(seconds * RATE) + period, "<i2")
    onsets = []
    for start in range(period - burst.size, int(seconds * RATE), period):
        pcm[start:start + burst.size] = burst
        onsets.append(start + int(np.flatnonzero(np.abs(burst.astype(np.int32)) > PROBE_LOUD)[0]))
    return pcm, onsets


def one_way(sent: list[float], got: list[float], window: float = PROBE_PERIOD_S) -> list[float]:
    """For each time in ``sent``, ms to the first in ``got`` at or after it (within ``window`` s)."""
    out, j = [], 0
    got = sorted(got)
    for t in sorted(sent):
        while j < len(got) and got[j] < t:
            j += 1
        if j < len(got) and got[j] - t <= window:
            out.append(round((got[j] - t) * 1000, 2))
    return out


async def ws_probe(ws_url: str, pcm: np.ndarray, onsets: list[int]) -> dict[str, list[float]]:
    import websockets

    step = int(WS_CHUNK_S * RATE)
    heard: list[float] = []
    sent: list[float] = []
    first_delta: dict[str, float] = {}
    async with websockets.connect(ws_url, max_size=None, compression=None, ping_interval=None) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        t0 = time.monotonic()

        async def send() -> None:
            for i in range(0, pcm.size, step):
                await asyncio.sleep(max(0.0, t0 + (i + step) / RATE - time.monotonic()))
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(pcm[i:i + step].tobytes()).decode()}))

        sender = asyncio.create_task(send())
        try:
            while not sender.done():
                try:
                    ev = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                except TimeoutError:
                    continue
                now = time.monotonic()
                if ev["type"] == "bench.heard":
                    heard.append(ev["t"])
                elif ev["type"] == "bench.sent":
                    sent.append(ev["t"])
                elif ev["type"] == "response.output_audio.delta":
                    first_delta.setdefault(ev["response_id"], now)
        finally:
            sender.cancel()
    spoken = [t0 + i / RATE for i in onsets]
    return {"in": one_way(spoken, heard), "out": one_way(sent, list(first_delta.values()))}


async def rtc_probe(base_url: str, pcm: np.ndarray, onsets: list[int]) -> dict[str, list[float]]:
    SpeechMic, _ = make_tracks()
    mic = SpeechMic()
    call = BenchCall(base_url, mic)
    try:
        await call.connect()
        await call.until("session.created", timeout=30)
        mic.say(pcm.tobytes())
        await asyncio.sleep(pcm.size / RATE + 0.3)
        spoken = [mic.speech_t0 + i / RATE for i in onsets]
        heard = [e["t"] for _, e in call.events if e["type"] == "bench.heard"]
        sent = [e["t"] for _, e in call.events if e["type"] == "bench.sent"]
        track = [t for t, reply in call.frames if reply]
        return {"in": one_way(spoken, heard), "out_wire": one_way(sent, call.wire),
                "out": one_way(sent, track)}
    finally:
        await call.hangup()
        await call.close()


def part_transport(seconds: float, runs: int, log) -> dict[str, Any]:
    """One-way latencies, mouth -> worker and worker -> ear, for both transports at once, against the
    synthetic worker's probes (no model: the transports alone); ``runs`` times on one stack."""
    from launcher.processes import free_port, spawn_module, stop

    pcm, onsets = probe_pattern(seconds)
    port = free_port()
    result: dict[str, Any] = {"seconds": seconds, "loadavg_start": loadavg(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        worker = spawn_module("bench.synthetic_worker", "--port", str(port), "--probe", "--slots", "2",
                              log=Path(tmp) / "synthetic.log")
        try:
            with Launched(Path(tmp), workers=0, worker_urls=[f"http://127.0.0.1:{port}"], slots=2,
                          recording={"enabled": False},
                          auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
                launched.wait_gateway("gateway")

                async def go() -> None:
                    await rtc_probe(launched.url, pcm[: RATE], onsets[:1])  # warm-up: aiortc's import
                    for _ in range(runs):
                        la = loadavg()
                        ws, rtc = await asyncio.gather(ws_probe(launched.ws_url + "?record=false", pcm, onsets),
                                                       rtc_probe(launched.url, pcm, onsets))
                        run = {"loadavg_start": la,
                               "websocket": {"in_ms": summary(ws["in"]), "out_ms": summary(ws["out"])},
                               "webrtc": {"in_ms": summary(rtc["in"]), "out_wire_ms": summary(rtc["out_wire"]),
                                          "out_ms": summary(rtc["out"])}}
                        w, c = run["websocket"], run["webrtc"]
                        d_in = c["in_ms"]["p50"] - w["in_ms"]["p50"]
                        d_out = c["out_ms"]["p50"] - w["out_ms"]["p50"]
                        d_wire = c["out_wire_ms"]["p50"] - w["out_ms"]["p50"]
                        run["added_p50_ms"] = {"in": round(d_in, 1), "out": round(d_out, 1),
                                               "out_wire": round(d_wire, 1), "turn": round(d_in + d_out, 1),
                                               "turn_wire": round(d_in + d_wire, 1)}
                        result["runs"].append(run)
                        a = run["added_p50_ms"]
                        log(f"  transport: in WS {w['in_ms']['p50']} / RTC {c['in_ms']['p50']} ms, out WS "
                            f"{w['out_ms']['p50']} / RTC wire {c['out_wire_ms']['p50']} / track {c['out_ms']['p50']}"
                            f" ms: a turn +{a['turn']} ms (+{a['turn_wire']} at the wire)")

                asyncio.run(go())
        finally:
            stop(worker)
    result["loadavg_end"] = loadavg()
    keys = {"websocket": ("in_ms", "out_ms"), "webrtc": ("in_ms", "out_wire_ms", "out_ms")}
    for t, legs in keys.items():  # each figure: the median of the runs' p50 / p90 (with spread)
        result[t] = {leg: {q: median_spread([round(run[t][leg][q], 1) for run in result["runs"]]) for q in ("p50", "p90")}
                     | {"n": sum(run[t][leg]["n"] for run in result["runs"])} for leg in legs}
    result["added_p50_ms"] = {k: median_spread([run["added_p50_ms"][k] for run in result["runs"]])
                              for k in ("in", "out", "out_wire", "turn", "turn_wire")}
    return result


# ---------------------------------------------------------------------------------------- load


def _cpu(proc: psutil.Process) -> tuple[float, float]:
    """(all threads, the main thread: the event loop) CPU seconds of a process."""
    total = proc.cpu_times()
    main = next((t for t in proc.threads() if t.id == proc.pid), None)
    return total.user + total.system, (main.user_time + main.system_time) if main else float("nan")


def calls_open(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    line = next((x for x in text.splitlines() if x.startswith("omniduplex_webrtc_calls ")), None)
    return float(line.split()[1]) if line else 0.0


async def load_level(launched: Launched, k: int, hold: float, packets: list[bytes], procs: dict[str, psutil.Process],
                     log) -> dict[str, Any]:
    _, PacketMic = make_tracks()
    calls = [BenchCall(launched.url, PacketMic(packets)) for _ in range(k)]
    out: dict[str, Any] = {"calls": k, "loadavg_start": loadavg()}
    try:
        gate = asyncio.Semaphore(5)

        async def up(call: BenchCall) -> None:
            async with gate:
                await call.connect()
            await call.until("session.created", timeout=60)

        await asyncio.gather(*(up(c) for c in calls))
        deadline = time.monotonic() + 10
        while not all(c.first_reply_frame() for c in calls) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        out["playing"] = sum(bool(c.first_reply_frame()) for c in calls)
        out["connect_ms"] = summary([c.connect_ms for c in calls]) if calls else None
        await asyncio.sleep(2.0 if k else 0.5)  # settle: the connects' CPU out of the window
        out["calls_open_at_gateway"] = await asyncio.to_thread(calls_open, launched.url)
        probe = subprocess.Popen([sys.executable, "-c", PROBE, f"{launched.url}/health", str(hold), str(PROBE_EVERY_S)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            await asyncio.to_thread(probe.stdout.readline)  # "ready"
            before = {name: _cpu(p) for name, p in procs.items()}
            t0 = time.monotonic()
            probe.stdin.write("go\n")
            probe.stdin.flush()
            await asyncio.sleep(hold)
            after = {name: _cpu(p) for name, p in procs.items()}
            t1 = time.monotonic()
            health = json.loads((await asyncio.to_thread(probe.communicate, None, hold + 30))[0].strip().splitlines()[-1])
        finally:
            if probe.poll() is None:
                probe.kill()
        span = t1 - t0
        for name in procs:
            total = (after[name][0] - before[name][0]) / span * 100
            out[f"{name}_cpu_pct"] = round(total, 2)
            if name == "gateway":
                loop = (after[name][1] - before[name][1]) / span * 100
                out["gateway_loop_cpu_pct"] = round(loop, 2)
                out["gateway_off_loop_cpu_pct"] = round(total - loop, 2)
        h = np.asarray(health)
        out["health_ms"] = {"p50": round(float(np.percentile(h, 50)), 2), "p99": round(float(np.percentile(h, 99)), 2),
                            "max": round(float(h.max()), 2), "n": int(h.size)}
        plays = [c.playout(t0, t1) for c in calls]  # steady state: the window, not the connects before it
        out["underruns"] = sum(p["underruns"] for p in plays)
        out["calls_with_underruns"] = sum(p["underruns"] > 0 for p in plays)
        out["worst_late_ms"] = max((p["worst_late_ms"] for p in plays), default=0.0)
        out["dry_frames"] = sum(p["dry_frames"] for p in plays)
        out["wire_underruns"] = sum(p["wire_underruns"] for p in plays)
        out["late_at_s"] = sorted(round(t - t0, 2) for p in plays for t in p["late_at"])
        out["wire_worst_late_ms"] = max((p["wire_worst_late_ms"] for p in plays), default=0.0)
        out["reply_s"] = round(sum(p["reply_frames"] for p in plays) * FRAME_S, 1)
        out["window_s"] = round(span, 2)
    finally:
        await asyncio.gather(*(c.hangup() for c in calls), return_exceptions=True)
        await asyncio.gather(*(c.close() for c in calls), return_exceptions=True)
    out["loadavg_end"] = loadavg()
    deadline = time.monotonic() + 15
    while await asyncio.to_thread(calls_open, launched.url) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    log(f"  {k:3d} calls: gateway {out['gateway_cpu_pct']:.1f} % of a core (loop {out['gateway_loop_cpu_pct']:.1f}), "
        f"/health p50 {out['health_ms']['p50']} p99 {out['health_ms']['p99']} ms, underruns {out['underruns']}, "
        f"dry frames {out['dry_frames']}, clients {out['bench_cpu_pct']:.0f} %, load {out['loadavg_end']}")
    return out


def part_load(levels: list[int], hold: float, log) -> dict[str, Any]:
    from bench.synthetic_worker import voiced_deltas
    from launcher.processes import free_port, spawn_module, stop

    top = max(levels)
    mic_pcm = b"".join(base64.b64decode(d) for d in voiced_deltas(2))
    packets = opus_packets(mic_pcm)
    port = free_port()
    result: dict[str, Any] = {"hold_s": hold, "levels": []}
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        worker = spawn_module("bench.synthetic_worker", "--port", str(port), "--paced", "--slots", str(top),
                              log=Path(tmp) / "synthetic.log")
        try:
            with Launched(Path(tmp), workers=0, worker_urls=[f"http://127.0.0.1:{port}"], slots=top,
                          recording={"enabled": False}, queue={"capacity": 1000},
                          auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
                launched.wait_gateway("gateway")
                procs = {"gateway": psutil.Process(launched.pid("gateway")), "worker": psutil.Process(worker.pid),
                         "bench": psutil.Process()}

                async def go() -> None:
                    log("load warm-up (one call: aiortc is imported with the first)")
                    await load_level(launched, 1, 1.0, packets, procs, lambda _line: None)
                    for k in [0, *levels]:
                        result["levels"].append(await load_level(launched, k, hold, packets, procs, log))

                asyncio.run(go())
        finally:
            stop(worker)
    idle = result["levels"][0]
    for lv in result["levels"][1:]:
        k = lv["calls"]
        lv["per_call_pct"] = round(lv["gateway_cpu_pct"] / k, 2)
        lv["per_call_above_idle_pct"] = round((lv["gateway_cpu_pct"] - idle["gateway_cpu_pct"]) / k, 2)
        lv["loop_per_call_pct"] = round((lv["gateway_loop_cpu_pct"] - idle["gateway_loop_cpu_pct"]) / k, 2)
    return result


# ---------------------------------------------------------------------------------------- CLI


def run_cli(args) -> dict[str, Any]:
    raise_fd_limit()
    parts = getattr(args, "parts", None) or ["v2v", "transport", "load"]
    runs = max(1, getattr(args, "runs", None) or 3)
    levels = sorted(set(getattr(args, "calls", None) or [1, 5, 10, MANY_CALLS]))

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result: dict[str, Any] = {"cpus": os.cpu_count(), "loadavg_start": loadavg()}
    log(f"load average {result['loadavg_start']} on {os.cpu_count()} CPUs")
    if "v2v" in parts:
        result["v2v"] = part_v2v(args.prompts, runs, log)
    if "transport" in parts:
        result["transport"] = part_transport(max(2.0, getattr(args, "seconds", None) or 10.0), runs, log)
    if "load" in parts:
        result["load"] = part_load(levels, args.hold, log)
    result["loadavg_end"] = loadavg()
    result["goals"] = goals(result)
    return result


def goals(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "v2v" in r:
        d = r["v2v"]["median"]["diff_p50_ms"]["median"]
        out["v2v"] = {"value": d, "mark": goal_mark(d, V2V_GOAL_MS, f"WebRTC p50 - WebSocket p50 <= {V2V_GOAL_MS:g} ms")}
    if "transport" in r:
        turn, wire = (r["transport"]["added_p50_ms"][k]["median"] for k in ("turn", "turn_wire"))
        out["transport"] = {"value": turn, "mark": goal_mark(turn, V2V_GOAL_MS, f"a turn <= +{V2V_GOAL_MS:g} ms"),
                            "wire": wire, "wire_mark": goal_mark(wire, V2V_GOAL_MS, f"at the wire <= +{V2V_GOAL_MS:g} ms")}
    if "load" in r:
        levels = r["load"]["levels"][1:]
        worst = max((lv["per_call_pct"] for lv in levels), default=None)
        out["cpu"] = {"value": worst, "mark": goal_mark(worst, CPU_GOAL_PCT, f"<= {CPU_GOAL_PCT:g} % of a core per call")}
        many = next((lv for lv in levels if lv["calls"] >= MANY_CALLS), None)
        u = None if many is None else many["underruns"] + (many["calls"] - many["playing"])
        out["underruns"] = {"value": u, "calls": many["calls"] if many else None,
                            "mark": goal_mark(u, UNDERRUN_GOAL, f"{MANY_CALLS} calls, {UNDERRUN_GOAL} underruns")}
    return out


def _f(x: Any, digits: int = 0) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def report(r: dict[str, Any]) -> str:
    lines = [f"{r['cpus']} CPUs; load average {r['loadavg_start']} at the start, {r['loadavg_end']} at the end."]
    g = r.get("goals", {})
    if "v2v" in r:
        v = r["v2v"]
        lines += ["", f"V2V, {v['prompts']} spoken prompts per transport per run, {len(v['runs'])} run(s), "
                      "ms from the last voiced sample:", "",
                  "| run | load avg | WebSocket p50 / p90 | WebRTC p50 / p90 (track) | WebRTC wire p50 | "
                  "diff p50 (track / wire) | underruns WS / RTC | errors |", "|---|---|---|---|---|---|---|---|"]
        for k, run in enumerate(v["runs"]):
            s = run["summary"]
            ws, rtc = s["websocket"], s["webrtc"]
            p = lambda x, key, q: _f((x.get(key) or {}).get(q))  # noqa: E731
            lines.append(f"| {k + 1} | {run['loadavg_start'][0]} | {p(ws, 'v2v_ms', 'p50')} / {p(ws, 'v2v_ms', 'p90')} | "
                         f"{p(rtc, 'v2v_ms', 'p50')} / {p(rtc, 'v2v_ms', 'p90')} | {p(rtc, 'v2v_wire_ms', 'p50')} | "
                         f"{_f(s['diff_p50_ms'])} / {_f(s['diff_wire_p50_ms'])} | {ws['underruns']} / {rtc['underruns']} | "
                         f"{ws['errors'] + rtc['errors']} |")
        m = v["median"]
        t = lambda key: m.get(key, {}).get("text", "-")  # noqa: E731
        lines += ["", "Median of the runs (min-max), ms from the last voiced sample:", "",
                  "| leg | WebSocket p50 | WebRTC p50 |", "|---|---|---|",
                  f"| speech_stopped arrives (VAD's 500 ms included) | {t('websocket_speech_stopped_ms_p50')} | "
                  f"{t('webrtc_speech_stopped_ms_p50')} |",
                  f"| response.created arrives | {t('websocket_response_created_ms_p50')} | "
                  f"{t('webrtc_response_created_ms_p50')} |",
                  f"| the worker's own V2V (speech stopped -> first audio, `session.metrics`; not from the mark) | "
                  f"{t('websocket_worker_v2v_ms_p50')} | {t('webrtc_worker_v2v_ms_p50')} |",
                  f"| output_audio_buffer.started arrives (gateway's track took the first frame) | | "
                  f"{t('webrtc_started_ms_p50')} |",
                  f"| first reply packet on the wire | | {t('webrtc_v2v_wire_ms_p50')} |",
                  f"| **V2V**: first reply audio playable (WS: delta; RTC: decoded frame off the track) | "
                  f"{t('websocket_v2v_ms_p50')} | {t('webrtc_v2v_ms_p50')} |",
                  f"| V2V p90 | {t('websocket_v2v_ms_p90')} | {t('webrtc_v2v_ms_p90')} |",
                  f"| V2V less the worker's own V2V (input, VAD's 500 ms, output: no model time) | "
                  f"{t('websocket_v2v_less_worker_ms_p50')} | {t('webrtc_v2v_less_worker_ms_p50')} (wire "
                  f"{t('webrtc_v2v_wire_less_worker_ms_p50')}) |",
                  "", f"WebRTC - WebSocket, V2V p50: {m['diff_p50_ms']['text']} ms (at the wire: "
                      f"{m['diff_wire_p50_ms']['text']} ms); {g['v2v']['mark']}. Less the worker's own V2V "
                      f"(the model's time taken out of each turn): {t('diff_less_worker_p50_ms')} ms (at the "
                      f"wire: {t('diff_wire_less_worker_p50_ms')} ms). Underruns: WebSocket "
                      f"{m['underruns']['websocket']}, WebRTC {m['underruns']['webrtc']} (on the wire "
                      f"{m.get('webrtc_wire_underruns', '-')}; idle frames inside replies: "
                      f"{m.get('webrtc_dry_frames', '-')}), all runs."]
    if "transport" in r:
        tp = r["transport"]
        ws, rtc, a = tp["websocket"], tp["webrtc"], tp["added_p50_ms"]
        q = lambda x: f"{x['p50']['text']} / {x['p90']['text']} (n={x['n']})"  # noqa: E731
        a = {k: v["text"] for k, v in a.items()}
        lines += ["", f"One-way latency of each transport alone (synthetic worker's probes, {len(tp['runs'])} run(s) of "
                      f"{tp['seconds']:g} s, both transports at once; load average {tp['loadavg_start'][0]} at the "
                      f"start); ms p50 / p90, the median of the runs (min-max):", "",
                  "| leg | WebSocket | WebRTC | WebRTC added (p50) |", "|---|---|---|---|",
                  f"| in: sample spoken -> its chunk at the worker | {q(ws['in_ms'])} | {q(rtc['in_ms'])} | {a['in']} |",
                  f"| out: delta sent by the worker -> first reply packet at the client (wire) | {q(ws['out_ms'])} | "
                  f"{q(rtc['out_wire_ms'])} | {a['out_wire']} |",
                  f"| out: ... -> decoded frame off the client's track | {q(ws['out_ms'])} | {q(rtc['out_ms'])} | "
                  f"{a['out']} |",
                  f"| **a turn (in + out)** | | | **{a['turn']}** (at the wire {a['turn_wire']}) |",
                  "", f"Transport alone: {g['transport']['mark']}; {g['transport']['wire_mark']}."]
    if "load" in r:
        ld = r["load"]
        lines += ["", f"Gateway CPU and the event loop with K live calls (synthetic worker, both directions "
                      f"flowing), {ld['hold_s']:g} s windows; CPU in % of one core:", "",
                  "| calls | gateway CPU | per call (above idle) | event loop thread | off the loop | /health p50 / p99 / max ms "
                  "| underruns (calls) | worst late ms | on the wire: underruns, worst late ms | dry frames | reply s "
                  "| clients CPU | worker CPU | load avg |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for lv in ld["levels"]:
            k = lv["calls"]
            per = f"{lv['per_call_pct']:.2f} ({lv['per_call_above_idle_pct']:.2f})" if k else "-"
            h = lv["health_ms"]
            playing = "" if lv.get("playing", k) == k else f" ({lv['playing']} playing)"
            lines.append(f"| {k}{playing} | "
                         f"{lv['gateway_cpu_pct']:.1f} | {per} | {lv['gateway_loop_cpu_pct']:.1f} | "
                         f"{lv['gateway_off_loop_cpu_pct']:.1f} | {h['p50']} / {h['p99']} / {h['max']} | "
                         f"{lv['underruns']} ({lv['calls_with_underruns']}) | {lv['worst_late_ms']} | "
                         f"{lv.get('wire_underruns', '-')}, {lv.get('wire_worst_late_ms', '-')} | {lv['dry_frames']} | "
                         f"{lv['reply_s']} | {lv['bench_cpu_pct']:.0f} | {lv['worker_cpu_pct']:.0f} | "
                         f"{lv['loadavg_end'][0]} |")
        lines += ["", f"Goals: {g['cpu']['mark']} (worst level: {_f(g['cpu']['value'], 2)} %); "
                      f"{g['underruns']['mark']}."]
    return "\n".join(lines)
