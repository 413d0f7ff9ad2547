"""``python -m bench heard`` (issue 69 item 5): its questions come from dev parts only, its voices
are the pipeline's Piper voice and duplex's dev espeak-ng voices (round-robin), and its report
gives each transport's share per voice and the words each lost."""

from __future__ import annotations

import pytest

from bench import heard
from bench.sets import canonical
from bench.sets.answers import DEV, EVAL
from bench.sets.duplex import DEV_VOICES, PARTS
from bench.sets.turns import DEV_COMPLETE, EVAL_COMPLETE


def test_questions_are_dev_items_only_and_enough_for_forty():
    pool = heard.questions(10_000)
    assert len(pool) >= 40
    dev = {tuple(canonical(t)) for t in [q.text for q in DEV] + PARTS["dev"]["complete"] + PARTS["dev2"]["complete"]
           + DEV_COMPLETE}
    evals = {tuple(canonical(t)) for t in [q.text for q in EVAL] + EVAL_COMPLETE}
    keys = [tuple(canonical(t)) for t in pool]
    assert set(keys) <= dev and not set(keys) & evals
    assert len(set(keys)) == len(keys)  # a phrase once
    assert heard.questions(10) == [q.text for q in DEV[:10]]  # the ten the bench asked before


def test_voices_are_piper_then_duplex_dev_voices():
    voices = heard.voices(4)
    assert voices[0] == heard.PIPER and voices[1:] == DEV_VOICES[:3]
    assert heard.voices(1) == [heard.PIPER]
    assert [heard.voice_name(v) for v in voices] == ["piper", *(v[0] for v in DEV_VOICES[:3])]


def test_words_lost_are_the_questions_words_not_heard():
    assert heard.words_lost("How many legs does a bird have?", "How many lengths does a bird have?") == ["legs"]
    assert heard.words_lost("What colour is coal?", "what color is coal") == []


def row(transport: str, question: str, voice: str, heard_text: str | None, run: int = 0) -> dict:
    return {"run": run, "transport": transport, "question": question, "voice": voice, "heard": heard_text,
            "as_spoken": heard_text is not None and canonical(heard_text) == canonical(question),
            "words": heard.words_heard(question, heard_text or ""), "lost": heard.words_lost(question, heard_text or "")}


def test_summary_per_transport_and_voice_with_words_lost_and_the_gap():
    a, b = "How many legs does a bird have?", "What is the capital of France?"
    rows = [row("webrtc", a, "piper", "How many lengths does a bird have?"), row("websocket", a, "piper", a),
            row("webrtc", b, "en-us+klatt2", b), row("websocket", b, "en-us+klatt2", b)]
    r = heard.summarize(rows, runs=1, n_questions=2, voice_names=["piper", "en-us+klatt2"], asks=1)
    rtc, ws = r["summary"]["webrtc"], r["summary"]["websocket"]
    assert (rtc["heard_as_spoken"], ws["heard_as_spoken"]) == (1, 2)
    assert rtc["by_voice"] == {"piper": {"trials": 1, "as_spoken": 0.0}, "en-us+klatt2": {"trials": 1, "as_spoken": 1.0}}
    assert rtc["lost"] == {"legs": 1} and ws["lost"] == {}
    assert r["only"] == {"webrtc": [], "websocket": [a]} and r["gap"] == 1
    text = heard.report(r)
    assert "| webrtc | 2 | 1 | 0.5 |" in text and "- webrtc lost words: legs" in text


def test_an_espeak_voice_speaks_at_the_bench_rate():
    from devtools.espeak import espeak_path

    if espeak_path() is None:
        pytest.skip("espeak-ng is not installed")
    pcm = heard.speak(None, "What is the capital of France?", DEV_VOICES[0])
    assert pcm.dtype.itemsize == 2 and 0.8 * heard.RATE < pcm.size < 4 * heard.RATE
