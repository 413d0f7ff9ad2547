"""A call's media: the microphone and camera tracks in, the reply's audio track out.

- In, audio: aiortc decodes the Opus track in its receiver's own thread and hands us 20 ms frames
  (48 kHz stereo). They become ``input_audio_buffer.append`` events of PCM16 mono at the session's
  24 kHz, two frames (40 ms) an event, as our pages send them. Resampling, base64 and the JSON
  text are made in a small executor of our own, never on the event loop.
- In, camera: frames are sampled at most ``limits.max_frame_rate`` a second, scaled to at most
  640 px wide and JPEG-encoded (PyAV's mjpeg) in the same executor, and sent as the
  ``input_image_buffer.append`` events the WebSocket pages send.
- Out: ``OutboundAudioTrack`` hands aiortc one 20 ms frame (PCM16 mono 24 kHz) in real time,
  taken from ``Playback`` (silence when nothing is queued); aiortc resamples and encodes it to
  Opus in its default executor. What it took is what was played.

Media arriving before the worker's ``session.created`` (the call is still queued) is read and
dropped: nothing is sent while queued, as on our pages.
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

from gateway.realtime.webrtc.playback import OUTPUT_RATE, Playback

log = logging.getLogger(__name__)

INPUT_RATE = 24000  # the session's input rate on a call (channel.py keeps it so)
APPEND_S = 0.04
FRAME_SAMPLES = OUTPUT_RATE // 50  # 20 ms
MAX_FRAME_WIDTH = 640
RESYNC_S = 0.2  # the loop stalled this long: restart the clock rather than burst to catch up
TIME_BASE = fractions.Fraction(1, OUTPUT_RATE)

# Codec work of every call (resampling, base64, JPEG): two threads, apart from the default executor
# where aiortc encodes Opus, so neither waits behind the other.
MEDIA_EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="webrtc-media")

Deliver = Callable[[str], None]
Live = Callable[[], bool]


class OutboundAudioTrack(MediaStreamTrack):
    """The reply's audio, paced in real time: 20 ms a frame, silence when idle."""

    kind = "audio"

    def __init__(self, playback: Playback) -> None:
        super().__init__()
        self.playback = playback
        self._start: float | None = None
        self._pts = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self._pts += FRAME_SAMPLES
            wait = self._start + self._pts / OUTPUT_RATE - now
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -RESYNC_S:
                self._start = now - self._pts / OUTPUT_RATE
        pcm = self.playback.pull(FRAME_SAMPLES)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm + bytes(FRAME_SAMPLES * 2 - len(pcm)))
        frame.pts = self._pts
        frame.sample_rate = OUTPUT_RATE
        frame.time_base = TIME_BASE
        return frame


def _append_event(resampler: av.AudioResampler, frames: list[av.AudioFrame]) -> str:
    pcm = b"".join(bytes(out.planes[0])[: out.samples * 2] for f in frames for out in resampler.resample(f))
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode("ascii")},
                      separators=(",", ":"))


async def pump_audio(track: MediaStreamTrack, deliver: Deliver, live: Live) -> None:
    """Microphone frames -> ``input_audio_buffer.append`` events, until the track ends."""
    loop = asyncio.get_running_loop()
    resampler = av.AudioResampler(format="s16", layout="mono", rate=INPUT_RATE)
    batch: list[av.AudioFrame] = []
    samples = 0
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if not live():
            batch.clear()
            samples = 0
            continue
        batch.append(frame)
        samples += frame.samples
        if samples >= APPEND_S * (frame.sample_rate or 48000):
            frames, batch, samples = batch, [], 0
            deliver(await loop.run_in_executor(MEDIA_EXECUTOR, _append_event, resampler, frames))


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
            text = await loop.run_in_executor(MEDIA_EXECUTOR, _jpeg_event, frame)
        except (av.FFmpegError, ValueError) as exc:
            log.warning("camera frame not encoded: %s", exc)
            continue
        if text is not None:
            deliver(text)
