"""The overlap judge's reading by meaning (``core/cascade/words_meaning.py``), on the dev set only.

    python -m bench.fit.meaning_fit            # ~2 min: held-out figures for the shipped settings
    python -m bench.fit.meaning_fit --write    # also rewrite core/cascade/overlap_examples.py

The examples are the dev part of ``bench/sets/duplex.py``: every backchannel, interruption and
short cut-in as written, and what Whisper heard of each whole dev clip (``bench.fit.overlap_fit``'s
glances: every phrase in every dev voice), labelled by the clip's kind. The figures below hold
each clip out **by phrase and by voice**: the head that judges a clip is fitted without its
phrase (as written or heard in any voice) and without anything heard in its voice, so a phrasing
or a voice the judge was fitted on never scores itself. Printed: that held-out judge against the
word-list judge (``bench.fit.stop_words``) on the same glances, and each written phrase held out
alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.fit.examples_file import write_examples
from bench.fit.overlap_fit import glances
from bench.fit.stop_words import _look, judge_with_stop
from bench.sets.duplex import DEV_BACKCHANNELS, DEV_CUTINS, DEV_INTERRUPTIONS
from core.cascade.llm import CACHE_NAME
from core.cascade.words_meaning import OVERLAP, WordsReader, fit_logistic, probability
from core.conversation import overlap as ov

EXAMPLES = Path(__file__).resolve().parents[2] / "core" / "cascade" / "overlap_examples.py"


def written() -> dict[str, int]:
    """Each dev phrase as written: 0 a backchannel, 1 takes the floor."""
    labels = {t: 0 for t in DEV_BACKCHANNELS}
    labels.update({t: 1 for t, _ in DEV_INTERRUPTIONS})
    labels.update({t: 1 for t in DEV_CUTINS})
    return labels


def examples(rows: list[dict]) -> tuple[list[tuple[str, int, str | None, str]], list[str]]:
    """(text, label, voice or None for written, phrase) for every example, and the texts heard in
    both kinds (left out: they say nothing either way)."""
    out = [(t, y, None, t) for t, y in written().items()]
    out += [(r["whole"].strip(), int(r["kind"] == "interruption"), r["voice"], r["text"])
            for r in rows if ov.words_of(r["whole"])]
    kinds: dict[str, set[int]] = {}
    for t, y, _, _ in out:
        kinds.setdefault(t, set()).add(y)
    both = sorted(t for t, ys in kinds.items() if len(ys) > 1)
    return [e for e in out if e[0] not in both], both


def judge(r: dict, p) -> tuple[str, int]:
    """The shipped Overlap judge over a dev clip's glances, ``p(words)`` its meaning reader."""
    o = ov.Overlap("item", 0, None, 0.0)
    for ms in range(ov.GLANCE_FIRST_MS, ov.LONGEST_BACKCHANNEL_MS, ov.GLANCE_EVERY_MS):
        if ms >= r["ms"]:
            break
        words = _look(r, ms)
        chance = p(words) if ov.words_of(words) and not ov.says_stop(words) else None
        if o.glanced(words, ms, chance) is not None:
            return o.verdict, ms
    if r["ms"] >= ov.LONGEST_BACKCHANNEL_MS:
        return "interruption", ov.LONGEST_BACKCHANNEL_MS
    words = r["whole"]
    chance = p(words) if ov.words_of(words) and not ov.says_stop(words) else None
    return o.ended(words, r["ms"], chance), r["ms"]


def summary(name: str, verdicts: list[tuple[dict, str, int]]) -> None:
    bcs = [(r, v) for r, v, _ in verdicts if r["kind"] == "backchannel"]
    ints = [(r, v, ms) for r, v, ms in verdicts if r["kind"] == "interruption"]
    false = [f"{r['text']!r} ({r['voice']}: {r['whole']!r})" for r, v in bcs if v == "interruption"]
    missed = [f"{r['text']!r} ({r['voice']})" for r, v, _ in ints if v != "interruption"]
    p50 = float(np.median([ms for _, v, ms in ints if v == "interruption"]))
    print(f"{name}: backchannels taken as interruptions {len(false)}/{len(bcs)}; interruptions missed "
          f"{len(missed)}/{len(ints)}; voice at the verdict p50 {p50:.0f} ms")
    for line in false + missed:
        print("   ", line)


def main() -> None:
    rows = glances(silence_pad="--silence-pad" in sys.argv)
    reader = WordsReader(Path("data/models") / CACHE_NAME)
    cache: dict[str, np.ndarray] = {}

    def features(text: str) -> np.ndarray:
        text = text.strip()
        if text not in cache:
            cache[text] = reader.features(text, OVERLAP)
        return cache[text]

    ex, both = examples(rows)
    print(f"{len(ex)} examples ({len({e[0] for e in ex})} texts); heard in both kinds, left out: {both}",
          file=sys.stderr)
    verdicts = []
    for r in rows:  # held out by phrase and by voice
        train = [(t, y) for t, y, voice, phrase in ex if phrase != r["text"] and voice != r["voice"]]
        head = fit_logistic(np.stack([features(t) for t, _ in train]), np.array([y for _, y in train], float))
        verdicts.append((r, *judge(r, lambda w, head=head: probability(head, features(w)))))
    summary("by meaning, held out by phrase and voice", verdicts)
    summary("word list (shipped before)", [(r, *judge_with_stop(r)) for r in rows])
    wrong = []
    labels = written()
    for text, y in labels.items():  # each written phrase alone against the other written phrases
        train = [(t, z) for t, z in labels.items() if t != text]
        head = fit_logistic(np.stack([features(t) for t, _ in train]), np.array([z for _, z in train], float))
        if (probability(head, features(text)) >= ov.MEANING_THRESHOLD) != bool(y):
            wrong.append(text)
    print(f"written phrases, each held out from the written rest: {len(wrong)}/{len(labels)} wrong {wrong}")
    if "--write" in sys.argv:
        write(ex)


def write(ex: list[tuple[str, int, str | None, str]]) -> None:
    write_examples(EXAMPLES, [
        "Labelled examples the overlap judge's meaning reader is fitted on (``words_meaning.py``).", "",
        "Written by ``python -m bench.fit.meaning_fit --write`` from the dev part of",
        "``bench/sets/duplex.py`` only: each dev backchannel, interruption and short cut-in as written,",
        "and what Whisper heard of each whole dev clip (every phrase in every dev voice). Do not edit."],
        {"BACKCHANNELS": sorted({t for t, y, _, _ in ex if y == 0}),
         "INTERRUPTIONS": sorted({t for t, y, _, _ in ex if y == 1})})


if __name__ == "__main__":
    main()
