"""The full-duplex sets (bench/sets/duplex.py, bench/duplex_set.py): dev and eval apart in phrasing
and voices, the eval voices new to the project, espeak-ng synthesis, and the bench's keyword match."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from bench import duplex_set
from bench.duplex import Player, mentions
from bench.duplex_set import KINDS, RATE, items, synthesize
from bench.sets import normalise
from bench.sets import duplex as sets
from bench.sets.turns import VOICES as TURN_VOICES
from tests.support.stack import ROOT


def _base_and_variant(voice: str) -> tuple[str, str]:
    base, _, variant = voice.partition("+")
    return base, variant


def test_each_part_has_every_kind_in_size():
    for part in ("dev", "dev2", "eval"):
        p = sets.PARTS[part]
        assert len(p["complete"]) >= 12 and len(p["paused"]) >= 12, part
        assert 16 <= len(p["backchannel"]) <= 24 and 16 <= len(p["interruption"]) <= 24, part
        assert len(p["prompts"]) >= 3 and len(p["voices"]) >= 4, part
        assert all(0.6 <= pause <= 1.5 for _, pause, _ in p["paused"]), part
        assert all(1 <= len(expect) <= 4 and all(k == k.lower() for k in expect) for _, expect in p["interruption"])
        for kind in KINDS:  # round-robin: each kind uses every voice of its part, and only those
            assert {it.voice for it in items(part, kind)} == {v for v, _, _ in p["voices"]}, (part, kind)
    parts = ("dev", "dev2", "eval")
    assert len({it.id for part in parts for it in items(part)}) == sum(len(items(p)) for p in parts)
    assert [it.kind for it in items("dev", limit=1)] == list(KINDS)


def test_dev_and_eval_share_no_phrasing_and_no_voice():
    """The held-out eval (issue 69) shares no phrasing with either dev part, and its voice family
    (base voices and variants) is in no other part or set: issue 34's eval, now ``dev2``, and
    issue 47's fresh voices are dev, and so are the turn sets' voices."""
    dev = {normalise(t) for part in sets.DEV_PARTS for t in sets.texts(part)}
    held_out = {normalise(t) for t in sets.texts("eval")}
    assert not dev & held_out, sorted(dev & held_out)
    dev_voices = {v for part in sets.DEV_PARTS for v, _, _ in sets.PARTS[part]["voices"]}
    dev_voices |= {v for v, _, _ in TURN_VOICES}
    eval_voices = {v for v, _, _ in sets.PARTS["eval"]["voices"]}
    assert not dev_voices & eval_voices
    # no base voice or variant in common either (en-us+f5 vs en-us+m5 would be half the same voice)
    dev_parts = {x for v in dev_voices for x in _base_and_variant(v) if x}
    eval_parts = {x for v in eval_voices for x in _base_and_variant(v) if x}
    assert not dev_parts & eval_parts, dev_parts & eval_parts
    dev2_parts = {x for v, _, _ in sets.DEV2_VOICES for x in _base_and_variant(v) if x}
    assert not {x for v in sets.DEV_VOICES for x in _base_and_variant(v[0]) if x} & dev2_parts
    assert sets.DEV_BACKCHANNELS is sets.PARTS["dev"]["backchannel"]
    assert sets.DEV_INTERRUPTIONS is sets.PARTS["dev"]["interruption"]


def test_the_more_overlap_phrasings_are_dev_and_hold_no_eval_item():
    """``bench/sets/overlap_phrasings.py`` is fitted on (the overlap judge's meaning): no phrasing
    may hold an eval item of any set, or a near-copy of one, or be found in one (issue 69: both
    ways, filler swaps included), and none repeats a dev phrase."""
    from bench.sets import Item, Text, all_sets
    from bench.sets.overlap_phrasings import (DEV_MORE_BACKCHANNELS, DEV_MORE_CUTINS, DEV_MORE_FLOOR_QUESTIONS,
                                              DEV_VARIED_BACKCHANNELS, DEV_VARIED_FLOOR_TAKERS)

    more = [*DEV_MORE_BACKCHANNELS, *DEV_MORE_CUTINS, *DEV_MORE_FLOOR_QUESTIONS, *DEV_VARIED_BACKCHANNELS,
            *DEV_VARIED_FLOOR_TAKERS]
    assert len(DEV_MORE_BACKCHANNELS) >= 80 and len(DEV_MORE_CUTINS) >= 80
    assert len(DEV_VARIED_BACKCHANNELS) >= 120 and len(DEV_VARIED_FLOOR_TAKERS) >= 90
    assert len({normalise(t) for t in more}) == len(more)
    assert not {normalise(t) for t in more} & {normalise(t) for t in sets.texts("dev")}
    held_out = [item for s in all_sets() for item in s.eval]
    assert not [t for t in more if any(Item.of(item).found_in(Text(t)) for item in held_out)]
    # the other way: a phrasing that is an eval item but for filler ("Right, enough of that." for
    # "Okay, enough of that."); a short phrasing inside a longer item ("Oh." in "Oh, where ...?") is not
    assert not [t for t in more if any(Item.of(t).copy_in(Text(item)) for item in held_out)]


def test_the_more_turn_phrasings_are_dev_and_apart_from_every_eval_item():
    """``bench/sets/turn_phrasings.py`` is fitted on (semantic_vad's completeness reading): no
    phrasing holds an eval item or is found in one (an eval item's opening), and none repeats."""
    from bench.sets import Item, Text, all_sets
    from bench.sets.turn_phrasings import DEV_MORE_COMPLETE, DEV_MORE_OPEN

    more = [*DEV_MORE_COMPLETE, *DEV_MORE_OPEN]
    assert len(DEV_MORE_COMPLETE) >= 80 and len(DEV_MORE_OPEN) >= 80
    assert len({normalise(t) for t in more}) == len(more)
    held_out = [item for s in all_sets() for item in s.eval]
    assert not [t for t in more if any(Item.of(item).found_in(Text(t)) for item in held_out)]
    # the other way: a phrasing that is an eval item but for filler ("Right, enough of that." for
    # "Okay, enough of that."); a short phrasing inside a longer item ("Oh." in "Oh, where ...?") is not
    assert not [t for t in more if any(Item.of(t).copy_in(Text(item)) for item in held_out)]


def test_the_fresh_voices_are_in_no_other_part_nor_the_turn_sets():
    """Issue 47's last check spoke that eval's phrases (``dev2`` now) in voices made only for it."""
    fresh = {x for v, _, _ in sets.FRESH_VOICES for x in _base_and_variant(v) if x}
    used = {x for vs in (sets.DEV_VOICES, sets.DEV2_VOICES, sets.PARTS["eval"]["voices"], TURN_VOICES)
            for v, _, _ in vs for x in _base_and_variant(v) if x}
    assert not fresh & used, fresh & used
    assert {it.text for it in items("fresh")} == {it.text for it in items("dev2")}


def test_eval_voices_are_used_nowhere_else():
    """No eval voice, base voice or variant in the turn sets or in any file outside bench/sets and docs."""
    turn_parts = {x for v, _, _ in TURN_VOICES for x in _base_and_variant(v) if x}
    eval_parts = {x for v, _, _ in sets.PARTS["eval"]["voices"] for x in _base_and_variant(v) if x}
    assert not turn_parts & eval_parts, turn_parts & eval_parts
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    found = []
    for f in files:
        if f.startswith(("bench/sets/", "docs/")) or not (ROOT / f).is_file():
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for voice, _, _ in sets.PARTS["eval"]["voices"]:
            base, variant = _base_and_variant(voice)
            # a base voice as its own word (not inside a longer name); a variant only after a "+"
            if re.search(rf"(?<![\w-]){re.escape(base)}(?![\w-])", text) or (
                    variant and re.search(rf"\+{re.escape(variant)}(?!\w)", text)):
                found.append(f"{f}: {voice}")
    assert not found, found


@pytest.mark.skipif(duplex_set.espeak_path() is None, reason="espeak-ng not installed")
def test_synthesis_marks_the_onset_pause_and_last_voiced_sample(tmp_path):
    for item in (items("dev", "backchannel")[0], items("dev", "paused")[0], items("dev", "interruption")[1]):
        clip = synthesize(item, cache_dir=tmp_path)
        assert clip.pcm.dtype == np.int16 and clip.pcm.size > RATE // 5
        assert abs(int(clip.pcm[0])) > duplex_set.VOICED and abs(int(clip.pcm[clip.last_voiced])) > duplex_set.VOICED
        if item.kind == "paused":
            gap = clip.pcm[clip.pause_start:clip.resume]
            assert abs(gap.size / RATE - item.pause_s) < 0.01 and not gap.any()
        assert np.array_equal(synthesize(item, cache_dir=tmp_path).pcm, clip.pcm)  # from the cache
    assert item.expect and all(isinstance(k, str) for k in item.expect)


def test_relevance_is_a_word_beginning_with_a_keyword():
    assert mentions("Penguins live in the south.", ["penguin"])
    assert mentions("It has seven colours.", ["colo"]) and mentions("COLORS!", ["colo"])
    assert not mentions("Emperor's new clothes", ["penguin", "colo"])
    assert not mentions("a spaceship", ["ship"])  # the beginning of a word, not inside one


def test_playback_plays_in_real_time_and_clears():
    p = Player()
    p.add(10.0, "a", "r", 1.0)
    p.add(10.2, "a", "r", 1.0)  # queued behind the first second
    assert p.end == 12.0 and abs(p.played_s("a", 11.5) - 1.5) < 1e-9
    assert p.playing(11.5) == ("a", "r") and p.playing(12.5, {"r"}) is None
    assert p.playing(12.5) == ("a", "r")  # ran dry, but more of the response is to come: still its turn
    p.add(13.0, "a", "r", 1.0)
    assert abs(p.gaps_s - 1.0) < 1e-9 and abs(p.played_s("a", 13.5) - 2.5) < 1e-9
    p.clear(13.5)
    assert abs(p.played_s("a", 20.0) - 2.5) < 1e-9 and p.playing(13.6, {"r"}) is None


def test_report_marks_each_goal_from_synthetic_trials():
    """Rows as the trials write them (no run): the summary's shares and latencies, the goals met or
    missed on the median, a kind not run shown as n/a."""
    from bench.duplex import goals, median_modes, report, summarise

    def rows(mode: str, latency: list[float], takeovers: int, false: int, seen: list[float],
             cutins_taken: int) -> list[dict]:
        out = [{"mode": mode, "kind": "complete", "latency_ms": v, "answered": True, "stopped_ms": v - 150,
                "audio_after_stop_ms": 150.0} for v in latency]
        out += [{"mode": mode, "kind": "paused", "takeover": i < takeovers} for i in range(10)]
        out += [{"mode": mode, "kind": "backchannel", "status": "ok", "false_interruption": i < false,
                 "story_lost": i < false, "story_back_ms": None} for i in range(10)]
        out += [{"mode": mode, "kind": "cutin", "status": "ok", "taken": i < cutins_taken, "seen_ms": 150.0}
                for i in range(4)]
        out += [{"mode": mode, "kind": "backchannel", "status": "short"}]  # not a trial
        out += [{"mode": mode, "kind": "interruption", "status": "ok", "detected": True, "seen_ms": v,
                 "stop_ms": v + 5, "answer_ms": 900.0, "relevant": v < 300} for v in seen]
        return out

    all_rows = (rows("server_vad", [600, 600, 620, 640], 10, 3, [500, 520], 3)
                + rows("semantic_vad", [400, 420, 440, 1400], 1, 1, [200, 240], 4))
    modes = ["server_vad", "semantic_vad", "no_backchannel_rule"]
    per = summarise(all_rows, modes, {})
    sem = per["semantic_vad"]
    assert sem["pause_takeover"] == 0.1 and sem["bc_false_rate"] == 0.1 and sem["backchannels"] == 10
    assert sem["bc_not_trials"] == 1 and sem["seen_p50_ms"] == 220 and sem["relevance"] == 1.0
    assert sem["ratio_to_server_vad"] == round(430 / 610, 3)
    assert sem["stopped_p50_ms"] == 280 and sem["audio_after_stop_p50_ms"] == 150
    median = median_modes([per, per])
    marks = {g["goal"]: g["mark"] for g in goals(median)}
    assert marks["server_vad: backchannels taken as interruptions <= 10%"] == "**missed**"
    assert marks["semantic_vad: backchannels taken as interruptions <= 10%"] == "met"
    assert marks["semantic_vad: interruption seen p50 <= 250 ms after the onset"] == "met"
    assert marks["server_vad: interruption seen p50 <= 250 ms after the onset"] == "**missed**"
    assert marks["semantic_vad: pause takeover <= 0.1"] == "met"
    assert marks["semantic_vad: turn latency p50 <= 0.75x server_vad's"] == "met"
    assert marks["semantic_vad: turn latency p90 <= 1000 ms"] == "**missed**"  # p90 pulled up by 1400 ms
    assert marks["semantic_vad: backchannels that lose the story or get an answer <= 10%"] == "met"
    assert marks["server_vad: backchannels that lose the story or get an answer <= 10%"] == "**missed**"
    assert marks["semantic_vad: short cut-ins taken as turns 100%"] == "met"
    assert marks["server_vad: short cut-ins taken as turns 100%"] == "**missed**"  # 3 of 4
    text = report({"set": "dev", "items": {"complete": 4}, "modes": modes, "median": median,
                   "goals": goals(median), "runs": [{"wall_s": 1.0, "modes": per}, {"wall_s": 1.0, "modes": per}]})
    row = next(line for line in text.splitlines() if line.startswith("| no_backchannel_rule"))
    assert row.count("n/a") == 8  # nothing run in that mode: every column n/a (the ratio "-")
    assert "| semantic_vad | 10 % | 430 / 1112 | 0.70 | 100 % | 220 / 236 |" in text
    assert "| semantic_vad | 280 | 150 |" in text  # where the turn's time went


def test_a_reply_begun_over_the_rest_of_a_paused_turn_is_a_takeover():
    """semantic_vad may end a paused turn at a pause inside its second half and talk over the rest:
    the listener is cut off as surely as in the pause, so the pause takeover counts it, and the
    report says how many were in the pause alone (Full-Duplex-Bench's rate) and which complete
    turns were talked over."""
    from bench.duplex import goals, median_modes, report, summarise

    rows = [{"mode": "semantic_vad", "kind": "complete", "latency_ms": 400.0, "answered": True,
             "early_audio": i == 0} for i in range(4)]
    rows += [{"mode": "semantic_vad", "kind": "paused", "takeover": i < 2, "takeover_in_pause": i < 1}
             for i in range(10)]
    per = summarise(rows, ["semantic_vad"], {})
    assert per["semantic_vad"]["pause_takeover"] == 0.2
    median = median_modes([per])
    marks = {g["goal"]: g["mark"] for g in goals(median)}
    assert marks["semantic_vad: pause takeover <= 0.1"] == "**missed**"
    text = report({"set": "dev", "items": {"complete": 4, "paused": 10}, "modes": ["semantic_vad"], "median": median,
                   "goals": goals(median), "runs": [{"wall_s": 1.0, "modes": per}]})
    assert "in the pause alone (Full-Duplex-Bench's rate): semantic_vad 1 of 10" in text
    assert re.search(r"\| semantic_vad \| - \| - \| 1 \|", text)  # one complete turn talked over


def test_a_paused_clip_is_taken_over_in_its_pause_or_over_its_rest_and_answered_only_after_its_end():
    """The trial's own reading of when replies began (seconds): the pause from 1.0 to 2.0 s, the
    voice's end at 3.5 s. A reply begun inside the rest of the turn (2.4 s, as semantic_vad did on a
    fresh voice's second half) is a takeover and no latency, never a negative one."""
    from bench.duplex.trials import paused_outcome

    answered = paused_outcome({"a": 3.6}, {"a": 3.9}, 1.0, 2.0, 3.5)
    assert answered == {"takeover": False, "takeover_in_pause": False, "takeover_ms_after_pause": None,
                        "answered": True, "latency_ms": 400.0}
    in_pause = paused_outcome({"a": 1.5, "b": 3.6}, {"a": 1.7, "b": 3.8}, 1.0, 2.0, 3.5)
    assert in_pause["takeover"] and in_pause["takeover_in_pause"] and in_pause["takeover_ms_after_pause"] == 500.0
    assert in_pause["latency_ms"] == 300.0  # the answer after the user finished still counts
    over_rest = paused_outcome({"a": 2.4}, {"a": 2.6}, 1.0, 2.0, 3.5)
    assert over_rest["takeover"] and not over_rest["takeover_in_pause"]
    assert over_rest["takeover_ms_after_pause"] == 1400.0
    assert not over_rest["answered"] and over_rest["latency_ms"] is None
