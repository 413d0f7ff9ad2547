"""``check_nesting``: depth counted as a parser would, brackets in strings ignored."""

from __future__ import annotations

import json

import pytest

from core.json_limits import MAX_DEPTH, NestingTooDeep, check_nesting


@pytest.mark.parametrize("kind", [str, bytes])
def test_depth_at_the_limit_passes_and_one_more_is_refused(kind):
    def doc(depth: int):
        text = "[" * depth + "]" * depth
        return text if kind is str else text.encode()

    check_nesting(doc(MAX_DEPTH))
    with pytest.raises(NestingTooDeep, match=f"deeper than {MAX_DEPTH} levels"):
        check_nesting(doc(MAX_DEPTH + 1))


def test_objects_and_arrays_count_alike():
    check_nesting('{"a":' * 10 + "[]" + "}" * 10, limit=11)
    with pytest.raises(NestingTooDeep):
        check_nesting('{"a":' * 10 + "[[]]" + "}" * 10, limit=11)


def test_brackets_inside_strings_and_escaped_quotes_are_text():
    text = json.dumps({"a": "[" * 500 + '\\"{{{' + "\\\\", "b": ["]" * 500]})
    check_nesting(text, limit=2)
    # an escaped quote does not end the string: the brackets after it are still text
    check_nesting('["x\\"' + "[" * 100 + '"]', limit=2)
    with pytest.raises(NestingTooDeep):
        check_nesting('["x\\\\"' + ",[" * 3 + "]" * 3 + "]", limit=2)  # \\ ends the escape, then nesting


def test_many_shallow_brackets_pass():
    check_nesting(json.dumps([[i] for i in range(10_000)]), limit=2)

