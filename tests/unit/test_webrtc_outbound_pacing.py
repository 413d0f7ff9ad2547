"""The call's outbound track: while idle, a reply's first frame leaves when it is queued, not at
the next 20 ms tick, and the ticks go on from it (``tracks.OutboundAudioTrack``). Found by
``python -m bench calls`` (issue 33): the first reply packet reached the client ~14 ms after the
worker's delta, ~10 ms of it waiting for the tick."""

from __future__ import annotations

import asyncio
import time

from gateway.realtime.webrtc.playback import Playback
from gateway.realtime.webrtc.tracks import OPUS_SILENCE, OutboundAudioTrack

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
        assert abs(track._start + track._ticks * 0.02 - time.monotonic()) < 0.1  # re-phased on this frame
        t = time.monotonic()
        second = await track.recv()  # then paced: the next tick, ~20 ms on
        assert bytes(second) == FRAME and 0.005 < time.monotonic() - t < 0.5
        assert second.pts - first.pts == 960  # RTP time still steps one 20 ms frame
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


async def test_an_idle_track_still_ticks_every_20_ms():
    playback = Playback(lambda _e: None, lambda _e: None)
    track = OutboundAudioTrack(playback)
    try:
        await track.recv()
        t = time.monotonic()
        for _ in range(5):
            assert bytes(await track.recv()) == OPUS_SILENCE
        assert 0.08 <= time.monotonic() - t < 1.0
        assert track._waiter is None  # no wake-up left armed
    finally:
        track.stop()
