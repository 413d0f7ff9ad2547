"""``bench duplex`` reads what the listener heard (issue 69): the stop from the cut reply's audio as
received and played, never from the arrival of ``speech_started``; a cut-in taken only on a
verdict; undecided trials counted apart; every held-out run logged."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np

from bench.duplex.client import Mic, Player, Trial
from bench.duplex import client
from bench.duplex.common import CHUNK, GRID_CHUNKS
from bench.duplex.trials import verdict_of_voice
from bench.duplex_set import RATE


class _NoSocket:
    """A test double for the session's WebSocket: the trial under test only reads events given by hand."""

    async def send(self, _):
        return None


def _delta(rid: str, seconds: float) -> dict:
    pcm = b"\0\0" * int(seconds * RATE)
    return {"type": "response.output_audio.delta", "response_id": rid, "item_id": f"item_{rid}",
            "delta": base64.b64encode(pcm).decode()}


def _trial() -> Trial:
    return Trial(_NoSocket(), mic=None)


def test_a_server_that_keeps_sending_the_cut_reply_is_heard_so():
    """The client clears at speech_started (1.0 s), but audio of the cut reply that comes after the
    clear plays: the silence is measured where the listener's audio ended, not at the event."""
    obedient, stubborn = Player(), Player()
    for p in (obedient, stubborn):
        p.add(0.0, "a", "r1", 2.0)  # two seconds buffered ahead
        p.clear(1.0)
    stubborn.add(1.2, "a", "r1", 0.5)  # the server went on sending after the onset
    assert obedient.heard_end("r1") == 1.0
    assert stubborn.heard_end("r1") == 1.7
    assert stubborn.gaps_s == 0.0  # the silence after a clear is the client's, not a reply that ran dry
    assert Player().heard_end("r1") is None


def test_the_trial_plays_audio_that_comes_after_its_clear():
    asyncio.run(_plays_audio_after_its_clear())


async def _plays_audio_after_its_clear():  # in a loop: the clear sends its truncate
    tr = _trial()
    tr.handle({"type": "response.created", "response": {"id": "r1"}}, 0.0)
    tr.handle(_delta("r1", 2.0), 0.1)
    tr.handle({"type": "input_audio_buffer.speech_started"}, 1.0)  # cleared here, truncate sent
    assert tr.player.heard_end("r1") == 1.0
    tr.handle(_delta("r1", 0.4), 1.3)  # a late delta of the cut reply still sounds
    assert abs(tr.player.heard_end("r1") - 1.7) < 1e-9
    await asyncio.sleep(0)  # the truncate goes out


def test_a_cut_in_is_taken_only_on_a_verdict_and_undecided_is_apart():
    asyncio.run(_taken_only_on_a_verdict())


async def _taken_only_on_a_verdict():
    onset, until = 1.0, 4.0
    tr = _trial()  # speech_started at the onset (yield), then nothing: no verdict
    tr.handle({"type": "response.created", "response": {"id": "r1"}}, 0.0)
    tr.handle({"type": "input_audio_buffer.speech_started"}, 1.05)
    assert verdict_of_voice(tr, "r1", onset, until) == {"verdict": None, "undecided": True}
    tr.handle({"type": "input_audio_buffer.committed"}, 1.8)  # the voice became a turn
    assert verdict_of_voice(tr, "r1", onset, until)["verdict"] == "interruption"

    dropped = _trial()
    dropped.handle({"type": "response.created", "response": {"id": "r1"}}, 0.0)
    dropped.handle({"type": "input_audio_buffer.backchannel", "transcript": "mm"}, 1.6)
    assert verdict_of_voice(dropped, "r1", onset, until)["verdict"] == "backchannel"

    answered = _trial()  # an answer that sounded is an interruption taken, whatever came before
    answered.handle({"type": "response.created", "response": {"id": "r1"}}, 0.0)
    answered.handle({"type": "input_audio_buffer.backchannel", "transcript": ""}, 1.6)
    answered.handle({"type": "response.created", "response": {"id": "r2"}}, 2.0)
    answered.handle(_delta("r2", 0.2), 2.5)
    assert verdict_of_voice(answered, "r1", onset, until)["verdict"] == "interruption"
    late = verdict_of_voice(answered, "r1", onset, 2.2)  # the answer after the window is no verdict
    assert late["verdict"] == "backchannel"
    await asyncio.sleep(0)


def test_the_report_reads_silence_from_audio_and_shows_undecided_apart():
    from bench.duplex import goals, median_modes, report, summarise

    rows = [{"mode": "semantic_vad", "kind": "interruption", "status": "ok", "detected": True, "seen_ms": 100.0,
             "stop_ms": 120.0, "silence_ms": v, "last_audio_ms": None, "answer_ms": 800.0, "relevant": True,
             "undecided": False} for v in (140.0, 160.0, 900.0)]
    rows += [{"mode": "semantic_vad", "kind": "cutin", "status": "ok", "taken": i < 2, "seen_ms": 100.0,
              "silence_ms": 150.0, "undecided": i == 2} for i in range(3)]
    per = summarise(rows, ["semantic_vad"], {})
    s = per["semantic_vad"]
    assert s["silence_p50_ms"] == 160.0 and s["seen_p50_ms"] == 100.0
    assert s["cutin_taken_share"] == round(2 / 3, 3) and s["cutin_undecided"] == 1 and s["int_undecided"] == 0
    median = median_modes([per])
    marks = {g["goal"]: g["mark"] for g in goals(median)}
    assert marks["semantic_vad: silence after an interruption's onset p50 <= 250 ms (the audio the listener heard)"] \
        == "met"
    assert marks["semantic_vad: short cut-ins taken as turns 100%"] == "**missed**"  # the undecided one is not taken
    text = report({"set": "dev", "items": {"interruption": 3, "cutin": 3}, "modes": ["semantic_vad"],
                   "median": median, "goals": goals(median), "runs": [{"wall_s": 1.0, "modes": per}]})
    assert "| semantic_vad | 160 / 752 | 0 | 67 % | 150 | n/a | n/a | 0 / 0 / 1 |" in text


def test_every_held_out_run_is_logged(tmp_path):
    from bench.eval_log import log_eval_run

    log = tmp_path / "eval-runs.md"
    log.write_text("# Eval runs\n\n| date (UTC) | commit | command | set | purpose | notes |\n|---|---|---|---|---|---|\n")
    line = log_eval_run("duplex eval", "figure", ["duplex", "--runs", "3"], log=log)
    log_eval_run("duplex eval", "diagnosis", ["duplex", "--kinds", "cutin"], log=log)
    text = log.read_text()
    assert text.splitlines()[-2] == line and "`python -m bench duplex --runs 3`" in line
    assert text.splitlines()[-1].count("|") == 7 and "eval-informed" in text.splitlines()[-1]


def test_an_overlap_clip_starts_on_its_place_of_the_vad_grid(monkeypatch):
    """Wherever the reply's timing left the microphone, the clip's first sample goes out at the
    start of a chunk whose index is its place modulo GRID_CHUNKS, and its marks say so."""
    monkeypatch.setattr(client, "CHUNK_MS", 2)  # the schedule sped up; chunks keep their size
    sent: list[np.ndarray] = []

    class Socket:
        async def send(self, text: str) -> None:
            sent.append(np.frombuffer(base64.b64decode(json.loads(text)["audio"]), "<i2"))

    clip = np.full(CHUNK * 3, 1000, np.int16)

    async def run(place: int, silent_chunks: int) -> tuple[int, dict[str, int]]:
        sent.clear()
        mic = Mic(Socket())
        mic.sent = silent_chunks * CHUNK
        mic.say(clip, {"onset": 0, "last_voiced": clip.size - 1}, place)
        task = asyncio.create_task(mic._run())
        while len(sent) < GRID_CHUNKS + 4:
            await asyncio.sleep(0.005)
        task.cancel()
        first = next(i for i, c in enumerate(sent) if c.any())
        assert set(mic.marks) == {"onset", "last_voiced"}
        return silent_chunks + first, mic.wanted

    for place in range(GRID_CHUNKS):
        for silent in (0, 5, 13):
            index, wanted = asyncio.run(run(place, silent))
            assert index % GRID_CHUNKS == place
            assert sent[index - silent][0] == 1000  # the chunk starts with the clip
            assert wanted == {"onset": index * CHUNK, "last_voiced": index * CHUNK + clip.size - 1}
