"""The call's outbound track: while idle, a reply's first frame leaves when it is queued, not at
the next tick, and the ticks go on from it (``tracks.OutboundAudioTrack``). Found by
``python -m bench calls`` (issue 33): the first reply packet reached the client ~14 ms after the
worker's delta, ~10 ms of it waiting for the tick. And each packet lasts as long as its step in
RTP time (a browser plays what the packet holds, and places it by its timestamp)."""

from __future__ import annotations

import asyncio
import time

import av
import numpy as np

import pytest

from gateway.realtime.webrtc.playback import FRAME_MS, PACKET_MS, Playback
from gateway.realtime.webrtc.tracks import OPUS_RATE, OPUS_SILENCE, OpusFramer, OutboundAudioTrack, opus_silence

FRAME = b"\xfc\x01\x02"  # any Opus payload other than the idle frame


async def test_a_replys_first_frame_does_not_wait_for_the_tick():
    playback = Playback(lambda _e: None, lambda _e: None)
    track = OutboundAudioTrack(playback)
    try:
        assert bytes(await track.recv()) == OPUS_SILENCE  # the clock starts
        track._start += 5.0  # the next tick is 5 s away: only the push can end the wait
        asyncio.get_running_loop().call_later(0.01, playback.push, "resp_1", "item_1", [FRAME, FRAME])
        t = time.monotonic()
        first = await asyncio.wait_for(track.recv(), 2.0)
        assert bytes(first) == FRAME and time.monotonic() - t < 1.0
        assert abs(track._start + track._ticks * track.frame_s - time.monotonic()) < 0.1  # re-phased on this frame
        t = time.monotonic()
        second = await track.recv()  # then paced: the next tick, one frame on
        assert bytes(second) == FRAME and 0.005 < time.monotonic() - t < 0.5
        assert second.pts - first.pts == OPUS_RATE * FRAME_MS // 1000  # RTP time still steps one frame
        assert bytes(await track.recv()) == OPUS_SILENCE
    finally:
        track.stop()


async def test_a_replys_first_frame_from_the_audio_thread_does_not_wait_for_the_tick():
    playback = Playback(lambda _e: None, lambda _e: None)
    track = OutboundAudioTrack(playback)
    loop = asyncio.get_running_loop()
    try:
        assert bytes(await track.recv()) == OPUS_SILENCE  # the clock starts
        track._start += 5.0  # the next tick is 5 s away: only the wake-up can end the wait
        loop.call_later(0.01, lambda: loop.run_in_executor(None, playback.push_encoded, loop, "resp_1", "item_1",
                                                           [FRAME, FRAME]))
        t = time.monotonic()
        assert bytes(await asyncio.wait_for(track.recv(), 2.0)) == FRAME and time.monotonic() - t < 1.0
        assert bytes(await track.recv()) == FRAME  # the second at the next tick
    finally:
        track.stop()


async def test_an_idle_track_still_ticks_every_frame():
    playback = Playback(lambda _e: None, lambda _e: None)
    track = OutboundAudioTrack(playback)
    try:
        await track.recv()
        t = time.monotonic()
        for _ in range(5):
            assert bytes(await track.recv()) == OPUS_SILENCE
        assert 5 * track.frame_s <= time.monotonic() - t < 1.0
        assert track._waiter is None  # no wake-up left armed
    finally:
        track.stop()


@pytest.mark.parametrize("frame_ms", PACKET_MS)
async def test_every_packet_lasts_its_step_in_rtp_time(frame_ms):
    """The idle packet and the reply's encoded ones decode to one frame's length each (40 ms by
    default: what the call's answer asks of the microphone too; 20 where ``webrtc.reply_packet_ms``
    says), the idle one to digital silence; the track steps RTP time by as much."""
    decoder = av.CodecContext.create("libopus", "r")
    step = OPUS_RATE * frame_ms // 1000

    def decoded(packet: bytes) -> list[av.AudioFrame]:
        return decoder.decode(av.Packet(packet))

    silence = decoded(opus_silence(frame_ms))
    assert sum(f.samples for f in silence) == step and not any(f.to_ndarray().any() for f in silence)
    t = np.arange(24000 // 2) / 24000
    tone = (np.sin(2 * np.pi * 300 * t) * 8000).astype("<i2").tobytes()  # 500 ms
    packets = OpusFramer(frame_ms).encode("resp_1", tone)
    assert len(packets) == 500 // frame_ms
    assert all(sum(f.samples for f in decoded(p)) == step for p in packets)
    playback = Playback(lambda _e: None, lambda _e: None, frame_ms)
    playback.push("resp_1", "item_1", packets[:2])
    track = OutboundAudioTrack(playback)
    try:
        sent = [await track.recv() for _ in range(3)]
        assert [bytes(p) for p in sent] == [*packets[:2], opus_silence(frame_ms)]
        assert [b.pts - a.pts for a, b in zip(sent, sent[1:])] == [step, step]
    finally:
        track.stop()
