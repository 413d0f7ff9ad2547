"""Every evaluation set in one place, each split into a ``dev`` part and an ``eval`` part.

- ``answers`` (``bench/sets/answers.py``): simple questions with accepted key words.
- ``tools`` (``bench/sets/tools.py``): prompts that need a function call, and decoys.
- ``turns`` (``bench/sets/turns.py``): spoken complete turns, and turns paused mid-sentence.
- ``duplex`` (``bench/sets/duplex.py``): spoken turns, pauses, backchannels, interruptions and
  long-answer prompts for ``python -m bench duplex``, with their own voices per part.

``dev`` is where prompts, few-shot examples, thresholds, weights and word lists are chosen, and
where test cases come from; ``eval`` is run once a choice is made and appears nowhere else:
``tests/unit/test_eval_leaks.py`` fails when the normalised text of an ``eval`` item appears in a
shipped file or a test. A new set adds its module here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class EvalSet:
    name: str
    dev: tuple[str, ...]  # the texts of the dev items
    eval: tuple[str, ...]  # the texts of the held-out items


def normalise(text: str) -> str:
    """Lower case, apostrophes dropped, every other run of non-alphanumerics one space: the same
    words match whatever the quoting, punctuation or line breaks around them."""
    text = text.lower().replace("\u2019", "'").replace("'", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text).split())


def all_sets() -> list[EvalSet]:
    from bench.sets import answers, duplex, tools, turns

    return [
        EvalSet("answers", tuple(x.text for x in answers.DEV), tuple(x.text for x in answers.EVAL)),
        EvalSet("tools", tuple(c[0] for c in tools.DEV), tuple(c[0] for c in tools.EVAL)),
        EvalSet("turns", tuple(turns.DEV_COMPLETE + turns.DEV_OPEN),
                # a paused item's opening (the words before the pause) and its whole text
                tuple(turns.EVAL_COMPLETE + [text for before, _, after in turns.EVAL_PAUSED
                                             for text in (before, f"{before} {after}")])),
        EvalSet("duplex", tuple(duplex.texts("dev")), tuple(duplex.texts("eval"))),
    ]
