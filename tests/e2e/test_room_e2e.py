"""Full duplex in a room (issue 70), over the WebSocket with the session's defaults: a client that
plays the reply aloud and whose microphone hears it back (``bench/duplex/room.py``: the played
audio, delayed, through a synthetic room) and the room's noise. The story plays on through its
own echo; a listener's "Stop." over that echo still cuts it; noise alone never stops it. The
figures (rates over many trials) are the bench's: ``python -m bench duplex --room``."""

from __future__ import annotations

import asyncio

import pytest

from bench.duplex.room import noise, voice_level
from bench.duplex.room_trials import Spec, room_trial
from bench.duplex_set import items, prompts, synthesize

WINDOW_S = 8.0  # of story heard per trial here (the bench's is 20 s)


@pytest.fixture(scope="module")
def url(stack):
    return f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-cascade&extensions=all&record=false"


@pytest.fixture(scope="module")
def voice_rms():
    return voice_level([synthesize(it).pcm for it in items("dev", "complete", 3)])


def run(url: str, spec: Spec, voice_rms: float, noises=None) -> dict:
    return asyncio.run(room_trial(url, spec, {}, voice_rms, noises or {}, window_s=WINDOW_S))


def test_a_story_with_its_own_echo_in_the_microphone_plays_on(url, voice_rms):
    spec = Spec("story, echo -6 dB", "story", prompts("dev")[0], echo_db=-6.0, delay_ms=150, rt60_s=0.25)
    r = run(url, spec, voice_rms)
    assert r["status"] == "ok" and r["echo_heard_db"] is not None and r["echo_heard_db"] > -8  # the echo was loud
    assert r["self_interruptions"] == 0, r["stops"]
    assert r["played_s"] >= 0.95 * (WINDOW_S - r["underrun_s"] - r["ended_s"])


def test_a_stop_over_the_echo_cuts_the_story(url, voice_rms):
    stop = next(it for it in items("dev", "cutin") if it.text == "Stop.")
    spec = Spec("cut-in, echo -10 dB", "cutin", prompts("dev")[1], echo_db=-10.0, delay_ms=80,
                clip=synthesize(stop), at_s=3.0)
    r = run(url, spec, voice_rms)
    assert r["status"] == "ok" and r["playing_at_onset"], r
    assert r["taken"], (r["verdict"], r["backchannels"], r["user"])
    assert r["last_played_ms"] is not None and r["last_played_ms"] < 1500  # the listener heard it stop


@pytest.mark.parametrize("kind", ["keyboard", "fan"])
def test_noise_alone_never_stops_the_story(url, voice_rms, kind):
    loop = noise(kind)
    spec = Spec(f"story, {kind} 10 dB SNR", "story", prompts("dev")[2], noise=kind, snr_db=10.0)
    r = run(url, spec, voice_rms, {kind: loop})
    assert r["status"] == "ok" and r["noise_dbfs"] is not None
    assert r["self_interruptions"] == 0, r["stops"]
