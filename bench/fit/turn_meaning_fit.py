"""``semantic_vad``'s reading of a turn's completeness by meaning (``core/cascade/words_meaning.py``,
``TURN``), on the dev set only.

    python -m bench.fit.turn_meaning_fit            # ~5 min the first time (speaks the more phrasings), ~1 min after
    python -m bench.fit.turn_meaning_fit --write    # also rewrite core/cascade/turn_examples.py

The rows are ``bench.fit.turn_fit``'s (``data/turn_fit_rows.json``; ``python -m bench.fit.turn_fit``
makes them): every dev phrase of the turn set (41 complete, 40 cut off) and of the full-duplex set
(16 complete requests and 16 paused items' openings, each in its 5 dev voices), as Whisper heard
them at a pause, with the LM's end-of-message probabilities; and ``bench/sets/turn_phrasings.py``
(more complete turns and openings, written apart from eval), each in two dev voices
(``data/turn_meaning_more_rows.json``). Each row's reading is scored by a head fitted **without
its phrase group** (a fifth of the phrases, in any voice). Printed, for the shipped score alone,
the head alone and the two joined (``end_of_turn.join_log_odds``; the plain mean also shown), on
the first rows and on the more phrasings apart: the extra wait on complete turns (mean, p90) and
the share of open phrases answered within 1 s (auto eagerness), as ``bench.fit.turn_fit`` counts
them. The frame (``TURN``) was chosen among three on the first rows (``--frames`` compares them).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

from bench.fit.examples_file import near_an_eval_item, write_examples
from bench.fit.turn_fit import _load
from core.cascade import words_meaning as wm
from core.cascade.llm import converted_model
from core.conversation.end_of_turn import (
    HeardText, MessageEnd, end_of_turn_probability, join_log_odds, strip_trailing_punctuation, wait_ms,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "core" / "cascade" / "turn_examples.py"
FRAMES = [wm.TURN, ('The user said: "', ""), wm.OVERLAP]
TURN_SET_ROWS = 81  # the turn set's phrases come first, one row each; then the duplex set's, 5 voices each


def phrase_of(i: int) -> int:
    return i if i < TURN_SET_ROWS else TURN_SET_ROWS + (i - TURN_SET_ROWS) // 5


MORE_ROWS = Path("data/turn_meaning_more_rows.json")
GROUPS = 5


def more_rows() -> list[tuple[HeardText, int, MessageEnd | None, str]]:
    """The more phrasings, each heard in two dev voices (cached)."""
    import json

    if not MORE_ROWS.exists():
        from bench.fit.turn_fit import hear, models
        from bench.sets.duplex import DEV_VOICES
        from bench.sets.turn_phrasings import DEV_MORE_COMPLETE, DEV_MORE_OPEN

        scorer, asr = models()
        out = []
        for i, (text, label) in enumerate([(t, 1) for t in DEV_MORE_COMPLETE] + [(t, 0) for t in DEV_MORE_OPEN]):
            for voice in (DEV_VOICES[i % 5], DEV_VOICES[(i + 2) % 5]):
                said, lm = hear(scorer, asr, text, voice)
                out.append({"text": str(said), "confidence": said.last_word_confidence, "label": label,
                            "lm": None if lm is None else [lm.after_words, lm.before_last_word], "phrase": text})
                print(label, voice[0], repr(text), "->", repr(str(said)), file=sys.stderr, flush=True)
        MORE_ROWS.parent.mkdir(exist_ok=True)
        MORE_ROWS.write_text(json.dumps(out))
    return [(HeardText(r["text"], r["confidence"]), r["label"], None if r["lm"] is None else MessageEnd(*r["lm"]),
             r["phrase"]) for r in json.loads(MORE_ROWS.read_text())]


def group_of(phrase: str) -> int:
    return int(hashlib.sha1(phrase.encode()).hexdigest(), 16) % GROUPS


def figures(name: str, ps: list[float], labels: list[int]) -> None:
    waits = [wait_ms(p, "auto") for p in ps]
    complete = [w for w, y in zip(waits, labels) if y == 1]
    open_ = [w for w, y in zip(waits, labels) if y == 0]
    print(f"  {name:28s} complete turns' extra wait mean {np.mean(complete):4.0f} ms, p90 "
          f"{np.percentile(complete, 90):4.0f} ms; open phrases answered within 1 s "
          f"{np.mean([w < 1000 for w in open_]):.0%}")


def main() -> None:
    first = [(t, y, lm, f"first-{phrase_of(i)}") for i, (t, y, lm) in enumerate(_load())]
    rows = first + more_rows()
    labels = [y for _, y, _, _ in rows]
    words = [strip_trailing_punctuation(str(t)) or "..." for t, _, _, _ in rows]
    shipped = [end_of_turn_probability(t, lm) or 0.0 for t, _, lm, _ in rows]
    reader = wm.WordsReader(converted_model())
    for frame in FRAMES if "--frames" in sys.argv else [wm.TURN]:
        x = np.stack([reader.features(w, frame) for w in words])
        y = np.array(labels, float)
        held_out = [0.0] * len(rows)
        for g in range(GROUPS):
            train = [i for i, r in enumerate(rows) if group_of(r[3]) != g]
            head = wm.fit_logistic(x[train], y[train])
            for i, r in enumerate(rows):
                if group_of(r[3]) == g:
                    held_out[i] = wm.probability(head, x[i])
        print(f"frame {frame!r}:" + (" (shipped)" if frame == wm.TURN else ""))
        for name, part in (("the first rows", range(len(first))), ("the more phrasings", range(len(first), len(rows)))):
            print(f" {name} ({len(part)}):")
            ys = [labels[i] for i in part]
            figures("the score alone (shipped)", [shipped[i] for i in part], ys)
            figures("the reading alone", [held_out[i] for i in part], ys)
            figures("joined: mean of log-odds", [join_log_odds(shipped[i], held_out[i]) for i in part], ys)
            figures("joined: plain mean", [(shipped[i] + held_out[i]) / 2 for i in part], ys)
        if frame == wm.TURN:  # the head the examples in core/cascade/turn_examples.py make now
            from core.cascade.turn_examples import COMPLETE, OPEN

            head = wm.fit_logistic(np.stack([reader.features(w, frame) for w in [*OPEN, *COMPLETE]]),
                                   np.array([0.0] * len(OPEN) + [1.0] * len(COMPLETE)))
            part = range(len(first), len(rows))
            print(" the more phrasings, read by the head of the shipped examples (held out if they predate them):")
            figures("joined: mean of log-odds", [join_log_odds(shipped[i], wm.probability(head, x[i])) for i in part],
                    [labels[i] for i in part])
    if "--write" in sys.argv:
        write(words, labels)


def write(words: list[str], labels: list[int]) -> None:
    kinds: dict[str, set[int]] = {}
    for w, y in zip(words, labels):
        if not near_an_eval_item(w):
            kinds.setdefault(w, set()).add(y)
    write_examples(EXAMPLES, [
        "Labelled examples ``semantic_vad``'s completeness reader is fitted on (``words_meaning.py``).", "",
        "Written by ``python -m bench.fit.turn_meaning_fit --write`` from ``bench.fit.turn_fit``'s dev rows",
        "and ``bench/sets/turn_phrasings.py`` only (dev phrases as Whisper heard them at a pause,",
        "trailing punctuation stripped); a text heard in both kinds, or close to any set's eval item,",
        "is left out. Do not edit."],
        {"COMPLETE": sorted(w for w, ys in kinds.items() if ys == {1}),
         "OPEN": sorted(w for w, ys in kinds.items() if ys == {0})})


if __name__ == "__main__":
    main()
