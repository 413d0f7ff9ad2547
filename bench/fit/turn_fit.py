"""How the semantic_vad weights in ``core/conversation/end_of_turn.py`` were chosen.

    python -m bench.fit.turn_fit          # ~7 min: speak, transcribe, score, grid-search, print
    python -m bench.fit.turn_fit --cached # the search alone, on the rows the last run heard

The development set (``bench/sets/turns.py``: ``DEV_COMPLETE`` / ``DEV_OPEN``, no phrase in common
with the benchmark's eval part): 41 complete requests and 40 phrases cut off mid-sentence, spoken
by the same espeak-ng voices and transcribed by the cascade's Whisper as at a pause (0.3 s of silence after the words). Each gets
SmolLM2's end-of-message probability after its words and after all but the last word, and
Whisper's confidence in the last word (0 for a word it placed after the voice ended, as the
cascade's ASR reports it). A grid search over the cue weights and the wait curve
then minimises the complete turns' extra wait (beyond ~350 ms, when the score arrives anyway)
plus 2 s per share of cut-off phrases answered within a 1 s pause, at eagerness auto (the first
table: without the confidence cue; the second: the confidence exponent with the shipped weights
held), over these rows and the full-duplex set's dev part (``heard_duplex``). The third table,
whose best row ships, is the joint search: every weight and the exponent at once, among those keeping
``tests/unit/test_semantic_vad.py``'s score checks (``keeps_tested_cases``). Those checks' cases
are dev phrases only, with the numbers measured on them (``python -m bench.fit.turn_cases``); no
eval item and no number measured on one enters the fit (issue 44).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from bench.sets.turns import DEV_COMPLETE, DEV_OPEN
from core.conversation.end_of_turn import HeardText, MessageEnd


def models():
    """(SmolLM2's end-of-message scorer, the cascade's Whisper), as the cascade builds them."""
    from pathlib import Path

    from core.cascade.asr import WhisperAsr
    from core.cascade.llm import SmolLm
    from core.cascade.turn_scorer import EndOfMessageScorer

    return EndOfMessageScorer(SmolLm(Path("data"))), WhisperAsr()


def hear(scorer, asr, text: str, voice: tuple[str, int, int]) -> tuple[HeardText, MessageEnd | None]:
    """``text`` spoken by espeak-ng (voice, words per minute, pitch), transcribed by the cascade's
    Whisper as at a pause (0.3 s of silence either side), with its last-word confidence (0 for a
    word placed after the voice ended) and SmolLM2's end-of-message probabilities after the heard
    words and after all but the last one."""
    from core.audio import resample
    from devtools.espeak import espeak

    audio = resample(espeak(text, *voice).astype(np.float32) / 32768, 24000, 16000)
    pad = np.zeros(4800, np.float32)
    result = asr.transcribe(np.concatenate([pad, audio, pad]))
    said = HeardText(result.text.strip(), result.last_word_confidence)
    return said, scorer.message_end(said) if said else None


def turn_set_voice(label: int, i: int) -> tuple[str, int, int]:
    """The voice that speaks the ``i``-th phrase of ``DEV_COMPLETE`` (label 1) or ``DEV_OPEN`` (0)."""
    from bench.turn_set import VOICES

    return VOICES[(i + (1 - label) + (2 if i >= 30 else 0)) % len(VOICES)]


def heard() -> list[tuple[str, int, MessageEnd | None]]:
    """(transcript with its last-word confidence, 1 complete / 0 open, LM end-of-message
    probabilities) per dev phrase."""
    from bench.turn_set import items

    overlap = (set(DEV_COMPLETE) | set(DEV_OPEN)) & {t for it in items() for t in it.parts}
    assert not overlap, f"dev phrases in the benchmark's set: {overlap}"
    scorer, asr = models()
    out = []
    for texts, label in ((DEV_COMPLETE, 1), (DEV_OPEN, 0)):
        for i, text in enumerate(texts):
            said, lm = hear(scorer, asr, text, turn_set_voice(label, i))
            out.append((said, label, lm))
    return out + heard_duplex(scorer, asr)


def heard_duplex(scorer, asr) -> list[tuple[str, int, MessageEnd | None]]:
    """The same for the full-duplex set's dev part (``bench/sets/duplex.py``): its complete
    requests and its paused items' openings, each spoken by every one of its dev voices (voices
    the turn set does not use: the weights must hold on speech they were not made on)."""
    from bench.sets.duplex import DEV_COMPLETE as COMPLETE, DEV_PAUSED, DEV_VOICES

    out = []
    for text, label in [(t, 1) for t in COMPLETE] + [(before, 0) for before, _, _ in DEV_PAUSED]:
        for voice in DEV_VOICES:
            said, lm = hear(scorer, asr, text, voice)
            out.append((said, label, lm))
    return out


def _save(rows: list[tuple[str, int, MessageEnd | None]]) -> None:
    """The heard rows, for a second look without speaking them again (data/, git-ignored)."""
    import json
    from pathlib import Path

    out = [{"text": str(t), "confidence": t.last_word_confidence, "label": label,
            "lm": None if lm is None else [lm.after_words, lm.before_last_word]} for t, label, lm in rows]
    Path("data").mkdir(exist_ok=True)
    Path("data/turn_fit_rows.json").write_text(json.dumps(out))


def _load() -> list[tuple[str, int, MessageEnd | None]]:
    """The rows ``_save`` kept."""
    import json
    from pathlib import Path

    return [(HeardText(r["text"], r["confidence"]), r["label"], None if r["lm"] is None else MessageEnd(*r["lm"]))
            for r in json.loads(Path("data/turn_fit_rows.json").read_text())]


def shipped_cost(rows: list[tuple[str, int, MessageEnd | None]]) -> tuple[float, float, float, tuple]:
    """(cost, extra wait ms, cut-in share, weights) of the weights ``end_of_turn`` ships now."""
    from core.conversation import end_of_turn

    waits = [(end_of_turn.wait_ms(end_of_turn.end_of_turn_probability(t, lm), "auto"), label) for t, label, lm in rows]
    return (*_cost(waits), tuple(getattr(end_of_turn, n) for n in JOINT_NAMES))


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
    """Whether the weights set now keep every end-of-turn case ``tests/unit/test_semantic_vad.py``
    checks on the score: ``bench.fit.turn_checks.SCORE_CHECKS``, which that test asserts. Each of those cases is a dev phrase
    with the numbers measured on it (``python -m bench.fit.turn_cases``); none comes from an eval
    item (issue 44: the cases this constraint held before were eval items' numbers)."""
    from bench.fit.turn_checks import SCORE_CHECKS

    try:
        for check, cases in SCORE_CHECKS:
            for case in cases:
                check(*case)
    except AssertionError:
        return False
    return True


def fit_joint(rows: list[tuple[str, int, MessageEnd | None]]) -> list[tuple[float, float, float, tuple]]:
    """Issue 34's search: every weight and the confidence exponent at once, over both dev sets,
    keeping only the weights that hold the tests' dev-measured cases (``keeps_tested_cases``);
    (cost, extra wait ms, cut-in share, weights)."""
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
    import sys

    if "--cached" in sys.argv[1:]:  # the rows the last full run heard: the search alone, in seconds
        rows = _load()
    else:
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
    print(f"\nthe joint search keeping the tests' dev-measured cases (issues 34, 44): cost, extra, cut-in share, "
          f"{JOINT_NAMES}")
    for cost, extra, cut, weights in fit_joint(rows)[:5]:
        print(f"{cost:7.1f} {extra:6.1f} {cut:5.2f} {weights}")
    cost, extra, cut, weights = shipped_cost(rows)
    print(f"shipped now:\n{cost:7.1f} {extra:6.1f} {cut:5.2f} {weights}")


if __name__ == "__main__":
    main()
