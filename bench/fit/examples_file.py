"""Writes a module of labelled examples (tuples of strings) that a meaning head is fitted on
(``core/cascade/words_meaning.py``): the fit scripts' ``--write``."""

from __future__ import annotations

from pathlib import Path


def write_examples(path: Path, doc: list[str], groups: dict[str, list[str]]) -> None:
    """``doc``: the module docstring's lines; ``groups``: tuple name -> its texts, in order."""
    body = ['"""' + doc[0], *doc[1:], '"""', ""]
    for name, texts in groups.items():
        body += [f"{name}: tuple[str, ...] = (", *[f"    {t!r}," for t in texts], ")", ""]
    path.write_text("\n".join(body))
    print(f"wrote {path} (" + ", ".join(f"{len(t)} {n.lower()}" for n, t in groups.items()) + ")")
