"""``python -m bench duplex --transport webrtc``'s pure part (bench/duplex/webrtc.py): the reply
frames heard on the track told apart by response (``output_audio_buffer.started``), and the
silence, the story's return and the answer measured from them; the verdicts from the data
channel's events. No server."""

from __future__ import annotations

import pytest

from bench.duplex.webrtc import call_address, label_frames, outcome, track_figures

F = 0.02


def frames(start: float, end: float, reply: bool = True) -> list[tuple[float, bool]]:
    """Decoded frames every 20 ms from ``start`` up to ``end`` (excluded)."""
    n = round((end - start) / F)
    return [(round(start + i * F, 3), reply) for i in range(n)]


def ms(x: float | None) -> float | None:
    return None if x is None else round(x)


ONSET, LV = 10.0, 10.5


def test_frames_belong_to_the_last_started_before_them():
    track = frames(9.0, 10.3) + frames(10.3, 11.0, reply=False) + frames(11.0, 11.5)
    # the cut reply's last frames leave the jitter buffer after its clear, before the resumed one starts
    starts = [(8.9, "long"), (10.92, "resumed")]
    labelled = label_frames(track, starts)
    assert all(rid == "long" for t, rid in labelled if t < 10.3)
    assert all(rid == "resumed" for t, rid in labelled if t >= 11.0)
    assert len(labelled) == round(1.3 / F) + round(0.5 / F)  # idle frames are left out
    assert label_frames([(8.0, True)], starts) == []  # nothing started yet: not counted


def test_the_cut_replys_silence_ends_with_its_last_frame_after_the_onset():
    labelled = [(t, "long") for t, _ in frames(9.0, 10.2)]
    fig = track_figures(labelled, "long", set(), None, ONSET, LV)
    assert ms(fig["silence_ms"]) == 200  # last frame at 10.18, played to 10.20
    assert ms(fig["last_audio_ms"]) == 180
    assert fig["story_back_ms"] is None and fig["answer_ms"] is None


def test_a_server_that_keeps_sending_the_cut_reply_makes_the_silence_grow():
    short = [(t, "long") for t, _ in frames(9.0, 10.2)]
    kept = [(t, "long") for t, _ in frames(9.0, 13.0)]
    assert ms(track_figures(kept, "long", set(), None, ONSET, LV)["silence_ms"]) == 3000
    assert track_figures(kept, "long", set(), None, ONSET, LV)["silence_ms"] > \
        track_figures(short, "long", set(), None, ONSET, LV)["silence_ms"]


def test_a_resumed_reply_is_not_the_cut_reply():
    labelled = [(t, "long") for t, _ in frames(9.0, 10.2)] + [(t, "again") for t, _ in frames(10.9, 12.0)]
    fig = track_figures(labelled, "long", {"again"}, None, ONSET, LV)
    assert ms(fig["silence_ms"]) == 200  # not 2000: the resumed reply's audio is another response
    assert ms(fig["story_back_ms"]) == 400  # its first frame, after the voice's last voiced sample
    # told apart by their started events, even with no gap at all between them
    track = frames(9.0, 12.0)
    fig = track_figures(label_frames(track, [(8.9, "long"), (10.19, "again")]), "long", {"again"}, None, ONSET, LV)
    assert ms(fig["silence_ms"]) == 200 and ms(fig["story_back_ms"]) == -300


def test_the_answer_is_the_next_replys_first_frame_after_the_voice():
    labelled = [(t, "long") for t, _ in frames(9.0, 10.24)] + [(t, "next") for t, _ in frames(11.7, 13.0)]
    fig = track_figures(labelled, "long", set(), "next", ONSET, LV)
    assert ms(fig["silence_ms"]) == 240 and ms(fig["answer_ms"]) == 1200
    assert fig["story_back_ms"] is None
    ended = track_figures([(t, "long") for t, _ in frames(9.0, 9.9)], "long", set(), None, ONSET, LV)
    assert ended["silence_ms"] == 0 and ended["last_audio_ms"] is None  # it had stopped before the onset
    assert track_figures([], "long", set(), None, ONSET, LV)["silence_ms"] is None  # never heard


def ev(t: float, kind: str, **fields) -> tuple[float, dict]:
    return t, {"type": kind, **fields}


def created(t: float, rid: str) -> tuple[float, dict]:
    return ev(t, "response.created", response={"id": rid})


def done(t: float, rid: str, status: str = "completed") -> tuple[float, dict]:
    return ev(t, "response.done", response={"id": rid, "status": status})


BASE = [created(8.5, "long"), ev(8.9, "output_audio_buffer.started", response_id="long")]


def test_a_backchannel_that_paused_the_story_and_it_came_back():
    events = BASE + [ev(10.15, "input_audio_buffer.speech_started"),
                     ev(10.16, "output_audio_buffer.cleared", response_id="long"), done(10.2, "long", "cancelled"),
                     ev(10.7, "input_audio_buffer.backchannel", transcript="mm-hmm"), created(10.75, "again"),
                     ev(10.76, "response.resumed", response_id="again"),
                     ev(10.85, "output_audio_buffer.started", response_id="again")]
    track = frames(9.0, 10.24) + frames(10.24, 10.92, reply=False) + frames(10.92, 12.0)
    r = outcome("backchannel", events, track, "long", ONSET, LV)
    assert r["transport"] == "webrtc" and r["status"] == "ok"
    assert ms(r["silence_ms"]) == 240 and ms(r["story_back_ms"]) == 420
    assert r["paused"] and not r["false_interruption"] and not r["story_lost"]
    assert r["verdict"] == "backchannel" and not r["undecided"]
    assert r["backchannels"] == ["mm-hmm"] and r["resumed"] == 1
    late = outcome("backchannel", events[:-1] + [ev(11.8, "output_audio_buffer.started", response_id="again")],
                   frames(9.0, 10.24) + frames(11.9, 12.5), "long", ONSET, LV)
    assert late["story_lost"] and ms(late["story_back_ms"]) == 1400  # back, but after STORY_BACK_S


def test_a_cutin_is_taken_on_a_verdict_not_on_speech_started():
    stop = [ev(10.15, "input_audio_buffer.speech_started"), ev(10.16, "output_audio_buffer.cleared",
                                                               response_id="long")]
    track = frames(9.0, 10.24)
    heard = outcome("cutin", BASE + stop + [ev(10.9, "input_audio_buffer.committed")], track, "long", ONSET, LV)
    assert heard["taken"] and heard["detected"] and heard["verdict"] == "interruption" and not heard["undecided"]
    assert ms(heard["seen_ms"]) == 150
    nothing = outcome("cutin", BASE + stop, track, "long", ONSET, LV)
    assert not nothing["taken"] and nothing["undecided"] and nothing["verdict"] is None  # yielded, no verdict
    resumed = outcome("cutin", BASE + stop + [ev(10.9, "input_audio_buffer.committed"), created(11.0, "again"),
                                              ev(11.01, "response.resumed", response_id="again")],
                      track, "long", ONSET, LV)
    assert not resumed["taken"] and resumed["verdict"] == "backchannel"
    late = outcome("cutin", BASE + stop + [ev(13.6, "input_audio_buffer.committed")], track, "long", ONSET, LV)
    assert late["undecided"] and not late["taken"]  # committed after the window (last voiced + 3 s)


def test_an_interruption_answered_on_the_track():
    events = BASE + [ev(10.15, "input_audio_buffer.speech_started"),
                     ev(10.16, "output_audio_buffer.cleared", response_id="long"), done(10.2, "long", "cancelled"),
                     ev(11.0, "input_audio_buffer.committed"), created(11.1, "next"),
                     ev(11.2, "response.output_audio_transcript.delta", response_id="next", delta="Penguins live"),
                     ev(11.6, "output_audio_buffer.started", response_id="next")]
    track = frames(9.0, 10.24) + frames(10.24, 11.7, reply=False) + frames(11.7, 12.5)
    r = outcome("interruption", events, track, "long", ONSET, LV, ("penguin",))
    assert r["detected"] and ms(r["seen_ms"]) == 150
    assert ms(r["silence_ms"]) == 240 and r["stop_ms"] == r["silence_ms"] and ms(r["answer_ms"]) == 1200
    assert r["relevant"] and r["next_text"] == "Penguins live"
    assert r["verdict"] == "interruption" and not r["undecided"]
    assert r["reply_audio_s"] == pytest.approx(1.24) and r["reply_status"] == "cancelled"


def test_the_call_goes_to_the_realtime_urls_gateway_with_its_query():
    assert call_address("ws://127.0.0.1:8000/v1/realtime?model=m&extensions=all") == (
        "http://127.0.0.1:8000", "?model=m&extensions=all")
    assert call_address("wss://h/v1/realtime") == ("https://h", "")


async def test_the_microphone_marks_the_frames_holding_the_clips_samples():
    import numpy as np

    from bench.duplex.webrtc import make_mic

    mic = make_mic()
    mic._t0 = -1e9  # no pacing: every frame is due now
    await mic.recv()  # silence
    mic.say_marked(np.ones(1000, np.int16), {"onset": 0, "last_voiced": 999})
    seen = []
    for _ in range(4):  # 1000 samples: frames of 480, 480 and 40, then silence
        frame = await mic.recv()
        seen.append((sorted(mic.marks), int(frame.to_ndarray().astype(bool).sum())))
    assert seen == [(["onset"], 480), (["onset"], 480), (["last_voiced", "onset"], 40), (["last_voiced", "onset"], 0)]
    assert mic.marks["onset"] < mic.marks["last_voiced"]
