"""Qwen's own tool format: tools listed in the system turn (``tools_block``), calls written as
``<tool_call>`` JSON blocks in the reply and parsed while it streams (``ToolCallFilter``), past calls
replayed as the model writes them (``tool_call_text``), a forced call as the reply's start
(``tool_prefill``)."""

from __future__ import annotations

import json
import logging
from typing import Any

from core.conversation import ReplyJob

log = logging.getLogger(__name__)

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def tools_block(specs: list[dict]) -> str:
    """Qwen2.5's tool instructions (its chat template's words), for templates that render none."""
    listed = "\n".join(json.dumps(spec, ensure_ascii=False) for spec in specs)
    return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listed}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def tool_call_text(name: str, arguments: str) -> str:
    """A past call as the model writes one."""
    try:
        args: Any = json.loads(arguments)
    except ValueError:
        args = arguments
    return f"{TOOL_OPEN}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{TOOL_CLOSE}"


def tool_prefill(tool_choice: str) -> str:
    """The reply's forced start: "required" opens a call, a function's name opens a call to it."""
    if tool_choice == "required":
        return TOOL_OPEN + "\n"
    if tool_choice not in ("auto", "none"):
        return f'{TOOL_OPEN}\n{{"name": {json.dumps(tool_choice)}, "arguments": '
    return ""


class ToolCallFilter:
    """Streamed reply text in, the text to show and speak out; ``<tool_call>`` blocks are held
    back and become ``job.function_call`` as each closes (or at the end). Text that may be the
    start of ``<tool_call>`` waits for the next piece. After the first call nothing more is
    spoken. A block that is not ``{"name": ..., "arguments": {...}}`` JSON naming one of the
    job's tools is dropped with a warning (the reply keeps the text before it)."""

    def __init__(self, job: ReplyJob, prefill: str = "") -> None:
        self.job = job
        self.names = {t.name for t in job.tools}
        self.pending = prefill  # text not yet passed on or parsed
        self.in_call = prefill.startswith(TOOL_OPEN)
        self.called = self.in_call
        self.calls = 0

    def push(self, delta: str) -> str:
        self.pending += delta
        out = ""
        while True:
            if self.in_call:
                end = self.pending.find(TOOL_CLOSE)
                if end < 0:
                    return out
                self._call(self.pending[len(TOOL_OPEN):end])
                self.pending = self.pending[end + len(TOOL_CLOSE):]
                self.in_call = False
                continue
            start = self.pending.find(TOOL_OPEN)
            if start >= 0:
                if not self.called:
                    out += self.pending[:start]
                self.pending = self.pending[start:]
                self.in_call = self.called = True
                continue
            keep = _partial_suffix(self.pending, TOOL_OPEN)
            passed, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
            if not self.called:
                out += passed
            return out

    def finish(self) -> str:
        """The end of the reply: an open block is parsed; other held text is returned."""
        rest, self.pending = self.pending, ""
        if self.in_call:
            self.in_call = False
            self._call(rest[len(TOOL_OPEN):])
            return ""
        return "" if self.called else rest

    def _call(self, body: str) -> None:
        try:
            call = json.loads(body.strip())
            name, args = call["name"], call.get("arguments", {})
            if isinstance(args, str):
                args = json.loads(args)
            if name not in self.names or not isinstance(args, dict):
                raise ValueError(f"{name!r} is not one of the tools" if name not in self.names
                                 else "arguments are not an object")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("qwen_omni: dropped a malformed tool call (%s): %.200r", exc, body)
            return
        self.calls += 1
        self.job.function_call(name, json.dumps(args, ensure_ascii=False))


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that ``marker`` starts with."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
