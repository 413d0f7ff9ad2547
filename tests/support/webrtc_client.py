"""A browser stand-in for WebRTC calls: a real ``aiortc`` peer with a microphone track, the
``oai-events`` data channel, and the reply's audio recorded off the inbound track.

- ``Microphone``: an audio track that plays what the test queues (PCM16 mono 24 kHz), silence
  otherwise, paced in real time as a browser's microphone is.
- ``CallClient``: posts the offer (``application/sdp`` or the ``openai`` SDK's multipart), keeps
  every data-channel event (each validated against the ``openai`` package's types, as the Agents
  SDK does), records what arrives on the inbound track (24 kHz mono, with the time of each frame),
  and hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import time

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from core.openai_events import validation_error
from core.protocol import EXTENSION_EVENTS

RATE = 24000
FRAME = RATE // 50

# A minimal offer as a browser makes it (audio with Opus, the data channel, ICE and DTLS
# parameters), for the tests that need one without a peer behind it.
OFFER = "\r\n".join([
    "v=0", "o=- 1 2 IN IP4 127.0.0.1", "s=-", "t=0 0", "a=group:BUNDLE 0 1", "a=msid-semantic:WMS *",
    "m=audio 9 UDP/TLS/RTP/SAVPF 111 0", "c=IN IP4 0.0.0.0", "a=mid:0", "a=sendrecv", "a=rtcp-mux",
    "a=rtpmap:111 opus/48000/2", "a=rtpmap:0 PCMU/8000",
    "a=ice-ufrag:abcd", "a=ice-pwd:0123456789abcdefghijkl",
    "a=fingerprint:sha-256 " + ":".join(["AB"] * 32), "a=setup:actpass",
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel", "c=IN IP4 0.0.0.0", "a=mid:1", "a=sctp-port:5000",
    "a=ice-ufrag:abcd", "a=ice-pwd:0123456789abcdefghijkl",
    "a=fingerprint:sha-256 " + ":".join(["AB"] * 32), "a=setup:actpass", "",
])


class Microphone(MediaStreamTrack):
    """What the test queues with ``say``, then silence; 20 ms frames in real time."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pcm = bytearray()
        self._start: float | None = None
        self._pts = 0

    def say(self, pcm: bytes) -> float:
        """Queue PCM16 mono 24 kHz; returns how long until it has all been sent (s)."""
        self._pcm += pcm
        return len(self._pcm) / 2 / RATE

    @property
    def speaking(self) -> bool:
        return bool(self._pcm)

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            self._pts += FRAME
            wait = self._start + self._pts / RATE - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        chunk = bytes(self._pcm[: FRAME * 2])
        del self._pcm[: FRAME * 2]
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk + bytes(FRAME * 2 - len(chunk)))
        frame.pts, frame.sample_rate, frame.time_base = self._pts, RATE, fractions.Fraction(1, RATE)
        return frame


class CallClient:
    """One call from the client's side."""

    def __init__(self, base_url: str, query: str = "", headers: dict[str, str] | None = None,
                 extensions: frozenset[str] = frozenset(), video: MediaStreamTrack | None = None) -> None:
        self.base_url, self.query, self.headers = base_url, query, dict(headers or {})
        self.extensions = extensions
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = Microphone()
        self.pc.addTrack(self.mic)
        if video is not None:
            self.pc.addTrack(video)
        self.dc = self.pc.createDataChannel("oai-events")
        self.events: list[dict] = []
        self.invalid: list[str] = []
        self.audio = bytearray()  # what the inbound track played, 24 kHz mono
        self.frames: list[tuple[float, float, int, float]] = []  # (arrival time, rms, peak, ms) of each frame
        self.call_id: str | None = None
        self.answer_headers: httpx.Headers | None = None
        self._new_event = asyncio.Event()
        self._opened = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.dc.on("open", self._opened.set)
        self.dc.on("message", self._on_message)
        self.pc.on("track", self._on_track)

    # ------------------------------------------------------------------ connect

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def post(self, sdp: str | None = None, session: dict | None = None) -> httpx.Response:
        """POST the offer (multipart when ``session`` is given); the raw answer."""
        sdp = sdp if sdp is not None else await self.offer()
        url = f"{self.base_url}/v1/realtime/calls{self.query}"
        async with httpx.AsyncClient(timeout=30) as http:
            if session is None:
                return await http.post(url, content=sdp, headers={"Content-Type": "application/sdp", **self.headers})
            files = {"sdp": (None, sdp.encode(), "application/sdp"),
                     "session": (None, json.dumps(session).encode(), "application/json")}
            return await http.post(url, files=files, headers=self.headers)

    async def connect(self, session: dict | None = None, timeout: float = 20.0) -> None:
        """Offer, answer, and wait for the data channel to open."""
        answer = await self.post(session=session)
        assert answer.status_code == 201, answer.text
        assert answer.headers["content-type"].startswith("application/sdp")
        location = answer.headers["location"]
        assert location.startswith("/v1/realtime/calls/rtc_"), location
        self.call_id = location.rsplit("/", 1)[-1]
        self.answer_headers = answer.headers
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer.text, type="answer"))
        await asyncio.wait_for(self._opened.wait(), timeout)

    # ------------------------------------------------------------------ events

    def _on_message(self, message: str | bytes) -> None:
        event = json.loads(message)
        if event["type"] not in EXTENSION_EVENTS or event["type"] not in self.extensions:
            why = validation_error(event, beta=False)
            if why:
                self.invalid.append(f"{event['type']}: {why}")
        self.events.append({**event, "_t": time.monotonic()})
        self._new_event.set()

    def send(self, kind: str, **fields) -> None:
        self.dc.send(json.dumps({"type": kind, **fields}))

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    async def until(self, kind: str, count: int = 1, timeout: float = 60.0, since: int = 0) -> dict:
        """The ``count``-th event of ``kind`` (from index ``since``); AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events[since:] if e["type"] == kind]
            if len(found) >= count:
                return found[count - 1]
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [e["type"] for e in self.events[-15:]]
                raise AssertionError(f"no {kind} (x{count}) within {timeout}s; saw {seen}")
            self._new_event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_event.wait(), left)

    # ------------------------------------------------------------------ the reply's audio

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._record(track)))

    async def _record(self, track: MediaStreamTrack) -> None:
        resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            for out in resampler.resample(frame):
                pcm = out.to_ndarray().astype(np.int16).tobytes()
                self.audio += pcm
                samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32)
                if len(samples):
                    self.frames.append((time.monotonic(), float(np.sqrt(np.mean(samples ** 2))),
                                        int(np.abs(samples).max()), len(samples) * 1000 / RATE))

    def loud_ms(self, since: float = 0.0, threshold: float = 300.0) -> int:
        """How much of the inbound audio after ``since`` (monotonic time) was not silence (ms)."""
        return round(sum(ms for t, rms, _, ms in self.frames if t >= since and rms > threshold))

    def played_ms(self, start: float, end: float) -> int:
        """Audio that arrived between two times (ms), counting frames of anything but digital
        silence: the gateway's idle frames decode to exact zeros, a reply's quietest to more."""
        return round(sum(ms for t, _, peak, ms in self.frames if start <= t <= end and peak > 0))

    # ------------------------------------------------------------------ end

    async def hangup(self) -> httpx.Response:
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(f"{self.base_url}/v1/realtime/calls/{self.call_id}/hangup", headers=self.headers)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()
