"""Writes a module of labelled examples (tuples of strings, or of (string, count) pairs) that a
meaning head is fitted on (``core/cascade/words_meaning.py``): the fit scripts' ``--write``."""

from __future__ import annotations

from pathlib import Path


def near_an_eval_item(text: str) -> bool:
    """A heard dev phrase can come out close to some set's eval item, word for word (a mumble heard as a polite formula):
    such a text stays out of shipped code (``tests/unit/test_eval_leaks.py``)."""
    from bench.sets import Item, Text, all_sets

    t = Text(text)
    return any(Item.of(item).found_in(t) for s in all_sets() for item in s.eval)


def write_examples(path: Path, doc: list[str], groups: dict[str, list[str] | list[tuple[str, int]]]) -> None:
    """``doc``: the module docstring's lines; ``groups``: tuple name -> its texts (or (text, count)
    pairs), in order. A text close to an eval item is left out."""
    body = ['"""' + doc[0], *doc[1:], '"""', ""]
    left_out = 0
    for name, texts in groups.items():
        kept = [t for t in texts if not near_an_eval_item(t if isinstance(t, str) else t[0])]
        left_out += len(texts) - len(kept)
        groups[name] = kept
        kind = "str" if all(isinstance(t, str) for t in kept) else "tuple[str, int]"
        body += [f"{name}: tuple[{kind}, ...] = (", *_packed([f"{t!r}," for t in kept]), ")", ""]
    path.write_text("\n".join(body))
    print(f"wrote {path} (" + ", ".join(f"{len(t)} {n.lower()}" for n, t in groups.items())
          + f"; {left_out} close to an eval item left out)")


def _packed(items: list[str], width: int = 116) -> list[str]:
    """Several examples a line (the files stay well under the 600-line limit on product files)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 1 + len(item) <= width:
            lines[-1] += " " + item
        else:
            lines.append("    " + item)
    return lines
