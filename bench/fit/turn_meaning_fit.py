"""``semantic_vad``'s reading of a turn's completeness by meaning (``core/cascade/words_meaning.py``,
``TURN``), on the dev set only.

    python -m bench.fit.turn_meaning_fit            # ~30 s on bench.fit.turn_fit's cached rows
    python -m bench.fit.turn_meaning_fit --write    # also rewrite core/cascade/turn_examples.py

The rows are ``bench.fit.turn_fit``'s (``data/turn_fit_rows.json``; ``python -m bench.fit.turn_fit``
makes them): every dev phrase of the turn set (41 complete, 40 cut off) and of the full-duplex set
(16 complete requests and 16 paused items' openings, each in its 5 dev voices), as Whisper heard
them at a pause, with the LM's end-of-message probabilities. Each row's reading is scored by a
head fitted **without its phrase** (in any voice). Printed, for the shipped score alone, the head
alone and the two joined (``end_of_turn.join_log_odds``; the plain mean also shown): the extra
wait on complete turns (mean, p90) and the share of open phrases answered within 1 s (auto
eagerness), as ``bench.fit.turn_fit`` counts them; and for each of three frames (the one shipped
was chosen here, by those figures).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.fit.examples_file import write_examples
from bench.fit.turn_fit import _load
from core.cascade import words_meaning as wm
from core.cascade.llm import CACHE_NAME
from core.conversation.end_of_turn import end_of_turn_probability, join_log_odds, strip_trailing_punctuation, wait_ms

EXAMPLES = Path(__file__).resolve().parents[2] / "core" / "cascade" / "turn_examples.py"
FRAMES = [wm.TURN, ('The user said: "', ""), wm.OVERLAP]
TURN_SET_ROWS = 81  # the turn set's phrases come first, one row each; then the duplex set's, 5 voices each


def phrase_of(i: int) -> int:
    return i if i < TURN_SET_ROWS else TURN_SET_ROWS + (i - TURN_SET_ROWS) // 5


def figures(name: str, ps: list[float], labels: list[int]) -> None:
    waits = [wait_ms(p, "auto") for p in ps]
    complete = [w for w, y in zip(waits, labels) if y == 1]
    open_ = [w for w, y in zip(waits, labels) if y == 0]
    print(f"  {name:28s} complete turns' extra wait mean {np.mean(complete):4.0f} ms, p90 "
          f"{np.percentile(complete, 90):4.0f} ms; open phrases answered within 1 s "
          f"{np.mean([w < 1000 for w in open_]):.0%}")


def main() -> None:
    rows = _load()
    labels = [y for _, y, _ in rows]
    words = [strip_trailing_punctuation(str(t)) or "..." for t, _, _ in rows]
    shipped = [end_of_turn_probability(t, lm) or 0.0 for t, _, lm in rows]
    reader = wm.WordsReader(Path("data/models") / CACHE_NAME)
    for frame in FRAMES:
        x = np.stack([reader.features(w, frame) for w in words])
        y = np.array(labels, float)
        held_out = [0.0] * len(rows)
        for phrase in sorted({phrase_of(i) for i in range(len(rows))}):
            train = [i for i in range(len(rows)) if phrase_of(i) != phrase]
            head = wm.fit_logistic(x[train], y[train])
            for i in range(len(rows)):
                if phrase_of(i) == phrase:
                    held_out[i] = wm.probability(head, x[i])
        print(f"frame {frame!r}:" + (" (shipped)" if frame == wm.TURN else ""))
        figures("the score alone (shipped)", shipped, labels)
        figures("the reading alone", held_out, labels)
        figures("joined: mean of log-odds", [join_log_odds(p, q) for p, q in zip(shipped, held_out)], labels)
        figures("joined: plain mean", [(p + q) / 2 for p, q in zip(shipped, held_out)], labels)
    if "--write" in sys.argv:
        write(words, labels)


def near_an_eval_item(text: str) -> bool:
    """A heard dev phrase can come out close to another set's eval item, word for word:
    such a text stays out of shipped code (``tests/unit/test_eval_leaks.py``)."""
    from bench.sets import Item, Text, all_sets

    t = Text(text)
    return any(Item.of(item).found_in(t) for s in all_sets() for item in s.eval)


def write(words: list[str], labels: list[int]) -> None:
    kinds: dict[str, set[int]] = {}
    for w, y in zip(words, labels):
        if not near_an_eval_item(w):
            kinds.setdefault(w, set()).add(y)
    write_examples(EXAMPLES, [
        "Labelled examples ``semantic_vad``'s completeness reader is fitted on (``words_meaning.py``).", "",
        "Written by ``python -m bench.fit.turn_meaning_fit --write`` from ``bench.fit.turn_fit``'s dev rows",
        "only (the turn set's and the full-duplex set's dev phrases as Whisper heard them at a pause,",
        "trailing punctuation stripped); a text heard in both kinds, or close to any set's eval item,",
        "is left out. Do not edit."],
        {"COMPLETE": sorted(w for w, ys in kinds.items() if ys == {1}),
         "OPEN": sorted(w for w, ys in kinds.items() if ys == {0})})


if __name__ == "__main__":
    main()
