"""How deeply a client's JSON may nest, checked before it is parsed.

Python's ``json`` recurses once per level: a message of 100,000 ``[`` raised ``RecursionError``
inside the session's reader and ended the session (close 1011), and what survives the parser
recurses again wherever it is validated, copied or recorded. No event or request of the API
nests anywhere near ``MAX_DEPTH`` (a function's JSON schema, the deepest, takes a handful of
levels), so deeper input is refused with a clear error and the session goes on.

The check costs two C-speed counts for ordinary messages: nesting deeper than ``MAX_DEPTH``
needs more than ``MAX_DEPTH`` opening brackets. Only messages with more than that are scanned,
and the scan looks at brackets, quotes and backslashes only (a base64 audio string is skipped
in one step) and stops as soon as the limit is passed.
"""

from __future__ import annotations

import re

MAX_DEPTH = 64

_STRUCTURAL_TEXT = re.compile(r'[\[\]{}"\\]')
_STRUCTURAL_BYTES = re.compile(rb'[\[\]{}"\\]')
_OPEN = frozenset(("[", "{", ord("["), ord("{")))
_CLOSE = frozenset(("]", "}", ord("]"), ord("}")))
_QUOTE = frozenset(('"', ord('"')))
_BACKSLASH = frozenset(("\\", ord("\\")))


class NestingTooDeep(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


def check_nesting(data: str | bytes, limit: int = MAX_DEPTH) -> None:
    """Raise ``NestingTooDeep`` when arrays and objects in ``data`` nest deeper than ``limit``
    (brackets inside strings do not count). Malformed JSON is left for the parser to report."""
    if isinstance(data, str):
        opening = data.count("[") + data.count("{")
        structural = _STRUCTURAL_TEXT
    else:
        opening = data.count(b"[") + data.count(b"{")
        structural = _STRUCTURAL_BYTES
    if opening <= limit:
        return
    depth = 0
    in_string = False
    escaped = -1  # the position a backslash escapes
    for match in structural.finditer(data):
        at = match.start()
        if at == escaped:
            continue
        ch = data[at]
        if in_string:
            if ch in _BACKSLASH:
                escaped = at + 1
            elif ch in _QUOTE:
                in_string = False
        elif ch in _QUOTE:
            in_string = True
        elif ch in _OPEN:
            depth += 1
            if depth > limit:
                raise NestingTooDeep(limit)
        elif ch in _CLOSE:
            depth -= 1
