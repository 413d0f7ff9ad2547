"""The bench's WebRTC client (an ``aiortc`` peer standing in for a browser): a microphone track
of 20 ms frames, the ``oai-events`` data channel, and the reply's packets and decoded frames timed
as they arrive (idle frames told from reply audio by their payload)."""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import re
import time
from typing import Any

import httpx

from bench.calls.common import FRAME, FRAME_S, RATE, EventLog
from bench.serving import UNDERRUN_MS, continuity


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
            self.period_s = FRAME_S

        async def _next(self) -> int:
            """Wait for the next frame's time; its number."""
            if self.readyState != "live":
                raise MediaStreamError
            if self._t0 is None:
                self._t0 = time.monotonic()
            n = self._n
            self._n += 1
            wait = self._t0 + (n + 1) * self.period_s - time.monotonic()
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
        """A continuous microphone of pre-encoded Opus packets (no encoding in the bench's process):
        20 ms ones, or the length the answer's ``a=ptime`` asks for, as a browser's encoder takes it
        (``follow_ptime``; ``packets`` holds each length the bench may be asked for)."""

        def __init__(self, packets: dict[int, list[bytes]]) -> None:
            super().__init__()
            self._by_ms = packets
            self._packets = packets[20]

        def follow_ptime(self, ptime: int) -> None:
            ms = min((ms for ms in self._by_ms if ms >= ptime), default=20)
            self._packets, self.period_s = self._by_ms[ms], ms / 1000

        async def recv(self):
            n = await self._next()
            packet = av.Packet(self._packets[n % len(self._packets)])
            packet.pts, packet.time_base = round(n * self.period_s * 48000), fractions.Fraction(1, 48000)
            return packet

    return SpeechMic, PacketMic


def opus_packets(pcm: bytes, rate: int = RATE, ms: int = 20) -> list[bytes]:
    """PCM16 mono -> ``ms`` Opus packets (48 kHz, voip, 32 kbit/s), as a browser's microphone sends."""
    import av

    codec = av.CodecContext.create("libopus", "w")
    codec.bit_rate, codec.format, codec.layout, codec.sample_rate = 32000, "s16", "mono", 48000
    codec.time_base = fractions.Fraction(1, 48000)
    codec.options = {"application": "voip", "frame_duration": str(ms)}
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


class BenchCall(EventLog):
    """One call from the client's side: offer, data channel events with arrival times, and the
    inbound track's frames classified as reply audio or the gateway's idle frames."""

    def __init__(self, base_url: str, mic, query: str = "?record=false&app=bench") -> None:
        super().__init__()
        _, _, RTCConfiguration, RTCPeerConnection, _, _ = _media_classes()
        self.base_url, self.query = base_url, query
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = mic
        self.pc.addTrack(mic)
        self.dc = self.pc.createDataChannel("oai-events")
        self.wire: list[tuple[float, float]] = []  # (arrival, seconds of audio) of each reply RTP packet
        # (when it plays, is reply audio) of each 20 ms of the decoded frames: a 40 ms frame is two,
        # the second 20 ms after its arrival, so the figures count audio whatever the packet length.
        self.frames: list[tuple[float, bool]] = []
        self._reply_ts: set[int] = set()
        self.call_id: str | None = None
        self.connect_ms: float | None = None
        self._opened = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.dc.on("open", self._opened.set)
        self.dc.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        receiver = self.pc.getTransceivers()[0].receiver
        handle = receiver._handle_rtp_packet

        from gateway.realtime.webrtc.microphone import opus_packet_ms
        from gateway.realtime.webrtc.tracks import IDLE_PACKETS

        async def hooked(packet, arrival_time_ms: int) -> None:
            if packet.payload not in IDLE_PACKETS:
                self.wire.append((time.monotonic(), opus_packet_ms(packet.payload) / 1000))
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
        ptime = re.search(r"^a=ptime:(\d+)", answer.text, re.M)
        if ptime and hasattr(self.mic, "follow_ptime"):
            self.mic.follow_ptime(int(ptime.group(1)))
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer.text, type="answer"))
        await asyncio.wait_for(self._opened.wait(), timeout)
        self.connect_ms = (time.monotonic() - t) * 1000

    def _on_message(self, message: str | bytes) -> None:
        self.note(json.loads(message))

    def send(self, event: dict) -> None:
        self.dc.send(json.dumps(event))

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
            now = time.monotonic()
            for k in range(max(1, round(frame.samples / frame.sample_rate / FRAME_S))):
                self.frames.append((now + k * FRAME_S, reply))

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
        wire_underruns, wire_worst = continuity([(t, s) for t, s in self.wire if start <= t <= end])
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
