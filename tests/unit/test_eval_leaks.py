"""No evaluation item outside its set: a figure measured on ``eval`` is only worth something if no
prompt, few-shot example, grammar, word list or test case was written with that item in view.

Every file of the project (tracked or new, not ignored) is read as normalised text (lower case,
punctuation and line breaks as single spaces) and searched for the normalised text of every
``eval`` item of every set in ``bench/sets``. Only the sets themselves (``bench/sets/``) and the
reports in ``docs/`` may name eval items (a benchmark's write-up lists what it got wrong).
"""

from __future__ import annotations

import subprocess

import pytest

from bench.sets import EvalSet, all_sets, normalise
from tests.support.stack import ROOT

ALLOWED = ("bench/sets/", "docs/")


def project_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if not f.startswith(ALLOWED) and (ROOT / f).is_file()]


def leaks(texts: dict[str, str], sets: list[EvalSet]) -> list[str]:
    """``path: set: item`` for every eval item whose normalised text appears in a file's."""
    found = []
    for path, text in texts.items():
        haystack = f" {normalise(text)} "
        for s in sets:
            found += [f"{path}: {s.name} eval item {item!r}" for item in s.eval
                      if f" {normalise(item)} " in haystack]
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


def test_no_eval_item_in_a_shipped_file_or_a_test():
    texts = {path: text for path in project_files() if (text := read_text(path)) is not None}
    assert "core/cascade/voice_prompt.py" in texts and "tests/unit/test_semantic_vad.py" in texts  # the scan reads them
    found = leaks(texts, all_sets())
    assert not found, "eval items outside bench/sets and docs (choose on dev, test with dev items):\n" + \
        "\n".join(found)


def test_the_check_sees_an_item_whatever_its_quoting():
    s = EvalSet("example", dev=("What is one plus one?",), eval=("What's the capital of Peru?",))
    quoted = 'PROMPT = ("Asked \\"WHAT\'S THE capital "\n    "of Peru?\\", you say: Lima.")'
    assert leaks({"x.py": quoted}, [s]) == ["x.py: example eval item \"What's the capital of Peru?\""]
    assert leaks({"x.py": "the capital of Peruvia"}, [s]) == []  # whole words only
    assert leaks({"x.py": "What is one plus one?"}, [s]) == []  # dev items are free to use
