"""No evaluation item outside its set, and no item in two sets or parts: a figure measured on
``eval`` is only worth something if no prompt, few-shot example, grammar, word list or test case was
written with that item, or a near-copy of it, in view.

Every file of the project (tracked or new, not ignored; binary files skipped) is searched for every
``eval`` item of every set in ``bench/sets`` with the near-copy matcher (``bench.sets.Item``: the
whole item, a distinctive window of its words, or all its content words close together, after
contractions, number words and British spellings are made one form). Only the sets themselves
(``bench/sets/``) and the benchmark write-ups (``docs/benchmarks.md``,
``docs/benchmarks-history.md``: a write-up lists what a run got wrong) may name eval items.
"""

from __future__ import annotations

import subprocess

import pytest

from bench.sets import EvalSet, Item, Text, all_sets, near_copies, normalise
from tests.support.stack import ROOT

ALLOWED = ("bench/sets/", "docs/benchmarks.md", "docs/benchmarks-history.md")


def project_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if not f.startswith(ALLOWED) and (ROOT / f).is_file()]


def leaks(texts: dict[str, str], sets: list[EvalSet]) -> list[str]:
    """``path: set eval item`` for every eval item found (whole or as a near-copy) in a file."""
    items = [(s.name, Item.of(item)) for s in sets for item in s.eval]
    found = []
    for path, text in texts.items():
        t = Text(text)
        found += [f"{path}: {name} eval item {item.text!r}" for name, item in items if item.found_in(t)]
    return found


def read_text(path: str) -> str | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary (images, audio): no prompt or test case lives there


@pytest.mark.parametrize("s", all_sets(), ids=lambda s: s.name)
def test_every_set_has_disjoint_dev_and_eval_parts(s: EvalSet):
    dev, held_out = {normalise(t) for t in s.dev}, {normalise(t) for t in s.eval}
    assert len(s.dev) >= 10 and len(s.eval) >= 10, (len(s.dev), len(s.eval))
    assert not dev & held_out, sorted(dev & held_out)


def test_no_eval_item_in_a_shipped_file_a_test_or_a_doc():
    texts = {path: text for path in project_files() if (text := read_text(path)) is not None}
    # the scan reads code, tests and the docs other than the write-ups
    read = {"core/cascade/voice_prompt.py", "tests/unit/test_semantic_vad.py", "docs/protocol.md"}
    assert read <= set(texts)
    found = leaks(texts, all_sets())
    assert not found, "eval items outside bench/sets and the benchmark write-ups (choose on dev, test " \
        "with dev items, reword docs):\n" + "\n".join(found)


def test_no_item_in_two_sets_or_parts():
    """Each item is in one part of one set: no two items of different sets or parts are the same,
    and no eval item and an item of another set or part are near-copies (``Item.copy_in``, either
    way). Two dev items of different sets may share words ("How long should I" and "How long
    should I boil pasta?"): both are for tuning."""
    items = [(s.name, part, Item.of(text), Text(text)) for s in all_sets() for part in ("dev", "eval")
             for text in getattr(s, part)]
    pairs = []
    for i, (name, part, item, text) in enumerate(items):
        for other_name, other_part, other, other_text in items[i + 1:]:
            if (name, part) == (other_name, other_part):
                continue
            if item.words == other.words or ("eval" in (part, other_part) and (
                    item.copy_in(other_text) or other.copy_in(text))):
                pairs.append(f"{name} {part} {item.text!r} ~ {other_name} {other_part} {other.text!r}")
    assert not pairs, "items in two sets or parts (replace one with a new item):\n" + "\n".join(pairs)


def test_the_check_sees_an_item_whatever_its_quoting():
    s = EvalSet("example", dev=("What is one plus one?",), eval=("What's the capital of Peru?",))
    quoted = 'PROMPT = ("Asked \\"WHAT\'S THE capital "\n    "of Peru?\\", you say: Lima.")'
    assert leaks({"x.py": quoted}, [s]) == ["x.py: example eval item \"What's the capital of Peru?\""]
    assert leaks({"x.py": "the capital of Peruvia"}, [s]) == []  # whole words only
    assert leaks({"x.py": "What is one plus one?"}, [s]) == []  # dev items are free to use


# Some of the issue's own examples are eval items: these cases are built alike from invented ones.
@pytest.mark.parametrize("text, item", [
    ("What colour is the sea?", "What colour is the sea on a calm day?"),  # a window of its words
    ("How many days are there in a fortnight?", "How many days are in a fortnight?"),  # content words, close
    ("What's the capital of Peru?", "What is the capital of Peru?"),  # contractions
    ("Set a timer for 12 minutes", "Please set a timer for twelve minutes."),  # number words
    ("Which is your FAVOURITE colour", "Which is your favorite color?"),  # British spellings
    ("I can't see twenty-one cats", "I cannot see 21 cats."),
    ('say("Uh-huh!")', "Uh-huh."),  # a backchannel, whole
    # filler swaps on short items (issue 69): a discourse marker changed, added or dropped
    ('("Alright, none of that.", "alright none of that")', "Okay, none of that."),
    ('CUES = ["Marvellous."]', "Yeah, marvellous."),
    ("Could I cut in?", "May I cut in here?"),
])
def test_the_matcher_sees_near_copies(text: str, item: str):
    assert Item.of(item).found_in(text)


@pytest.mark.parametrize("text, item", [
    ("What is the capital of France?", "What is the capital of Chile?"),  # a template and one word
    ("How many legs does a bird have?", "How many legs does a crab have?"),
    ("What colour is a ripe strawberry?", "What colour is a ripe lemon?"),  # a template of two content words
    ("Tell me a long story about a dragon.", "Tell me a long story about a lighthouse."),
    ("Tell me a long story.", "Tell me a long story about a lighthouse keeper's cat."),  # < half its content
    ("import time\nfrom datetime import UTC", "Tell me the time in Lima."),  # other content words between
    ("uh-huhs", "Uh-huh."),  # a short item: whole words only
])
def test_the_matcher_does_not_see_a_shared_template(text: str, item: str):
    assert not Item.of(item).found_in(text)


def test_near_copies_between_items():
    assert near_copies("How many oceans are there?", "How many oceans are there on Earth?")
    assert near_copies("Whoa.", "Oh whoa.")  # the rest is filler
    # discourse markers are filler for a short item, whichever side holds them (issue 69)
    assert near_copies("Alright, none of that.", "Okay, none of that.")
    assert near_copies("Marvellous.", "Yeah, marvellous.") and near_copies("Yeah, marvellous.", "Marvellous.")
    assert near_copies("Could I cut in?", "May I cut in here?")
    assert not near_copies("Okay.", "Right.")  # two markers, nothing else: different words
    assert not near_copies("Okay, none of that.", "None of that pasta, thanks, I had enough cooking.")
    assert not near_copies("Right.", "Is it raining in Oslo right now?")
    assert not near_copies("Interesting.", "That is an interesting idea for a film.")
    assert not near_copies("What is the capital of France?", "What is the capital of Chile?")
