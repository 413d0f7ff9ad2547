"""Function calling through the real realtime API: does the cascade's embedded model call the
right tool (or answer) for typed prompts, with valid arguments, and how long a call takes.

    python -m bench tools                     # a real gateway + one cascade worker, 19 EVAL prompts x 2, 3 runs
    python -m bench tools --set dev --runs 1  # the 15 DEV prompts (what the tool prompt and bias were chosen on)
    python -m bench tools --json

The set is ``bench/sets/tools.py``. Half the prompts need a tool (four tools), half do not
(decoys: jokes, facts, thanks...). Each prompt runs twice, each time in a fresh session:
``session.update`` with all four tools, then with one (the tool it needs, or for a decoy one of
the four in turn: ``bench.sets.tools.offered``), and ``tool_choice: "auto"``; a typed user
message; ``response.create`` (text only, a short answer budget). Scored per prompt: the decision
(the right tool, or an answer), the arguments (JSON parses, valid under the tool's schema, and the
values the prompt names, e.g. the city), and for calls the latency from ``response.create`` to
``response.function_call_arguments.done``. A call is right only in a completed response; an
answer only in a response that completed or ran out of the bench's own short budget
(``incomplete``, ``max_output_tokens``): a failed, cancelled or empty one is wrong. DEV chose the
tool prompt and the answer bias (``python -m bench.fit.tool_fit``); EVAL is held out. The run is
repeated ``--runs`` times on one stack (the choice is greedy, so runs differ only where the CPU's
float sums do); the report gives each run and the median with its spread.

The MCP row runs the same prompts with the same four tools served by a real MCP server
(``bench/mcp_tools_server.py``, identical schemas) and named in ``session.tools`` as one
``type: "mcp"`` entry (``require_approval: "never"``; ``allowed_tools`` narrows it for the
one-tool offer): the model sees them as ``tools__<name>``, the worker runs the call. Besides the
decision it times the call's round trip through the MCP server (``response.mcp_call.in_progress``
to ``.completed``) and the first words of the follow-up reply that speaks the result (from
``response.create``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import jsonschema
import websockets

from bench import mcp_tools_server
from bench.launch import cascade_realtime_url, raise_fd_limit
from bench.sets.tools import DEV, EVAL, OFFERS, TOOLS, offered
from bench.stats import median_spread



ANSWER_TOKENS = 8  # an answer is only scored as a decision: a short budget keeps the run quick
MODES = ("function", "mcp")
MCP_LABEL = "tools"


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


def as_mcp(tools: list[dict[str, Any]], mcp_url: str) -> list[dict[str, Any]]:
    """The same tools, as one MCP server entry (``allowed_tools``: the ones offered)."""
    return [{"type": "mcp", "server_label": MCP_LABEL, "server_url": mcp_url, "require_approval": "never",
             "allowed_tools": [t["name"] for t in tools]}]


async def one_prompt(url: str, prompt: str, tools: list[dict[str, Any]], mcp_url: str | None = None) -> dict[str, Any]:
    """One fresh session, one prompt. ``mcp_url``: the tools come from that MCP server instead."""
    async with websockets.connect(url, max_size=None, compression=None, ping_interval=None,
                                  open_timeout=600) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}},
            "tools": as_mcp(tools, mcp_url) if mcp_url else tools, "tool_choice": "auto"}}))
        if mcp_url:  # the listing first (a reply would wait for it anyway)
            while (kind := json.loads(await ws.recv())["type"]) not in ("mcp_list_tools.completed",
                                                                         "mcp_list_tools.failed"):
                pass
            if kind == "mcp_list_tools.failed":
                return {"prompt": prompt, "error": "listing failed", "status": "failed"}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
        while json.loads(await ws.recv())["type"] != "conversation.item.added":
            pass
        start = time.monotonic()
        await ws.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": ANSWER_TOKENS}}))
        r: dict[str, Any] = {"prompt": prompt}
        called_at: float | None = None
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 120))
            now = time.monotonic()
            kind = ev["type"]
            if kind in ("response.function_call_arguments.done", "response.mcp_call_arguments.done"):
                r["call_ms"] = (now - start) * 1000
            elif kind == "response.mcp_call.in_progress":
                called_at = now
            elif kind in ("response.mcp_call.completed", "response.mcp_call.failed") and called_at is not None:
                r["mcp_round_trip_ms"] = (now - called_at) * 1000
                r["mcp_failed"] = kind.endswith("failed")
            elif kind in ("response.output_text.delta", "response.output_audio_transcript.delta"):
                r.setdefault("first_text_ms" if "status" not in r else "answer_after_call_ms", (now - start) * 1000)
            elif kind == "error":
                r["error"] = ev["error"].get("message")
            elif kind == "response.done" and "status" in r:  # the follow-up that spoke an MCP result
                return r
            elif kind == "response.done":
                output = ev["response"].get("output") or []
                calls = [o for o in output if o.get("type") in ("function_call", "mcp_call")]
                r["called"] = calls[0]["name"] if calls else None
                r["arguments"] = calls[0]["arguments"] if calls else None
                r["answered"] = any(part.get("text") or part.get("transcript")
                                    for o in output if o.get("type") == "message" for part in o.get("content") or [])
                r["status"] = ev["response"].get("status")
                r["reason"] = (ev["response"].get("status_details") or {}).get("reason")
                if not (mcp_url and calls and r["status"] == "completed"):
                    return r


def decision_right(r: dict[str, Any], expected_tool: str | None) -> bool:
    """The expected call in a completed response, or, when none is expected, an answer with words
    in a response that completed or only ran out of the bench's short answer budget
    (``incomplete``, ``max_output_tokens``). A failed, cancelled or empty response is wrong."""
    if expected_tool is not None:
        return r.get("status") == "completed" and r.get("called") == expected_tool
    finished = r.get("status") == "completed" or (r.get("status") == "incomplete"
                                                  and r.get("reason") == "max_output_tokens")
    return finished and r.get("called") is None and bool(r.get("answered"))


async def run_all(url: str, cases: list[tuple[str, str | None, dict[str, Any], str]],
                  mcp_url: str | None = None) -> list[dict[str, Any]]:
    """Every case under every offer; with ``mcp_url`` each also through the MCP server, right
    after its function row (side by side, under the same load)."""
    await one_prompt(url, "Hi!", TOOLS)  # warm-up: first tool grammar, tokenizer for llguidance
    if mcp_url:
        await one_prompt(url, "Hi!", TOOLS, mcp_url)
    rows = []
    for offer in OFFERS:
        for i, case in enumerate(cases):
            prompt, tool, expected, split = case
            for mode in MODES if mcp_url else MODES[:1]:
                r = await one_prompt(url, prompt, offered(case, i, offer), mcp_url if mode == "mcp" else None)
                r.update(mode=mode, offer=offer, expected_tool=tool, split=split, right=decision_right(r, tool))
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
    return {
        "prompts": len(rows),
        "right_decisions": share([r["right"] for r in rows]),
        "right_with_all_tools": share([r["right"] for r in rows if r.get("offer", "all") == "all"]),
        "right_with_one_tool": share([r["right"] for r in rows if r.get("offer") == "one"]),
        "right_when_tool_needed": share([r["right"] for r in rows if r["expected_tool"]]),
        "right_when_no_tool": share([r["right"] for r in rows if not r["expected_tool"]]),
        "failed_or_cancelled": sum(r.get("status") not in ("completed", "incomplete") for r in rows),
        "calls": len(calls),
        "arguments_parse": share([r["parses"] for r in calls]),
        "arguments_valid": share([r["valid"] for r in calls]),
        "argument_values_right": share([r["values"] for r in right_calls]),
        "call_ms_p50": pct([r["call_ms"] for r in calls if "call_ms" in r], 0.5),
        "call_ms_p90": pct([r["call_ms"] for r in calls if "call_ms" in r], 0.9),
        "answer_first_text_ms_p50": pct([r["first_text_ms"] for r in rows if "first_text_ms" in r], 0.5),
        "errors": sum("error" in r for r in rows),
    }


def summarise_modes(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The function row's summary, and the MCP row's with its round trips (same prompts)."""
    out = summarise([r for r in rows if r.get("mode", "function") == "function"])
    mcp_rows = [r for r in rows if r.get("mode") == "mcp"]
    if mcp_rows:
        m = summarise(mcp_rows)
        trips = [r["mcp_round_trip_ms"] for r in mcp_rows if "mcp_round_trip_ms" in r]
        out.update({
            "mcp_right_decisions": m["right_decisions"],
            "mcp_right_when_tool_needed": m["right_when_tool_needed"],
            "mcp_right_when_no_tool": m["right_when_no_tool"],
            "mcp_argument_values_right": m["argument_values_right"],
            "mcp_call_ms_p50": m["call_ms_p50"],
            "mcp_round_trip_ms_p50": pct(trips, 0.5),
            "mcp_round_trip_ms_p90": pct(trips, 0.9),
            "mcp_calls_failed": sum(bool(r.get("mcp_failed")) for r in mcp_rows),
            "mcp_answer_after_call_ms_p50": pct([r["answer_after_call_ms"] for r in mcp_rows
                                                 if "answer_after_call_ms" in r], 0.5),
            "mcp_errors": m["errors"],
        })
    return out


def run_cli(args) -> dict[str, Any]:
    from core.cascade.tool_calls import ANSWER_BIAS

    raise_fd_limit()
    which = getattr(args, "set", None) or "eval"
    if which not in ("eval", "dev"):
        raise SystemExit(f"--set {which}: this benchmark has a dev and an eval part only")
    cases = {"eval": EVAL, "dev": DEV}[which]
    runs = max(1, getattr(args, "runs", None) or 3)
    out: dict[str, Any] = {"set": which, "answer_bias": ANSWER_BIAS, "runs": []}
    mcp_url, mcp_server = mcp_tools_server.start()
    try:
        with cascade_realtime_url(tools={"mcp": {"allowed_hosts": ["127.0.0.1"]}}) as url:
            for _ in range(runs):
                t0 = time.monotonic()
                rows = asyncio.run(run_all(url, cases, mcp_url))
                out["runs"].append({"summary": {**summarise_modes(rows), "wall_s": round(time.monotonic() - t0, 1)},
                                    "rows": rows})
    finally:
        mcp_server.should_exit = True
    summaries = [r["summary"] for r in out["runs"]]
    out["median"] = {k: median_spread([s[k] for s in summaries]) for k in summaries[0]}
    return out


def report(r: dict[str, Any]) -> str:
    last = r["runs"][-1]
    lines = [f"Set: {r['set']} ({last['summary']['prompts']} prompts); answer bias {r['answer_bias']:+g}; "
             f"{len(r['runs'])} run(s) on one stack", "",
             "| prompt | tools | offered | expected | got (last run) | right in runs | args parse / valid / values | call ms |",
             "|---|---|---|---|---|---|---|---|"]
    for i, x in enumerate(last["rows"]):
        args = "" if x.get("called") is None else (
            f"{'y' if x['parses'] else 'n'} / {'y' if x['valid'] else 'n'} / {'y' if x['values'] else 'n'}")
        ms = f"{x['call_ms']:.0f}" if "call_ms" in x else ""
        got = x.get("called") or ("answer" if x.get("answered") else f"nothing ({x.get('status')})")
        right = sum(run["rows"][i]["right"] for run in r["runs"])
        lines.append(f"| {x['prompt']} | {x.get('mode', 'function')} | {x.get('offer', 'all')} | "
                     f"{x['expected_tool'] or 'answer'} | {got} | "
                     f"{right}/{len(r['runs'])}{'' if right == len(r['runs']) else ' NO'} | {args} | {ms} |")
    lines += ["", "| metric | median (min-max) | " + " | ".join(f"run {i + 1}" for i in range(len(r["runs"]))) + " |",
              "|---|---|" + "---|" * len(r["runs"])]
    for key, m in r["median"].items():
        lines.append(f"| {key} | {m['text']} | " + " | ".join(str(run["summary"][key]) for run in r["runs"]) + " |")
    return "\n".join(lines)
