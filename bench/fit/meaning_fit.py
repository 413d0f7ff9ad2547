"""The overlap judge's reading by meaning (``core/cascade/words_meaning.py``), on the dev set only.

    python -m bench.fit.meaning_fit            # ~10 min the first time (speaks and glances), ~3 min after
    python -m bench.fit.meaning_fit --write    # also rewrite core/cascade/overlap_examples.py
    python -m bench.fit.meaning_fit --second-look  # a second reading of the whole turn, before answering
    python -m bench.fit.meaning_fit --sweep --glance-prompt="..."  # glances after another prompt ("": none)
    python -m bench.fit.meaning_fit --sweep --fit-on=prompted  # the head fitted on prompted glances (or "both")
    python -m bench.fit.meaning_fit --sweep --written-copies=3  # written phrasings weighed 3x (shipped: 2)
    python -m bench.fit.meaning_fit --sweep --thresholds=0.1,0.2  # other thresholds than 0.3-0.7
    python -m bench.fit.meaning_fit --sweep --varied  # fitted with the varied phrasings too (not shipped)

The examples are dev only: the dev part of ``bench/sets/duplex.py`` (every backchannel,
interruption and short cut-in) and ``bench/sets/overlap_phrasings.py`` (more backchannels and
cut-ins, written apart from eval), each as written and as Whisper heard it in every dev voice
(``bench.fit.overlap_fit``'s glances without a prompt), labelled by the clip's kind. The judge
is measured on glances decoded after the shipped ``asr.GLANCE_PROMPT``, as the product glances:
a head fitted on those instead (``--fit-on``) read clean written phrasings worse
(``tests/unit/test_words_meaning.py``: "Good idea." 0.84; with both, "Say that again?" below
0.5). Each phrase as written counts ``WRITTEN_COPIES`` times in the fit, each clip heard once;
``--write`` keeps those counts in the examples file, so the product fits the head measured here.
The figures below hold each clip out **by phrase and by voice**: the head that judges a clip is
fitted without its phrase group (a fifth of the phrases, as written or heard in any voice) and without anything heard in its
voice, so a phrasing or a voice the judge was fitted on never scores itself. Printed, for each
ridge strength tried: that held-out judge against the word-list judge (``bench.fit.stop_words``) on
the duplex set's glances, and each written phrase held out with its group.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.fit.examples_file import write_examples
from bench.fit.overlap_fit import glances, prompt_key
from bench.fit.stop_words import _look, judge_with_stop
from bench.sets.duplex import DEV_BACKCHANNELS, DEV_CUTINS, DEV_INTERRUPTIONS
from bench.sets.overlap_phrasings import (DEV_MORE_BACKCHANNELS, DEV_MORE_CUTINS, DEV_MORE_FLOOR_QUESTIONS,
                                          DEV_VARIED_BACKCHANNELS, DEV_VARIED_FLOOR_TAKERS)
from core.cascade.llm import CACHE_NAME, converted_model
from core.cascade.words_meaning import L2, OVERLAP, WordsReader, fit_counted, fit_logistic, probability
from core.conversation import overlap as ov

EXAMPLES = Path(__file__).resolve().parents[2] / "core" / "cascade" / "overlap_examples.py"
MORE_CACHE = Path(__file__).resolve().parents[2] / "data" / "overlap_fit_more.json"
QUESTIONS_CACHE = MORE_CACHE.with_name("overlap_fit_questions.json")
VARIED_CACHE = MORE_CACHE.with_name("overlap_fit_varied.json")
FEATURES = Path(__file__).resolve().parents[2] / "data" / "meaning_fit_features.npz"
GROUPS = 5  # phrase groups held out together
L2S = (L2 / 3, L2, L2 * 3)  # ridge strengths compared (the shipped one in the middle)
# Each phrase as written counts this many times in the fit, each clip heard once (issue 47, eighth
# stop, chosen on dev with ``--sweep --written-copies=K``): the clean phrasings teach the meaning,
# the heard ones how Whisper bends it. 1: 138 backchannels taken / 56 floor-takers missed at 0.5;
# 2: 130 / 39; 3: 133 / 44; 4: 135 / 35 (all 1435 dev clips, each held out by phrase and voice).
WRITTEN_COPIES = 2
TAKES_THE_FLOOR = ("interruption", "cutin")


def _key() -> str:
    from core.cascade import words_meaning as wm

    return f"{wm.VERSION}-{wm.LAYER}-{OVERLAP}-{CACHE_NAME}"


def more_rows(silence_pad: bool = False, prompt: str | None = None, varied: bool = False) -> list[dict]:
    """``bench.fit.overlap_fit``'s glances over the dev cut-ins and the more phrasings (each batch
    added after the first fit cached apart: the questions, the varied phrasings; ``silence_pad``:
    padded with the log-mel of silence, cached apart too; ``prompt``: glanced after that previous
    text, cached apart; ``varied``: with the varied phrasings, which the shipped head is not fitted on)."""
    batches = [
        ([("backchannel", t) for t in DEV_MORE_BACKCHANNELS]
         + [("cutin", t) for t in [*DEV_CUTINS, *DEV_MORE_CUTINS]], MORE_CACHE),
        ([("cutin", t) for t in DEV_MORE_FLOOR_QUESTIONS], QUESTIONS_CACHE),
        ([("backchannel", t) for t in DEV_VARIED_BACKCHANNELS]
         + [("cutin", t) for t in DEV_VARIED_FLOOR_TAKERS], VARIED_CACHE),
    ][: 3 if varied else 2]
    rows = []
    for clips, cache in batches:
        if silence_pad:
            cache = cache.with_name(cache.stem + "_silence.json")
        if prompt:
            cache = cache.with_name(f"{cache.stem}_prompt{prompt_key(prompt)}.json")
        rows += glances(silence_pad, clips=clips, cache=cache, prompt=prompt)
    return rows


def group_of(phrase: str) -> int:
    """A phrase's held-out group: stable across runs (not Python's salted ``hash``)."""
    return int(hashlib.sha1(phrase.encode()).hexdigest(), 16) % GROUPS


class WordsFeatures(dict):
    """SmolLM2's readings of words (``words_meaning``), cached in ``FEATURES`` across runs (the same
    model, layer and frame); a text no earlier run read is read when first asked for. Called with a
    text, the reading of its stripped words; ``keep()`` saves what is new."""

    def __init__(self) -> None:
        super().__init__()
        if FEATURES.exists():
            with np.load(FEATURES) as kept:
                if str(kept["key"]) == _key():
                    xs = kept["x"]  # each kept[...] reads the array anew: once
                    self.update({str(t): xs[i] for i, t in enumerate(kept["texts"])})
        self._known = len(self)
        self._reader: WordsReader | None = None

    def __missing__(self, text: str) -> np.ndarray:
        if self._reader is None:
            self._reader = WordsReader(converted_model())
        self[text] = self._reader.features(text, OVERLAP)
        return self[text]

    def __call__(self, text: str) -> np.ndarray:
        return self[text.strip()]

    def keep(self) -> None:
        if len(self) > self._known:
            texts = sorted(self)
            np.savez(FEATURES, key=_key(), texts=np.array(texts), x=np.stack([self[t] for t in texts]))


def fit_heads(ex, x, folds, left_out, l2: float = L2) -> dict:
    """A words' head per fold, each fitted without the examples ``left_out(fold, voice, phrase)``."""
    heads = {}
    for f in folds:
        train = [(t, y) for t, y, voice, phrase in ex if not left_out(f, voice, phrase)]
        heads[f] = fit_logistic(np.stack([x[t] for t, _ in train]), np.array([y for _, y in train], float), l2)
    return heads


def held_out_heads(ex, x, voices, l2: float = L2) -> dict:
    """A head per (phrase group, voice), fitted without that group's phrases and that voice."""
    return fit_heads(ex, x, [(g, v) for g in range(GROUPS) for v in voices],
                     lambda f, voice, phrase: group_of(phrase) == f[0] or voice == f[1], l2)


@contextmanager
def meaning_threshold(threshold: float):
    """The judge's ``MEANING_THRESHOLD`` at ``threshold`` for a while, then the shipped one again."""
    shipped, ov.MEANING_THRESHOLD = ov.MEANING_THRESHOLD, threshold
    try:
        yield
    finally:
        ov.MEANING_THRESHOLD = shipped


def written(varied: bool = False) -> dict[str, int]:
    """Each dev phrase as written: 0 a backchannel, 1 takes the floor (``varied``: the varied
    phrasings too)."""
    labels = {t: 0 for t in [*DEV_BACKCHANNELS, *DEV_MORE_BACKCHANNELS, *(DEV_VARIED_BACKCHANNELS if varied else [])]}
    labels.update({t: 1 for t, _ in DEV_INTERRUPTIONS})
    labels.update({t: 1 for t in [*DEV_CUTINS, *DEV_MORE_CUTINS, *DEV_MORE_FLOOR_QUESTIONS,
                                  *(DEV_VARIED_FLOOR_TAKERS if varied else [])]})
    return labels


def examples(rows: list[dict], varied: bool = False) -> tuple[list[tuple[str, int, str | None, str]], list[str]]:
    """(text, label, voice or None for written, phrase) for every example, and the texts heard in
    both kinds (left out: they say nothing either way)."""
    out = [(t, y, None, t) for t, y in written(varied).items()]
    out += [(r["whole"].strip(), int(r["kind"] in TAKES_THE_FLOOR), r["voice"], r["text"])
            for r in rows if ov.words_of(r["whole"])]
    kinds: dict[str, set[int]] = {}
    for t, y, _, _ in out:
        kinds.setdefault(t, set()).add(y)
    both = sorted(t for t, ys in kinds.items() if len(ys) > 1)
    # a text with a stop word is an interruption by the rule before any reading: as an example it
    # would only teach the head that "no" in "No way!" acknowledges
    return [e for e in out if e[0] not in both and not ov.says_stop(e[0])], both


def judge(r: dict, p, confirmed=None) -> tuple[str, int]:
    """The shipped Overlap judge over a dev clip's glances, ``p(words)`` its meaning reader.
    ``confirmed(words, ms)`` (``ms`` None for the whole clip), when given, must agree before an
    interruption call stands (a second ear, ``bench.fit.second_ear``); a call it withdraws leaves
    the judge listening, and a whole clip's withdrawn call is a backchannel."""
    o = ov.Overlap("item", 0, None, 0.0)
    for ms in range(ov.GLANCE_FIRST_MS, ov.LONGEST_BACKCHANNEL_MS, ov.GLANCE_EVERY_MS):
        if ms >= r["ms"]:
            break
        words = _look(r, ms)
        chance = p(ov.without_hums(words)) if ov.words_of(words) and not ov.says_stop(words) else None
        if o.glanced(words, ms, chance) is not None:
            if confirmed is None or confirmed(words, ms):
                return o.verdict, ms
            o.verdict, o.in_a_row = None, 0  # withdrawn: this glance did not take the floor
    if r["ms"] >= ov.LONGEST_BACKCHANNEL_MS:
        return "interruption", ov.LONGEST_BACKCHANNEL_MS
    words = r["whole"]
    chance = p(ov.without_hums(words)) if ov.words_of(words) and not ov.says_stop(words) else None
    verdict = o.ended(words, r["ms"], chance)
    if verdict == "interruption" and confirmed is not None and not confirmed(words, None):
        return "backchannel", r["ms"]
    return verdict, r["ms"]


def summary(name: str, verdicts: list[tuple[dict, str, int]], verbose: bool = True) -> None:
    bcs = [(r, v) for r, v, _ in verdicts if r["kind"] == "backchannel"]
    ints = [(r, v, ms) for r, v, ms in verdicts if r["kind"] in TAKES_THE_FLOOR]
    false = [f"{r['text']!r} ({r['voice']}: {r['whole']!r})" for r, v in bcs if v == "interruption"]
    missed = [f"{r['text']!r} ({r['voice']})" for r, v, _ in ints if v != "interruption"]
    p50 = float(np.median([ms for _, v, ms in ints if v == "interruption"]))
    print(f"{name}: backchannels taken as interruptions {len(false)}/{len(bcs)}; interruptions and cut-ins "
          f"missed {len(missed)}/{len(ints)}; voice at the verdict p50 {p50:.0f} ms")
    for line in (false + missed) if verbose else []:
        print("   ", line)


def _option(name: str, default: str) -> str:
    """The value of ``name=VALUE`` on the command line, else ``default``."""
    return next((a.split("=", 1)[1] for a in sys.argv if a.startswith(name + "=")), default)


def main() -> None:
    silence_pad = "--silence-pad" in sys.argv
    from core.cascade.asr import GLANCE_PROMPT

    # the shipped glances by default; --glance-prompt= (empty) for glances without a prompt
    prompt = _option("--glance-prompt", GLANCE_PROMPT)
    duplex_rows = glances(silence_pad=silence_pad, prompt=prompt)
    varied = "--varied" in sys.argv
    rows = duplex_rows + more_rows(silence_pad, prompt, varied)
    features = WordsFeatures()
    keep = features.keep
    if "--shipped" in sys.argv:  # the head of core/cascade/overlap_examples.py's examples on the more phrasings
        from core.cascade.overlap_examples import BACKCHANNELS, INTERRUPTIONS

        head = fit_counted(features, BACKCHANNELS, INTERRUPTIONS)
        more = rows[len(duplex_rows):]
        verdicts = [(r, judge(r, lambda w: probability(head, features(w)))[0]) for r in more]
        bcs = [v for r, v in verdicts if r["kind"] == "backchannel" and not ov.says_stop(r["text"])]
        floor = [v for r, v in verdicts if r["kind"] in TAKES_THE_FLOOR]
        keep()
        print(f"the shipped examples' head on the more phrasings' clips (held out if they predate them): "
              f"backchannels taken {sum(v == 'interruption' for v in bcs)}/{len(bcs)} (stop-word ones apart); "
              f"interruptions and cut-ins missed {sum(v != 'interruption' for v in floor)}/{len(floor)}")
        return
    # The head is fitted on what glances heard without the prompt (shipped), with it, or both.
    fit_on = _option("--fit-on", "unprompted")
    heard = rows
    if prompt and fit_on != "prompted":
        unprompted = glances(silence_pad=silence_pad) + more_rows(silence_pad, varied=varied)
        heard = unprompted if fit_on == "unprompted" else rows + unprompted
    ex, both = examples(heard, varied)
    copies = int(_option("--written-copies", str(WRITTEN_COPIES)))
    ex += [e for e in ex if e[2] is None] * (copies - 1)  # written phrasings weighed above heard ones
    print(f"{len(ex)} examples ({len({e[0] for e in ex})} texts); heard in both kinds, left out: {len(both)}",
          file=sys.stderr)
    x = {t: features(t) for t, _, _, _ in ex}
    voices = sorted({r["voice"] for r in rows})
    labels = written(varied)
    in_duplex = {id(r) for r in duplex_rows}
    if "--sweep" in sys.argv:
        parts = {"all dev clips": rows, "the more phrasings' clips": rows[len(duplex_rows):]}
        if varied:
            added = set(DEV_VARIED_BACKCHANNELS) | set(DEV_VARIED_FLOOR_TAKERS)
            parts["the clips before the varied phrasings (the shipped head's dev clips)"] = [
                r for r in rows if r["text"] not in added]
            parts["the varied phrasings' clips"] = [r for r in rows if r["text"] in added]
        sweep(rows, ex, x, voices, features, parts)
        keep()
        return
    if "--second-look" in sys.argv:
        second_look(rows, ex, x, voices, features)
        keep()
        return
    for l2 in L2S:
        heads = held_out_heads(ex, x, voices, l2)
        verdicts = [(r, *judge(r, lambda w, h=heads[group_of(r["text"]), r["voice"]]: probability(h, features(w))))
                    for r in rows]
        shipped = " (shipped)" if l2 == L2 else ""
        print(f"\nridge {l2:g}{shipped}")
        summary("by meaning, duplex dev clips", [v for v in verdicts if id(v[0]) in in_duplex], verbose=l2 == L2)
        summary("by meaning, the more phrasings' clips", [v for v in verdicts if id(v[0]) not in in_duplex],
                verbose=l2 == L2)
        wrong = []
        for g in range(GROUPS):  # each written phrase against a head fitted without its group's phrases
            train = [(t, z) for t, z in labels.items() if group_of(t) != g]
            head = fit_logistic(np.stack([features(t) for t, _ in train]), np.array([z for _, z in train], float), l2)
            wrong += [t for t, z in labels.items()
                      if group_of(t) == g and (probability(head, features(t)) >= ov.MEANING_THRESHOLD) != bool(z)]
        print(f"written phrases, each held out with its group: {len(wrong)}/{len(labels)} wrong {wrong}")
    keep()
    summary("\nword list (shipped before), duplex dev clips", [(r, *judge_with_stop(r)) for r in duplex_rows])
    if "--write" in sys.argv:
        if fit_on != "unprompted" or copies != WRITTEN_COPIES:
            sys.exit("--write writes the shipped examples: from the glances without a prompt, "
                     f"the written phrasings {WRITTEN_COPIES}x")
        write(ex)


def second_look(rows, ex, x, voices, features) -> None:
    """What a second look at the whole turn's transcript would do before answering a voice the
    glances called an interruption: resume the reply when the whole clip reads as a backchannel
    (below ``t``, no stop word). Per threshold: backchannels it would win back, and clips that take
    the floor it would wrongly resume (an ignored cut-in), each clip judged by heads fitted
    without its phrase group and its voice (the glances' and the second look's alike)."""
    heads = held_out_heads(ex, x, voices)
    called = []  # (row, P(floor) of the whole clip, or None when a stop word or no words decide)
    for r in rows:
        head = heads[group_of(r["text"]), r["voice"]]
        verdict, _ = judge(r, lambda w, h=head: probability(h, features(w)))
        if verdict != "interruption":
            continue
        whole = r["whole"]
        p = probability(head, features(whole)) if ov.words_of(whole) and not ov.says_stop(whole) else None
        called.append((r, p))
    bcs = [(r, p) for r, p in called if r["kind"] == "backchannel"]
    floor = [(r, p) for r, p in called if r["kind"] in TAKES_THE_FLOOR]
    print(f"called interruptions by the glances: {len(bcs)} backchannels, {len(floor)} that take the floor")
    print("| second look below | backchannels won back | floor-takers wrongly resumed |\n|---|---|---|")
    for t in (0.05, 0.1, 0.2, 0.3, 0.4, 0.5):
        won = [r for r, p in bcs if p is not None and p < t]
        lost = [r for r, p in floor if p is not None and p < t]
        print(f"| {t:.2f} | {len(won)}/{len(bcs)} | {len(lost)}/{len(floor)} |")
        if t == 0.2:
            print("    wrongly resumed at 0.20:", [f"{r['text']!r} heard {r['whole']!r}" for r in lost][:15])


def sweep(rows, ex, x, voices, features, parts: dict[str, list[dict]]) -> None:
    """The trade-off by threshold: backchannels taken (those whose phrase says a stop word counted
    apart: the rule takes them, as the issue asks) and interruptions or cut-ins missed, every clip
    held out by phrase and voice; on each of ``parts`` (name: its clips)."""
    heads = held_out_heads(ex, x, voices)
    for part, of_part in parts.items():
        print(f"\n{part}")
        for threshold in map(float, _option("--thresholds", "0.3,0.4,0.5,0.6,0.7").split(",")):
            with meaning_threshold(threshold):
                verdicts = [(r, judge(r, lambda w, h=heads[group_of(r["text"]), r["voice"]]: probability(h, features(w)))[0])
                            for r in of_part]
            bcs = [(r, v) for r, v in verdicts if r["kind"] == "backchannel"]
            by_rule = [r for r, _ in bcs if ov.says_stop(r["text"])]
            taken = sum(v == "interruption" for r, v in bcs if not ov.says_stop(r["text"]))
            floor = [(r, v) for r, v in verdicts if r["kind"] in TAKES_THE_FLOOR]
            missed = sum(v != "interruption" for _, v in floor)
            print(f"  threshold {threshold}: backchannels taken {taken}/{len(bcs) - len(by_rule)} "
                  f"({taken / (len(bcs) - len(by_rule)):.0%}; {len(by_rule)} more say a stop word); "
                  f"interruptions and cut-ins missed {missed}/{len(floor)} ({missed / len(floor):.0%})")


def write(ex: list[tuple[str, int, str | None, str]]) -> None:
    """The examples as (text, count): the count is how many times the fit sees the text (each
    clip heard as it, and ``WRITTEN_COPIES`` for a phrase as written), as the held-out figures fit."""
    counts = Counter((t, y) for t, y, _, _ in ex)
    write_examples(EXAMPLES, [
        "Labelled examples the overlap judge's meaning reader is fitted on (``words_meaning.py``).", "",
        "Written by ``python -m bench.fit.meaning_fit --write`` from the dev part of",
        "``bench/sets/duplex.py`` and ``bench/sets/overlap_phrasings.py`` only: each dev backchannel,",
        "interruption and short cut-in as written, and what Whisper heard of each whole dev clip (every",
        "phrase in every dev voice, glanced without a prompt); a text close to any set's eval item is",
        "left out. Each with the times it counts in the fit: once per clip heard as it, and",
        f"{WRITTEN_COPIES} times as a phrase written (``meaning_fit.WRITTEN_COPIES``). Do not edit."],
        {"BACKCHANNELS": sorted((t, n) for (t, y), n in counts.items() if y == 0),
         "INTERRUPTIONS": sorted((t, n) for (t, y), n in counts.items() if y == 1)})


if __name__ == "__main__":
    main()
