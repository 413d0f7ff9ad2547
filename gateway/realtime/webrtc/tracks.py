"""A call's media: the microphone and camera tracks in, the reply's audio track out.

- In, audio: ``microphone.py`` (Opus packets as they arrive, decoded 40 ms at a time in
  ``AUDIO_EXECUTOR`` into binary microphone frames for the worker).
- In, camera: frames are sampled at most ``limits.max_frame_rate`` a second, scaled to at most
  640 px wide and JPEG-encoded (PyAV's mjpeg) in the same executor, and sent as the
  ``input_image_buffer.append`` events the WebSocket pages send.
- Out: the reply's PCM is encoded to Opus (24 kHz mono, 40 kbit/s: speech) by ``OpusFramer`` in
  that executor as its deltas arrive, and ``OutboundAudioTrack`` hands aiortc one encoded 40 ms
  frame every 40 ms (``webrtc.reply_packet_ms``: 40 or 20), taken from ``Playback``, or a constant
  silence frame when nothing is queued
  (a reply's first frame leaves as soon as it is queued, and the ticks go on from it). aiortc only
  packetises encoded frames (no executor hop, no level metering per frame on the loop, no encoding
  at all while silent): what the track took is what was played.

Camera frames before the worker's ``session.created`` are dropped (the microphone's are kept:
``channel.deliver_microphone``).
"""

from __future__ import annotations

import asyncio
import base64
import fractions
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from gateway.realtime.webrtc.playback import FRAME_MS, OUTPUT_RATE, PACKET_MS, Playback

log = logging.getLogger(__name__)

MAX_FRAME_WIDTH = 640
RESYNC_S = 0.2  # the loop stalled this long: restart the clock rather than burst to catch up
OPUS_RATE = 48000  # Opus's RTP clock, whatever the encoded rate
OPUS_TIME_BASE = fractions.Fraction(1, OPUS_RATE)
# The encoder's target by packet length: at one target it spends fewer bits on 40 ms packets (28.5
# against 31.2 kbit/s on a Piper reply at 32k, PESQ-WB 4.34 against 4.49); at 40k they carry 35.6
# kbit/s and 4.46 (``python -m bench.calls.opus_quality``).
OPUS_BITRATE = {20: 32000, 40: 40000}
# libopus's complexity for the reply (FFmpeg's default is 10). 5 is what WebRTC's own encoder uses on
# phones. Chosen with 20 ms packets at 32 kbit/s (~155 us a frame against ~200 us, PESQ-WB 4.49
# against 4.52), when encoding was a fifth of a playing call's CPU at 20 calls; with 40 ms packets
# at 40 kbit/s: 185 against 231 us per 20 ms of audio, 4.46 against 4.47 (``bench.calls.opus_quality``).
OPUS_COMPLEXITY = 5


def opus_silence(frame_ms: int) -> bytes:
    """A packet of ``frame_ms`` (20 or 40) of silence, what the track sends while nothing plays,
    without encoding anything: one 20 ms CELT frame (TOC 0xf8, two bytes of payload), or two of
    equal size (code 1 in the TOC, then each frame's two bytes)."""
    return b"\xf8\xff\xfe" if frame_ms == 20 else bytes([0xF8 | 1]) + b"\xff\xfe" * 2


OPUS_SILENCE = opus_silence(FRAME_MS)
IDLE_PACKETS = frozenset(opus_silence(ms) for ms in PACKET_MS)  # a listener tells them from a reply

# Codec work of every call, off the event loop. The audio (the microphone's Opus decoding and
# resampling, the reply's Opus encoding: ~1 % of a core a call) runs on one thread: one that stays
# busy costs less than two taking turns (fewer wake-ups, warm caches: -6.5 % of the gateway's CPU at
# 10 calls, side by side), and its queue keeps each call's pieces in order. The camera's JPEG
# (milliseconds a frame) has a thread of its own, so it never holds a microphone frame up.
AUDIO_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webrtc-audio")
CAMERA_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webrtc-camera")

Deliver = Callable[[str], None]  # a JSON event for the worker
Live = Callable[[], bool]


class OpusFramer:
    """A reply's PCM16 (24 kHz mono) -> Opus frames of ``frame_ms``, one encoder per call so the
    stream is continuous. Blocking: called in ``AUDIO_EXECUTOR``, in the order the channel submits them (the
    one audio thread: a call's pieces never run at once). A partial frame waits for the next delta
    of the same response, and is padded with silence at the response's end (``flush``)."""

    def __init__(self, frame_ms: int = FRAME_MS) -> None:
        self.frame_samples = OUTPUT_RATE * frame_ms // 1000
        codec = av.CodecContext.create("libopus", "w")
        codec.bit_rate = OPUS_BITRATE[frame_ms]
        codec.format, codec.layout, codec.sample_rate = "s16", "mono", OUTPUT_RATE
        codec.time_base = fractions.Fraction(1, OUTPUT_RATE)
        codec.options = {"application": "voip", "compression_level": str(OPUS_COMPLEXITY),
                         "frame_duration": str(frame_ms)}
        self.codec = codec
        self._rest = b""
        self._response = ""
        self._pts = 0

    def encode(self, response_id: str, pcm: bytes) -> list[bytes]:
        if response_id != self._response:
            self._response, self._rest = response_id, b""  # a cut reply's tail is not played
        data = self._rest + pcm
        whole = len(data) // (self.frame_samples * 2) * self.frame_samples * 2
        self._rest = data[whole:]
        return self._frames(data[:whole])

    def flush(self, response_id: str) -> list[bytes]:
        if response_id != self._response or not self._rest:
            return []
        data, self._rest = self._rest, b""
        return self._frames(data + bytes(self.frame_samples * 2 - len(data)))

    def _frames(self, pcm: bytes) -> list[bytes]:
        out: list[bytes] = []
        step = self.frame_samples * 2
        for start in range(0, len(pcm), step):
            frame = av.AudioFrame(format="s16", layout="mono", samples=self.frame_samples)
            frame.planes[0].update(pcm[start:start + step])
            frame.sample_rate, frame.time_base, frame.pts = OUTPUT_RATE, self.codec.time_base, self._pts
            self._pts += self.frame_samples
            out += [bytes(packet) for packet in self.codec.encode(frame)]
        return out


class OutboundAudioTrack(MediaStreamTrack):
    """The reply's audio, paced in real time: one encoded Opus frame a tick (``Playback.frame_ms``),
    silence when idle. While idle, a reply's first frame does not wait for the next tick: it leaves
    as soon as it is queued, and the ticks go on from there (the RTP timestamps still step a frame)."""

    kind = "audio"

    def __init__(self, playback: Playback) -> None:
        super().__init__()
        self.playback = playback
        playback.on_push = self._wake
        self.frame_s = playback.frame_ms / 1000
        self._silence = opus_silence(playback.frame_ms)
        self._rtp_step = OPUS_RATE * playback.frame_ms // 1000
        self._start: float | None = None
        self._ticks = 0
        self._waiter: asyncio.Future[bool] | None = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(True)

    async def _idle_wait(self, wait: float) -> bool:
        """Sleep ``wait`` s, or less if audio is queued meanwhile (then True)."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(wait, lambda: waiter.done() or waiter.set_result(False))
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def recv(self) -> av.Packet:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self._ticks += 1
            wait = self._start + self._ticks * self.frame_s - now
            if wait > 0:
                if self.playback.buffered:
                    await asyncio.sleep(wait)
                elif await self._idle_wait(wait):
                    self._start = time.monotonic() - self._ticks * self.frame_s  # this frame's tick is now
            elif wait < -RESYNC_S:
                self._start = now - self._ticks * self.frame_s
        packet = av.Packet(self.playback.pull() or self._silence)
        packet.pts = self._ticks * self._rtp_step
        packet.time_base = OPUS_TIME_BASE
        return packet


def _jpeg_event(frame: av.VideoFrame) -> str | None:
    width = min(MAX_FRAME_WIDTH, frame.width) // 2 * 2
    height = max(2, round(frame.height * width / max(1, frame.width)) // 2 * 2)
    codec = av.CodecContext.create("mjpeg", "w")
    codec.width, codec.height, codec.pix_fmt = width, height, "yuvj420p"
    codec.time_base = fractions.Fraction(1, 1)
    small = frame.reformat(width=width, height=height, format="yuvj420p")
    small.pts = 0
    packets = codec.encode(small) + codec.encode(None)
    if not packets:
        return None
    image = base64.b64encode(bytes(packets[0])).decode("ascii")
    return json.dumps({"type": "input_image_buffer.append", "image": image}, separators=(",", ":"))


async def pump_video(track: MediaStreamTrack, deliver: Deliver, live: Live, max_fps: float) -> None:
    """Camera frames -> at most ``max_fps`` ``input_image_buffer.append`` events a second."""
    loop = asyncio.get_running_loop()
    interval = 1.0 / max_fps
    next_at = 0.0
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        now = time.monotonic()
        if not live() or now < next_at:
            continue  # read and dropped: a track not read piles frames up
        next_at = now + interval
        try:
            text = await loop.run_in_executor(CAMERA_EXECUTOR, _jpeg_event, frame)
        except (av.FFmpegError, ValueError) as exc:
            log.warning("camera frame not encoded: %s", exc)
            continue
        if text is not None:
            deliver(text)
