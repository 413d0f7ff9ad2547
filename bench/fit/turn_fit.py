"""How the semantic_vad weights in ``core/conversation/end_of_turn.py`` were chosen.

    python -m bench.fit.turn_fit          # ~6 min: speak, transcribe, score, grid-search, print

The development set (``bench/sets/turns.py``: ``DEV_COMPLETE`` / ``DEV_OPEN``, no phrase in common
with the benchmark's eval part): 40 complete requests and 40 phrases cut off mid-sentence, spoken
by the same espeak-ng voices and transcribed by the cascade's Whisper as at a pause (0.3 s of silence after the words). Each gets
SmolLM2's end-of-message probability after its words and after all but the last word, and
Whisper's confidence in the last word (0 for a word it placed after the voice ended, as the
cascade's ASR reports it). A grid search over the cue weights and the wait curve
then minimises the complete turns' extra wait (beyond ~350 ms, when the score arrives anyway)
plus 2 s per share of cut-off phrases answered within a 1 s pause, at eagerness auto. The
weights shipped were fitted on the first 30 + 30 phrases; the last-word confidence's exponent
was fitted afterwards, on all 80, with those weights held (the second table).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from bench.sets.turns import DEV_COMPLETE, DEV_OPEN
from core.conversation.end_of_turn import HeardText, MessageEnd


def heard() -> list[tuple[str, int, MessageEnd | None]]:
    """(transcript with its last-word confidence, 1 complete / 0 open, LM end-of-message
    probabilities) per dev phrase."""
    from pathlib import Path

    from bench.turn_set import VOICES, items
    from core.audio import resample
    from core.cascade.asr import WhisperAsr
    from core.cascade.llm import SmolLm
    from core.cascade.turn_scorer import EndOfMessageScorer
    from devtools.espeak import espeak

    overlap = (set(DEV_COMPLETE) | set(DEV_OPEN)) & {t for it in items() for t in it.parts}
    assert not overlap, f"dev phrases in the benchmark's set: {overlap}"
    lm = SmolLm(Path("data"))
    scorer, asr = EndOfMessageScorer(lm), WhisperAsr()
    out = []
    for k, (texts, label) in enumerate(((DEV_COMPLETE, 1), (DEV_OPEN, 0))):
        for i, text in enumerate(texts):
            voice, speed, pitch = VOICES[(i + k + (2 if i >= 30 else 0)) % len(VOICES)]
            audio = resample(espeak(text, voice, speed, pitch).astype(np.float32) / 32768, 24000, 16000)
            pad = np.zeros(4800, np.float32)
            result = asr.transcribe(np.concatenate([pad, audio, pad]))
            said = HeardText(result.text.strip(), result.last_word_confidence)
            out.append((said, label, scorer.message_end(said) if said else None))
    return out + heard_duplex(scorer, asr)


def heard_duplex(scorer, asr) -> list[tuple[str, int, MessageEnd | None]]:
    """The same for the full-duplex set's dev part (``bench/sets/duplex.py``): its complete
    requests and its paused items' openings, each spoken by every one of its dev voices (voices
    the turn set does not use: the weights must hold on speech they were not made on)."""
    from bench.sets.duplex import DEV_COMPLETE as COMPLETE, DEV_PAUSED, DEV_VOICES
    from core.audio import resample
    from devtools.espeak import espeak

    out = []
    for text, label in [(t, 1) for t in COMPLETE] + [(before, 0) for before, _, _ in DEV_PAUSED]:
        for voice, speed, pitch in DEV_VOICES:
            audio = resample(espeak(text, voice, speed, pitch).astype(np.float32) / 32768, 24000, 16000)
            pad = np.zeros(4800, np.float32)
            result = asr.transcribe(np.concatenate([pad, audio, pad]))
            said = HeardText(result.text.strip(), result.last_word_confidence)
            out.append((said, label, scorer.message_end(said) if said else None))
    return out


def _save(rows: list[tuple[str, int, MessageEnd | None]]) -> None:
    """The heard rows, for a second look without speaking them again (data/, git-ignored)."""
    import json
    from pathlib import Path

    out = [{"text": str(t), "confidence": t.last_word_confidence, "label": label,
            "lm": None if lm is None else [lm.after_words, lm.before_last_word]} for t, label, lm in rows]
    Path("data").mkdir(exist_ok=True)
    Path("data/turn_fit_rows.json").write_text(json.dumps(out))


def _cost(waits: list[tuple[float, int]]) -> tuple[float, float, float]:
    """(cost, mean extra wait of complete turns ms, cut-in share) of (wait ms, label) pairs."""
    extra = [max(0.0, wait - 350) for wait, label in waits if label]
    cut = [wait < 1000 for wait, label in waits if not label]
    return float(np.mean(extra) + 2000 * np.mean(cut)), float(np.mean(extra)), float(np.mean(cut))


def fit(rows: list[tuple[str, int, MessageEnd | None]]) -> list[tuple[float, float, float, tuple]]:
    """Every grid point of the first stage (no confidence cue) as (cost, mean extra wait of
    complete turns ms, cut-in share, weights)."""
    from core.conversation.end_of_turn import OPEN_ENDINGS, last_word

    feats = [(math.log10(max(lm.after_words if lm else 1e-7, 1e-7)), last_word(t) in OPEN_ENDINGS, t.endswith("?"),
              t.endswith(("...", "…", ",", "-")), label) for t, label, lm in rows]
    results = []
    for center, slope, question, open_word, trailing, exponent in itertools.product(
            [-4, -3.5, -3, -2.7, -2.5, -2, -1.5], [1, 1.5, 2, 2.5], [0, 0.5, 1, 1.5], [-2, -3, -4],
            [-1, -2, -3], [1.5, 2, 3]):
        waits = []
        for log_lm, is_open, is_question, trails, label in feats:
            z = (log_lm - center) * slope + open_word * is_open + question * is_question + trailing * trails
            waits.append((4000 * (1 - 1 / (1 + math.exp(-max(min(z, 30), -30)))) ** exponent, label))
        results.append((*_cost(waits), (center, slope, question, open_word, trailing, exponent)))
    return sorted(results)


def fit_confidence(rows: list[tuple[str, int, MessageEnd | None]]) -> list[tuple[float, float, float, float]]:
    """The second stage: the shipped weights, each exponent of the last-word confidence (0: the
    cue off) as (cost, mean extra wait of complete turns ms, cut-in share, exponent)."""
    from core.conversation import end_of_turn

    shipped = end_of_turn.CONFIDENCE_EXPONENT
    results = []
    try:
        for exponent in (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0):
            end_of_turn.CONFIDENCE_EXPONENT = exponent
            waits = [(end_of_turn.wait_ms(end_of_turn.end_of_turn_probability(t, lm), "auto"), label)
                     for t, label, lm in rows]
            results.append((*_cost(waits), exponent))
    finally:
        end_of_turn.CONFIDENCE_EXPONENT = shipped
    return sorted(results)


JOINT_NAMES = ("LM_CENTER", "LM_SLOPE", "QUESTION_MARK", "OPEN_WORD", "TRAILING_OFF", "WAIT_EXPONENT",
               "CONFIDENCE_EXPONENT")


def keeps_tested_cases() -> bool:
    """Whether the weights set now keep every case ``tests/unit/test_semantic_vad.py`` holds."""
    from core.conversation.end_of_turn import end_of_turn_probability as p, wait_ms as w

    for text, lm in (("What is the capital of France?", 0.93), ("Read me the news.", 0.009),
                     ("Where is the nearest train station?", 0.024), ("I'd like to book a table for two.", 0.09)):
        if not (p(text, lm) > 0.65 and w(p(text, lm), "auto") < 500):
            return False
    for text, lm in (("What is the population of...", 1e-5), ("Let me think, uh,", 0.04),
                     ("Well, I need to know whether", 1e-5), ("How much does it cost to", 3e-5), ("The thing is.", 0.026)):
        if not (p(text, lm) < 0.25 and w(p(text, lm), "auto") > 1500):
            return False
    book = p("Can you recommend a good book?", 0.0007)
    guess = MessageEnd(0.53, 1e-4)
    return (0.55 < book < 0.7 and 700 < w(book, "auto") < 1000 and p("What time is it?") > 0.8
            and w(p("Tell me about the history of"), "auto") > 1500
            and w(p(HeardText("Could you book a table for it?", 0.99), guess), "auto") < 100
            and w(p(HeardText("Could you book a table for it?", 0.5), guess), "auto") > 450
            and w(p(HeardText("Could you book a table for it?", 0.3), guess), "auto") > 800
            and w(p(HeardText("How tall is the Eiffel tower?", 0.64), MessageEnd(0.11, 6e-6)), "auto") < 450
            and 150 < w(p(HeardText("Goodnight", 0.09), MessageEnd(0.33)), "auto") < 600)


def fit_joint(rows: list[tuple[str, int, MessageEnd | None]]) -> list[tuple[float, float, float, tuple]]:
    """Issue 34's search: every weight and the confidence exponent at once, over both dev sets,
    keeping only the weights that hold the tests' cases; (cost, extra wait ms, cut-in share, weights)."""
    from core.conversation import end_of_turn

    shipped = tuple(getattr(end_of_turn, n) for n in JOINT_NAMES)
    results = []
    try:
        for weights in itertools.product([-3, -2.7, -2.5, -2.2, -2, -1.5], [1, 1.5, 2, 2.5], [1, 1.5, 2, 2.5],
                                         [-2, -3, -4], [-3], [1.5, 2, 2.5, 3], [0.3, 0.4, 0.5, 0.6]):
            for name, value in zip(JOINT_NAMES, weights):
                setattr(end_of_turn, name, value)
            if not keeps_tested_cases():
                continue
            waits = [(end_of_turn.wait_ms(end_of_turn.end_of_turn_probability(t, lm), "auto"), label)
                     for t, label, lm in rows]
            results.append((*_cost(waits), weights))
    finally:
        for name, value in zip(JOINT_NAMES, shipped):
            setattr(end_of_turn, name, value)
    return sorted(results)


def main() -> None:
    rows = heard()
    _save(rows)
    for said, label, lm in rows:
        scores = "lm=None" if lm is None else f"lm={lm.after_words:.2e} without last word={lm.before_last_word or 0:.2e}"
        print(f"{'complete' if label else 'open    '} {scores} last word {said.last_word_confidence:.2f} {said!r}")
    print("\ncost, complete extra wait ms, cut-in share, (LM_CENTER, LM_SLOPE, '?', OPEN_WORD, TRAILING_OFF, exponent)")
    for cost, extra, cut, weights in fit(rows)[:5]:
        print(f"{cost:7.1f} {extra:6.1f} {cut:5.2f} {weights}")
    print("\ncost, complete extra wait ms, cut-in share, CONFIDENCE_EXPONENT (0: no confidence cue)")
    for cost, extra, cut, exponent in fit_confidence(rows):
        print(f"{cost:7.1f} {extra:6.1f} {cut:5.2f} {exponent}")
    print(f"\nthe joint search keeping the tests' cases (issue 34): cost, extra, cut-in share, {JOINT_NAMES}")
    for cost, extra, cut, weights in fit_joint(rows)[:5]:
        print(f"{cost:7.1f} {extra:6.1f} {cut:5.2f} {weights}")


if __name__ == "__main__":
    main()
