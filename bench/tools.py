"""Function calling through the real realtime API: does the cascade's embedded model call the
right tool (or answer) for typed prompts, with valid arguments, and how long a call takes.

    python -m bench tools          # a real gateway + one cascade worker, 34 prompts
    python -m bench tools --json

Half the prompts need a tool (four tools), half do not (decoys: jokes, facts, thanks...). Each
prompt runs in a fresh session: ``session.update`` with the tools and ``tool_choice: "auto"``, a
typed user message, ``response.create`` (text only, a short answer budget). Scored per prompt:
the decision (the right tool, or an answer), the arguments (JSON parses, valid under the tool's
schema, and the values the prompt names, e.g. the city), and for calls the latency from
``response.create`` to ``response.function_call_arguments.done``. Prompts marked ``dev`` were used
to tune the tool prompt and the call bias (``core/cascade/tool_calls.py``); the rest are held out.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import jsonschema
import websockets

from bench.launch import cascade_realtime_url, raise_fd_limit
from bench.sets.tools import CASES, TOOLS



ANSWER_TOKENS = 8  # an answer is only scored as a decision: a short budget keeps the run quick


def score_arguments(tool: str, arguments: str, expected: dict[str, Any]) -> tuple[bool, bool, bool]:
    """(parses, valid under the schema, the values the prompt names)."""
    try:
        args = json.loads(arguments)
    except ValueError:
        return False, False, False
    schema = next(t["parameters"] for t in TOOLS if t["name"] == tool)
    try:
        jsonschema.validate(args, schema)
        valid = True
    except jsonschema.ValidationError:
        valid = False
    values = True
    for key, want in expected.items():
        got = args.get(key) if isinstance(args, dict) else None
        if isinstance(want, str):
            values &= isinstance(got, str) and any(w in got.lower() for w in want.split("|"))
        else:
            values &= isinstance(got, (int, float)) and float(got) == float(want)
    return True, valid, bool(values)


async def one_prompt(url: str, prompt: str) -> dict[str, Any]:
    async with websockets.connect(url, max_size=None, compression=None, ping_interval=None,
                                  open_timeout=600) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}},
            "tools": TOOLS, "tool_choice": "auto"}}))
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
        while json.loads(await ws.recv())["type"] != "conversation.item.added":
            pass
        start = time.monotonic()
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": ANSWER_TOKENS}}))
        r: dict[str, Any] = {"prompt": prompt}
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 120))
            now = time.monotonic()
            kind = ev["type"]
            if kind == "response.function_call_arguments.done":
                r["call_ms"] = (now - start) * 1000
            elif kind in ("response.output_text.delta", "response.output_audio_transcript.delta"):
                r.setdefault("first_text_ms", (now - start) * 1000)
            elif kind == "error":
                r["error"] = ev["error"].get("message")
            elif kind == "response.done":
                output = ev["response"].get("output") or []
                calls = [o for o in output if o.get("type") == "function_call"]
                r["called"] = calls[0]["name"] if calls else None
                r["arguments"] = calls[0]["arguments"] if calls else None
                r["status"] = ev["response"].get("status")
                return r


async def run_all(url: str) -> list[dict[str, Any]]:
    await one_prompt(url, "Hi!")  # warm-up: first tool grammar, tokenizer for llguidance
    rows = []
    for prompt, tool, expected, split in CASES:
        r = await one_prompt(url, prompt)
        r.update(expected_tool=tool, split=split, right=r.get("called") == tool)
        if r.get("called") is not None:
            r["parses"], r["valid"], r["values"] = score_arguments(r["called"], r["arguments"], expected)
        rows.append(r)
    return rows


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(xs: list[bool]) -> float | None:
        return round(sum(xs) / len(xs), 3) if xs else None

    calls = [r for r in rows if r.get("called")]
    right_calls = [r for r in calls if r["right"]]
    out: dict[str, Any] = {
        "prompts": len(rows),
        "right_decisions": share([r["right"] for r in rows]),
        "right_dev": share([r["right"] for r in rows if r["split"] == "dev"]),
        "right_held_out": share([r["right"] for r in rows if r["split"] == "test"]),
        "right_when_tool_needed": share([r["right"] for r in rows if r["expected_tool"]]),
        "right_when_no_tool": share([r["right"] for r in rows if not r["expected_tool"]]),
        "calls": len(calls),
        "arguments_parse": share([r["parses"] for r in calls]),
        "arguments_valid": share([r["valid"] for r in calls]),
        "argument_values_right": share([r["values"] for r in right_calls]),
        "call_ms_p50": pct([r["call_ms"] for r in calls if "call_ms" in r], 0.5),
        "call_ms_p90": pct([r["call_ms"] for r in calls if "call_ms" in r], 0.9),
        "answer_first_text_ms_p50": pct([r["first_text_ms"] for r in rows if "first_text_ms" in r], 0.5),
        "errors": sum("error" in r for r in rows),
    }
    return out


def run_cli(args) -> dict[str, Any]:
    raise_fd_limit()
    with cascade_realtime_url() as url:
        t0 = time.monotonic()
        rows = asyncio.run(run_all(url))
        wall = time.monotonic() - t0
    return {"summary": {**summarise(rows), "wall_s": round(wall, 1)}, "rows": rows}


def report(r: dict[str, Any]) -> str:
    s = r["summary"]
    lines = ["| prompt | expected | got | right | args parse / valid / values | call ms |",
             "|---|---|---|---|---|---|"]
    for x in r["rows"]:
        args = "" if x.get("called") is None else (
            f"{'y' if x['parses'] else 'n'} / {'y' if x['valid'] else 'n'} / {'y' if x['values'] else 'n'}")
        ms = f"{x['call_ms']:.0f}" if "call_ms" in x else ""
        lines.append(f"| {x['prompt']} | {x['expected_tool'] or 'answer'} | {x.get('called') or 'answer'} | "
                     f"{'yes' if x['right'] else 'NO'} | {args} | {ms} |")
    lines += ["", "| metric | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in s.items()]
    return "\n".join(lines)
