"""The spoken turn-taking set (bench/turn_set.py): its size and shape, and espeak-ng synthesis."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from bench import turn_set
from bench.turn_set import RATE, items, longest_silence, synthesize


def test_set_has_enough_items_of_each_kind():
    complete, paused = items("complete"), items("paused")
    assert len(complete) >= 20 and len(paused) >= 20
    assert len({it.id for it in turn_set.ITEMS}) == len(turn_set.ITEMS)
    assert all(len(it.parts) == 1 and it.pause_s == 0 for it in complete)
    assert all(len(it.parts) == 2 and 0.6 <= it.pause_s <= 1.5 for it in paused)
    assert max(it.pause_s for it in paused) - min(it.pause_s for it in paused) >= 0.6  # spread out
    assert len({it.parts[0].split()[-1].strip(",") for it in paused}) >= 10  # not all "... of"
    for kind in (complete, paused):  # round-robin voices: each kind uses all of them
        assert {it.voice for it in kind} == {v for v, _, _ in turn_set.VOICES}
    assert len(items("paused", limit=3)) == 3 and len(items(limit=2)) == 4


@pytest.mark.skipif(turn_set.espeak_path() is None, reason="espeak-ng not installed")
def test_synthesis_gives_pcm16_with_the_pause_in_place(tmp_path):
    for item in (items("complete")[0], items("paused")[1]):
        clip = synthesize(item, cache_dir=tmp_path)
        assert clip.pcm.dtype == np.int16 and clip.pcm.size > RATE // 2
        assert clip.last_voiced == clip.pcm.size - 1 and abs(int(clip.pcm[clip.last_voiced])) > turn_set.VOICED
        with wave.open(str(clip.path), "rb") as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (RATE, 1, 2)
            assert w.getnframes() == clip.pcm.size
        start, length = longest_silence(clip.pcm)
        if item.kind == "paused":
            assert 0.6 <= length / RATE <= 1.5
            assert (start, start + length) == (clip.pause_start, clip.resume)
            assert abs(length / RATE - item.pause_s) < 0.01
        else:
            assert clip.pause_start is None and length / RATE < 0.6
        again = synthesize(item, cache_dir=tmp_path)  # from the cache, same samples
        assert np.array_equal(again.pcm, clip.pcm) and again.resume == clip.resume
    assert not list(tmp_path.glob(".*"))  # no temp files left behind
