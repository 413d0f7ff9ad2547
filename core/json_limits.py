"""How deeply a client's JSON may nest, checked before it is parsed.

Python's ``json`` recurses once per level: a message of 100,000 ``[`` raised ``RecursionError``
inside the session's reader and ended the session (close 1011), and what survives the parser
recurses again wherever it is validated, copied or recorded. No event or request of the API
nests anywhere near ``MAX_DEPTH`` (a function's JSON schema, the deepest, takes a handful of
levels), so deeper input is refused with a clear error and the session goes on.

``parse_client_json`` is the one path every channel reads a client's event with (the Realtime
session's reader, the Live channel's, the WebRTC edge's peek at a client event): the size, then
the nesting, then the parse, each refusal a ``ProtocolError`` with its own code, so a hostile
message is an ``error`` event and never an exception the reader did not expect.

The check costs two C-speed counts for ordinary messages: nesting deeper than ``MAX_DEPTH``
needs more than ``MAX_DEPTH`` opening brackets. Only messages with more than that are scanned,
and the scan looks at brackets, quotes and backslashes only (a base64 audio string is skipped
in one step) and stops as soon as the limit is passed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from core.protocol import ProtocolError

MAX_DEPTH = 64

_STRUCTURAL_TEXT = re.compile(r'[\[\]{}"\\]')
_STRUCTURAL_BYTES = re.compile(rb'[\[\]{}"\\]')
_OPEN = frozenset(("[", "{", ord("["), ord("{")))
_CLOSE = frozenset(("]", "}", ord("]"), ord("}")))
_QUOTE = frozenset(('"', ord('"')))
_BACKSLASH = frozenset(("\\", ord("\\")))


# A JSON string escape of a UTF-16 surrogate: paired ones decode to one character, a lone one
# stays a surrogate that no UTF-8 encoder takes (a URL, a log line, a file write then fails).
_SURROGATE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


class NotText(ValueError):
    def __init__(self) -> None:
        super().__init__("a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is not text")


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


def message_too_large(text: str, limit: int) -> bool:
    """UTF-8 size of ``text`` above ``limit``, without encoding it unless it could be."""
    if len(text) > limit:
        return True
    return len(text) * 4 > limit and len(text.encode("utf-8")) > limit


def loads(data: str | bytes) -> Any:
    """``json.loads`` for what a client sent: ``NestingTooDeep`` before the parser recurses,
    ``NotText`` for a string with a lone surrogate (checked only when the text holds a surrogate
    escape at all), ``ValueError`` for the rest."""
    check_nesting(data)
    value = json.loads(data)
    if (_SURROGATE_TEXT if isinstance(data, str) else _SURROGATE_BYTES).search(data):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotText() from None
    return value


BINARY_REFUSED = "binary frames are not supported; send each event as a JSON text frame"


def parse_client_json(message: str | bytes, max_bytes: int) -> dict[str, Any]:
    """One client message as a JSON object, or ``ProtocolError`` (param ``message``) saying why
    not: ``invalid_json`` (a binary frame, not JSON, not an object), ``message_too_large`` (over
    ``max_bytes``: dropped unread) or ``nesting_too_deep`` (dropped unparsed). Cheapest check first."""
    if not isinstance(message, str):
        raise ProtocolError(BINARY_REFUSED, code="invalid_json", param="message")
    if message_too_large(message, max_bytes):
        raise ProtocolError(f"message larger than {max_bytes} bytes was dropped", code="message_too_large",
                            param="message")
    try:
        event = loads(message)
    except NestingTooDeep as exc:
        raise ProtocolError(f"message dropped: {exc}", code="nesting_too_deep", param="message") from None
    except NotText as exc:
        raise ProtocolError(f"message is not valid JSON text: {exc}", code="invalid_json", param="message") from None
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"message is not valid JSON: {exc.msg}", code="invalid_json", param="message") from None
    if not isinstance(event, dict):
        raise ProtocolError("each message must be a JSON object", code="invalid_json", param="message")
    return event
