"""``bench duplex --room`` (issue 70): the echo a microphone hears is what the player played,
delayed and scaled as asked, and nothing the client cleared; the made noises hit their SNR and
repeat exactly; the babble reads no item of any set; a scripted story's self-interruptions, the
ones that came back, and the share of it played."""

from __future__ import annotations

import asyncio
import base64
from types import SimpleNamespace

import numpy as np
import pytest

from bench.duplex.client import Player
from bench.duplex.common import CHUNK
from bench.duplex.room import (BABBLE_SENTENCES, NOISES, Echo, RoomMic, at_snr, babble, loudspeaker, noise, rms,
                               room_response)
from bench.duplex.room_report import goals, median_conditions, report, summarise
from bench.duplex import room_figures
from bench.duplex.room_trials import RoomTrial, plan, session_fields
from bench.duplex_set import RATE
from bench.sets import Item, Text, all_sets

T0 = 100.0  # the microphone's first chunk ends here (monotonic seconds)


def _played(seconds: float, seed: int = 1, level: float = 3000.0) -> np.ndarray:
    return np.clip(np.random.default_rng(seed).standard_normal(int(seconds * RATE)) * level, -32768,
                   32767).astype(np.int16)


def _silent(x: np.ndarray) -> bool:
    """Under half an int16 step throughout: what the microphone sends as 0 (the FFT leaves dust)."""
    return x.size == 0 or float(np.max(np.abs(x))) < 0.5


def _heard(echo: Echo, player: Player, seconds: float) -> np.ndarray:
    """What the microphone heard of the echo in consecutive chunks from ``T0 - CHUNK``."""
    n = int(seconds * RATE) // CHUNK
    return np.concatenate([echo.chunk(player, T0 + k * CHUNK / RATE) for k in range(n)])


@pytest.mark.parametrize("level_db, delay_ms", [(-6.0, 40), (-10.0, 150), (-20.0, 300), (-10.0, 220)])
def test_the_echo_is_what_played_delayed_and_at_the_asked_level(level_db, delay_ms):
    pcm = _played(2.0)
    player = Player(keep=True)
    start = T0 - CHUNK / RATE + 0.5  # the loudspeaker starts 0.5 s into the microphone's capture
    player.add(start, "i", "r", pcm.size / RATE, pcm)
    echo = Echo(level_db, delay_ms, 0.25, seed=3)
    heard = _heard(echo, player, 3.5)
    lag = int(round((0.5 + delay_ms / 1000) * RATE))  # the played sample 0 in the microphone's samples
    # the delay: the cross-correlation with what played peaks there (the direct path comes first)
    size = 1 << int(np.ceil(np.log2(heard.size + pcm.size)))
    xc = np.fft.irfft(np.fft.rfft(heard, size) * np.conj(np.fft.rfft(pcm.astype(np.float64), size)), size)
    assert abs(int(np.argmax(xc[:heard.size])) - lag) <= 1
    # the level: over the span the played audio fills (past the room's first 0.3 s)
    span = heard[lag + int(0.3 * RATE):lag + pcm.size]
    got = 20 * np.log10(rms(span) / rms(pcm))
    assert abs(got - level_db) < 1.0, got
    assert _silent(heard[:lag])  # nothing before the loudspeaker's sound reaches the microphone
    assert abs(echo.heard_db() - level_db) < 1.0


def test_nothing_of_a_cleared_segment_is_heard_and_late_audio_is():
    pcm = _played(3.0)
    player = Player(keep=True)
    start = T0 - CHUNK / RATE
    player.add(start, "i", "r", 3.0, pcm)  # three seconds queued
    player.clear(start + 1.0)  # speech_started one second in: the rest is not played
    late = _played(0.4, seed=2)
    player.add(start + 1.5, "i", "r", 0.4, late)  # audio of the cut reply that came after the clear plays
    assert np.array_equal(loudspeaker(player, start, int(3 * RATE))[:RATE], pcm[:RATE])
    dry = loudspeaker(player, start, int(3 * RATE))
    assert not dry[RATE:int(1.5 * RATE)].any() and not dry[int(1.9 * RATE):].any()
    assert np.array_equal(dry[int(1.5 * RATE):int(1.9 * RATE)], late)
    echo = Echo(-10.0, 100, 0.2, seed=1)
    heard = _heard(echo, player, 3.0)
    ring = int((1.0 + 0.1 + 0.2) * RATE)  # the clear, the delay, the room's tail
    assert not _silent(heard[int(1.1 * RATE) - 200:int(1.1 * RATE)])
    assert _silent(heard[ring:int(1.6 * RATE)])  # silent between the clear's ring and the late audio
    assert not _silent(heard[int(1.6 * RATE):int(2.0 * RATE)]) and _silent(heard[int(2.3 * RATE):])


def test_the_room_response_starts_with_the_direct_path_and_has_unit_energy():
    for rt60 in (0.15, 0.3):
        h = room_response(rt60, seed=5)
        assert abs(np.sum(h ** 2) - 1.0) < 1e-9 and np.argmax(np.abs(h)) == 0
        assert h.size == int(rt60 * RATE)
        last = h[-int(0.05 * RATE):]  # the tail has decayed by about 50-60 dB at its end
        assert rms(last) < 1e-2 * abs(h[0])
    assert np.array_equal(room_response(0.2, 1), room_response(0.2, 1))


@pytest.fixture(scope="module")
def noises(tmp_path_factory):
    cache = tmp_path_factory.mktemp("room")
    return {kind: noise(kind, seed=0, seconds=8.0, cache=cache) for kind in NOISES}


@pytest.mark.parametrize("snr", [10.0, 20.0])
def test_each_noise_hits_its_snr_at_the_microphone(noises, snr):
    voice = 3000.0
    for kind, x in noises.items():
        loop = at_snr(x.astype(np.float64), voice, snr)
        mic = RoomMic(None, Player(), noise=loop, noise_at=1234)
        sent = np.concatenate([mic.hear(np.zeros(CHUNK, np.int16), 0.0) for _ in range(x.size // CHUNK)])
        got = 20 * np.log10(voice / rms(sent))
        assert abs(got - snr) < 1.0, (kind, got)
        assert mic.clipped == 0, kind


def test_the_noises_are_made_the_same_each_time_and_differ_by_seed(noises, tmp_path):
    for kind, x in noises.items():
        assert x.dtype == np.float32 and x.size == 8 * RATE and abs(rms(x) - 1.0) < 1e-3, kind
        again = noise(kind, seed=0, seconds=8.0, cache=None if kind == "babble" else tmp_path)
        assert np.array_equal(again, x), kind
        assert not np.array_equal(noise(kind, seed=1, seconds=8.0, cache=None), x), kind
    # the babble from its cache is the babble made
    assert np.array_equal(babble(8.0, 0, cache=tmp_path), babble(8.0, 0, cache=tmp_path))


def test_the_babble_reads_no_item_of_any_set():
    """No item of any set (either part) is a copy in a babble sentence, nor a sentence in an item
    (``Item.copy_in``, the sets' near-copy matcher: "Right." alone is not found in "... jammed again
    right before the deadline"). A failure names the set, part and index, never the item."""
    lines = [(Item.of(s), Text(s)) for s in BABBLE_SENTENCES]
    found = []
    for s in all_sets():
        for part, texts in (("dev", s.dev), ("eval", s.eval)):
            for k, text in enumerate(texts):
                item, t = Item.of(text), Text(text)
                if any(item.copy_in(said) or line.copy_in(t) for line, said in lines):
                    found.append(f"{s.name} {part} #{k}")
    assert not found, found


# ---------------------------------------------------------------------------------- the figures


class _NoSocket:
    async def send(self, _):
        return None


def _delta(rid: str, seconds: float) -> dict:
    return {"type": "response.output_audio.delta", "response_id": rid, "item_id": f"item_{rid}",
            "delta": base64.b64encode(b"\x10\x00" * int(seconds * RATE)).decode()}


def _feed(tr: RoomTrial, script: list[tuple[float, dict]]) -> None:
    for t, ev in script:
        tr.handle(ev, t)


def _created(rid: str) -> dict:
    return {"type": "response.created", "response": {"id": rid}}


def test_a_scripted_story_counts_its_stops_the_ones_back_and_the_share_played():
    asyncio.run(_scripted_story())


async def _scripted_story():  # in a loop: a clear sends its truncate
    tr = RoomTrial(_NoSocket(), None, Player(keep=True))
    _feed(tr, [
        (0.0, _created("r1")),
        (1.0, _delta("r1", 4.0)),  # plays 1-5 s
        (3.0, {"type": "input_audio_buffer.speech_started"}),  # the echo: a stop, the client clears at 3 s
        (3.4, {"type": "input_audio_buffer.speech_stopped"}),
        (3.6, _created("r2")),  # the resumption: created first, then told
        (3.6, {"type": "response.resumed", "response_id": "r2", "item_id": "item_r2"}),
        (3.7, _delta("r2", 3.3)),  # back 0.3 s after the voice's end: plays 3.7-7.0
        (8.0, _delta("r2", 2.0)),  # a stall of 1 s (no stop): 8-10
        (9.0, {"type": "input_audio_buffer.speech_started"}),  # a stop at 9 s that never comes back
        (9.5, {"type": "input_audio_buffer.speech_stopped"}),
        (10.0, _created("r3")),  # the answer to the echo: made while nothing played, not a stop of its own
        (10.5, _delta("r3", 1.0)),
        (11.5, {"type": "response.done", "response": {"id": "r3", "status": "completed"}}),
    ])
    await asyncio.sleep(0)
    stops = tr.real_stops()
    assert [s["why"] for s in stops] == ["speech_started", "speech_started"]
    fig = room_figures.stop_figures(tr, stops, 1.0, 13.0)
    assert fig["self_interruptions"] == 2 and fig["came_back"] == 1
    assert [s["came_back"] for s in fig["stops"]] == [True, False]
    story = room_figures.story_figures(tr, stops, "r1", 1.0, window_s=12.0)  # [1, 13)
    # played: 1-3 (r1), 3.7-7 (r2), 8-9 (r2 until the clear) = 2 + 3.3 + 1 = 6.3 s
    assert abs(story["played_s"] - 6.3) < 1e-6
    # gaps: 3-3.7 (a stop), 7-8 (a stall), 9-13 (a stop): the share is of the window less the stall
    assert abs(story["underrun_s"] - 1.0) < 1e-6 and abs(story["stopped_s"] - 4.7) < 1e-6
    assert abs(story["share"] - 6.3 / 11.0) < 1e-3 and not story["ended_in_window"]


def test_a_cut_ins_answer_that_stops_itself_is_counted():
    asyncio.run(_answer_stopped())


async def _answer_stopped():
    tr = RoomTrial(_NoSocket(), None, Player(keep=True))
    _feed(tr, [
        (0.0, _created("r1")),
        (1.0, _delta("r1", 10.0)),  # the story
        (5.0, {"type": "input_audio_buffer.speech_started"}),  # the cut-in: the client clears
        (5.5, {"type": "input_audio_buffer.speech_stopped"}),
        (5.8, _created("r2")),  # the answer
        (6.0, _delta("r2", 3.0)),  # plays 6-9
        (6.6, {"type": "input_audio_buffer.speech_started"}),  # its own echo taken for the user
        (7.2, _created("r3")),
        (7.4, _delta("r3", 1.0)),
        (8.4, {"type": "response.done", "response": {"id": "r3", "status": "completed"}}),
    ])
    await asyncio.sleep(0)
    fig = room_figures.answer_figures(tr, tr.real_stops(), "r2")
    assert fig["answer_stops"] == 1 and fig["answer_stops_at_ms"] == [600]
    assert abs(fig["answer_played_s"] - (0.6 + 1.0)) < 1e-6, "0.6 s of the answer, then the answer to its echo"
    assert not room_figures.answer_heard(tr, "r2", 8.0) and room_figures.answer_heard(tr, "r2", 8.5)


def test_a_reply_cancelled_or_replaced_without_a_clear_is_one_stop_and_a_resumption_is_none():
    asyncio.run(_replaced())


async def _replaced():
    tr = RoomTrial(_NoSocket(), None, Player(keep=True))
    _feed(tr, [
        (0.0, _created("r1")),
        (0.5, _delta("r1", 5.0)),  # plays 0.5-5.5
        (2.0, _created("r2")),  # a new response while r1 still plays: r1 replaced, a stop
        (2.1, {"type": "response.done", "response": {"id": "r1", "status": "cancelled"}}),  # the same stop
        (2.2, _delta("r2", 5.0)),  # queued behind r1: plays 5.5-10.5
        (6.0, {"type": "response.done", "response": {"id": "r2", "status": "cancelled"}}),  # not cleared: a stop
        (6.5, _created("r3")),
        (6.5, {"type": "response.resumed", "response_id": "r3", "item_id": "item_r3"}),  # a resumption: none
    ])
    await asyncio.sleep(0)
    assert [(s["why"], s["response"]) for s in tr.real_stops()] == [("new_response", "r1"), ("cancelled", "r2")]


def test_a_halt_before_the_first_audio_counts_once_and_its_window_starts_at_the_resumption():
    asyncio.run(_stopped_before_it_sounded())


async def _stopped_before_it_sounded():
    tr = RoomTrial(_NoSocket(), None, Player(keep=True))
    _feed(tr, [
        (0.0, _created("r1")),
        (0.2, {"type": "input_audio_buffer.speech_started"}),  # a noise before any of the story came
        (0.22, {"type": "response.done", "response": {"id": "r1", "status": "cancelled"}}),  # the same stop
        (0.8, {"type": "input_audio_buffer.speech_stopped"}),
        (0.9, _created("r2")),
        (0.9, {"type": "response.resumed", "response_id": "r2", "item_id": "item_r2"}),
        (0.95, _delta("r2", 25.0)),
    ])
    await asyncio.sleep(0)
    stops = tr.real_stops()
    assert [s["why"] for s in stops] == ["speech_started"]
    start = room_figures.story_start(tr, "r1")
    assert start == 0.95
    fig = room_figures.stop_figures(tr, stops, 0.0, start + 20.0, origin=start)
    assert fig["self_interruptions"] == 1 and fig["came_back"] == 1 and fig["stops"][0]["at_ms"] == -750
    assert room_figures.story_figures(tr, stops, "r1", start)["share"] == 1.0


def test_a_story_that_plays_through_is_all_played_and_one_that_ends_early_is_not_short_changed():
    asyncio.run(_plays_through())


async def _plays_through():
    tr = RoomTrial(_NoSocket(), None, Player(keep=True))
    _feed(tr, [(0.0, _created("r1")), (1.0, _delta("r1", 10.0)), (2.0, _delta("r1", 5.0)),
               (3.0, {"type": "response.done", "response": {"id": "r1", "status": "completed"}})])
    await asyncio.sleep(0)
    whole = room_figures.story_figures(tr, tr.real_stops(), "r1", 1.0, window_s=12.0)  # 15 s: 12 of 12 played
    assert whole["played_s"] == 12.0 and whole["share"] == 1.0 and whole["underrun_s"] == 0.0
    short = room_figures.story_figures(tr, tr.real_stops(), "r1", 1.0, window_s=20.0)  # ends at 16 s: 15 of 15
    assert short["ended_s"] == 5.0 and short["share"] == 1.0 and short["ended_in_window"]
    cut = RoomTrial(_NoSocket(), None, Player(keep=True))  # stopped, then resumed with what was made: it ends short
    _feed(cut, [(0.0, _created("r1")), (1.0, _delta("r1", 2.0)), (2.0, {"type": "input_audio_buffer.speech_started"}),
                (2.3, {"type": "input_audio_buffer.speech_stopped"}), (2.5, _created("r2")),
                (2.5, {"type": "response.resumed", "response_id": "r2", "item_id": "item_r2"}),
                (2.6, _delta("r2", 1.0)), (2.7, {"type": "response.done", "response": {"id": "r2", "status": "completed"}})])
    await asyncio.sleep(0)
    after = room_figures.story_figures(cut, cut.real_stops(), "r1", 1.0, window_s=12.0)
    assert after["ended_s"] == 0.0 and abs(after["stopped_s"] - 10.0) < 1e-6 and abs(after["share"] - 2 / 12) < 1e-3
    _feed(cut, [(2.8, _created("r3")), (2.8, {"type": "response.resumed", "response_id": "r3", "item_id": "item_r3"}),
                (2.9, _delta("r3", 0.1))])  # resumed again, then silent while still open: no stall either
    await asyncio.sleep(0)
    held = room_figures.story_figures(cut, cut.real_stops(), "r1", 1.0, window_s=12.0)
    assert held["underrun_s"] == 0.0 and abs(held["share"] - 2.1 / 12) < 1e-3  # r3 plays 3.6-3.7


def test_the_plan_and_the_session_fields():
    cut = [f"s{k}" for k in range(10)]
    bc = [f"b{k}" for k in range(22)]
    full = plan("dev", ("echo", "cutin", "backchannel", "noise"), None, cut, bc)
    count = {}
    for s in full:
        count[s.condition] = count.get(s.condition, 0) + 1
    assert count["story, echo -10 dB"] == 5 and count["story, echo -6 dB"] == 5 and count["story, echo -20 dB"] == 2
    assert count["cut-in, echo -10 dB"] + count["cut-in, echo -6 dB"] == 10
    assert count["backchannel, echo -10 dB"] == count["backchannel, no echo"] == 10
    assert sum(v for k, v in count.items() if "SNR" in k) == 12 and len(full) == 54
    assert {s.delay_ms for s in full if s.echo_db is not None} == {40, 80, 150, 220, 300}
    assert all(4.0 <= s.at_s <= 7.0 for s in full if s.kind != "story")
    # the backchannels with and without echo: the same clips, prompts and times
    pairs = [(s.clip, s.prompt, s.at_s) for s in full if s.condition == "backchannel, echo -10 dB"]
    assert pairs == [(s.clip, s.prompt, s.at_s) for s in full if s.condition == "backchannel, no echo"]
    assert len(plan("dev", ("echo",), 1, cut, bc)) == 3
    asks = [SimpleNamespace(item=SimpleNamespace(text=f"q{k}")) for k in range(4)]  # stand-ins for spoken clips
    spoken = plan("dev", ("spoken",), None, cut, bc, asks)
    assert [s.condition for s in spoken].count("story asked aloud, echo -6 dB") == 3
    assert [s.condition for s in spoken].count("cut-in asked aloud, echo -6 dB") == 3
    assert all(s.ask in asks and s.prompt == s.ask.item.text and s.echo_db == -6.0 for s in spoken), "asked aloud, over echo"
    with pytest.raises(SystemExit):
        plan("dev", ("spoken",), None, cut, bc)  # no spoken prompts to ask with
    assert session_fields() == {}
    assert session_fields("off", "far_field") == {"echo_cancellation": None, "noise_reduction": {"type": "far_field"}}


def test_the_report_reads_synthetic_rows_and_marks_the_goals():
    def story(cond: str, stops: int, share: float) -> dict:
        return {"condition": cond, "kind": "story", "status": "ok", "self_interruptions": stops, "came_back": 0,
                "stops": [{"at_ms": 1000, "why": "speech_started", "came_back": False}] * stops,
                "window_s": 20.0, "ended_s": 0.0, "played_s": 20 * share, "share": share, "underrun_s": 0.0,
                "ended_in_window": False}

    rows = [story("story, echo -10 dB", 0, 1.0), story("story, echo -10 dB", 3, 0.4),
            story("story, fan 10 dB SNR", 0, 0.98),
            {"condition": "cut-in, echo -6 dB", "kind": "cutin", "status": "ok", "taken": True, "undecided": False,
             "last_played_ms": 250.0, "self_interruptions_before": 0, "playing_at_onset": True},
            {"condition": "backchannel, echo -10 dB", "kind": "backchannel", "status": "ok", "story_lost": True,
             "false_interruption": True, "self_interruptions_before": 2, "playing_at_onset": True},
            {"condition": "backchannel, no echo", "kind": "backchannel", "status": "ok", "story_lost": False,
             "false_interruption": False, "self_interruptions_before": 0, "playing_at_onset": True},
            {"condition": "story, echo -6 dB", "kind": "story", "error": "boom"}]
    run = summarise(rows)
    assert run["story, echo -10 dB"]["self_interruptions"] == 3 and run["story, echo -10 dB"]["per_minute"] == 4.5
    assert run["story, echo -10 dB"]["zero_stories"] == 1 and run["story, echo -10 dB"]["share_min"] == 0.4
    median = median_conditions([run, run])
    marks = {g["goal"]: g["mark"] for g in goals(median)}
    assert marks["story, echo -10 dB: no self-interruption"] == "**missed**"
    assert marks["story, fan 10 dB SNR: no stop"] == "met"
    assert marks["cut-in, echo -6 dB: cut-ins taken 100% (each over the story playing)"] == "met"
    assert marks["cut-in, echo -6 dB: onset -> last audio played p50 <= 300 ms"] == "met"
    assert marks["backchannels over echo -10 dB lose the story no more often than without echo"] == "**missed**"
    result = {"room": True, "set": "dev", "echo_cancellation": "off", "noise_reduction": "none",
              "session_fields": {"echo_cancellation": None}, "voice_dbfs": -19.8, "window_s": 20.0,
              "conditions": {c: 1 for c in run}, "median": median, "goals": goals(median),
              "runs": [{"conditions": run, "wall_s": 60.0, "loadavg_start": [1.0], "rows": rows}] * 2}
    text = report(result)
    assert "| story, echo -10 dB | 2 | 3 (4.5) | 1 | 0 |" in text and "1 errors" in text
