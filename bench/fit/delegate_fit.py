"""How the hidden delegation function of a Live session with client delegation is chosen
(``core/cascade/tool_calls.py``: ``DELEGATION_TOOL``, ``DELEGATION_CALL_BIAS``): on DEV only.

    python -m bench.fit.delegate_fit               # DEV: right decisions per call bias (~15 s)
    python -m bench.fit.delegate_fit --candidates  # DEV: every name and description tried (~4 min)
    python -m bench.fit.delegate_fit --eval        # EVAL, once the choice is made, at the shipped bias

Each request is put to the embedded SmolLM2 through the cascade's own tool step
(``tool_calls.tool_prompt`` / ``choice_scores``) with the delegation function as the one tool
offered. DEV is the DEV part of ``bench/sets/delegation.py`` (requests to delegate and ones to
answer) with the ``tools`` set's DEV prompts (one that needs a tool is one to delegate). The
decision is right when the model delegates exactly the requests it should. The bias chosen is the
middle of the widest run of biases with the best DEV count (``bench.fit.tool_fit.choose``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.fit.tool_fit import choose
from bench.sets import delegation, tools

BIASES = [round(-1 + 0.25 * i, 2) for i in range(21)]  # -1.0 .. +4.0
# What was tried on DEV (``--candidates``): descriptions by name.
DESCRIPTIONS = [
    "Live or personal information (weather, time, news, prices, the user's messages or orders) or an action in the world.",
    "Check something current or personal for me, or do something for me.",
    "Current information the assistant cannot know (weather, time, prices, news, the user's own accounts) and actions "
    "(messages, orders, timers, bookings).",
    "Ask the application for what you cannot know or do yourself: live information, the user's own data, or an action.",
]
NAMES = ["use_app", "ask_application", "delegate_to_application", "look_up_or_act"]


def cases(part: str) -> list[tuple[str, bool]]:
    if part == "eval":
        return [(c[0], c[1]) for c in delegation.EVAL]
    return [(c[0], c[1]) for c in delegation.DEV] + [(c[0], c[1] is not None) for c in tools.DEV]


def margins(lm: Any, tool: Any, part: str) -> list[tuple[str, bool, float]]:
    """(request, should delegate, the call's calibrated score minus the answer's) per request."""
    from core.cascade.tool_calls import choice_scores, tool_prompt

    out = []
    for text, delegate in cases(part):
        messages, fixed = tool_prompt([{"role": "user", "content": text}], [tool], False)
        scores, _, _ = choice_scores(lm, messages, [tool], fixed)
        out.append((text, delegate, float(scores[1] - scores[0])))
    return out


def right(rows: list[tuple[str, bool, float]], bias: float) -> int:
    from core.cascade.tool_calls import ANSWER_BIAS

    return sum((m + bias > ANSWER_BIAS) == delegate for _, delegate, m in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--candidates", action="store_true", help="try every name and description on DEV")
    ap.add_argument("--eval", action="store_true", help="report EVAL at the shipped choice")
    args = ap.parse_args()
    from core.cascade.llm import SmolLm
    from core.cascade.tool_calls import DELEGATION_CALL_BIAS, DELEGATION_TOOL
    from core.conversation.config import FunctionTool

    lm = SmolLm(Path("data"), None, threads=args.threads)
    shipped = FunctionTool(**DELEGATION_TOOL)
    if args.eval:
        rows = margins(lm, shipped, "eval")
        print(f"EVAL at the shipped bias {DELEGATION_CALL_BIAS:+.2f}: {right(rows, DELEGATION_CALL_BIAS)}/{len(rows)} right")
        for text, delegate, m in rows:
            if (m + DELEGATION_CALL_BIAS > 0.75) != delegate:
                print(f"  wrong: {text!r} (should {'delegate' if delegate else 'answer'})")
        return
    tried = [FunctionTool(type="function", name=n, description=d, parameters=DELEGATION_TOOL["parameters"])
             for d in DESCRIPTIONS for n in NAMES] if args.candidates else [shipped]
    for tool in tried:
        t0 = time.monotonic()
        rows = margins(lm, tool, "dev")
        table = [{"bias": b, "right": right(rows, b)} for b in BIASES]
        best = max(r["right"] for r in table)
        ms = (time.monotonic() - t0) / len(rows) * 1000
        print(f"{tool.name} / {tool.description[:60]!r}: best {best}/{len(rows)} at {choose(table):+.2f} "
              f"({ms:.0f} ms a decision)")
        if not args.candidates:
            print("| call bias | right |\n|---|---|")
            for r in table:
                mark = " (shipped)" if r["bias"] == DELEGATION_CALL_BIAS else ""
                print(f"| {r['bias']:+.2f}{mark} | {r['right']}/{len(rows)} |")


if __name__ == "__main__":
    main()
