"""How ``ANSWER_BIAS`` in ``core/cascade/tool_calls.py`` is chosen: on the DEV prompts only.

    python -m bench.fit.tool_fit              # DEV: right decisions per bias (~1 min on two cores)

Each DEV prompt of ``bench/sets/tools.py`` is put to the embedded SmolLM2 in-process through the
cascade's own tool prompt (``tool_calls.tool_prompt``: the tool list, the few-shot turns built from
the tools the session offers, the user's message), once with all four tools and once with one
(``bench.sets.tools.offered``): the calibrated score of each candidate (``ANSWER``, ``CALL <tool>``) is
computed once, then every bias is tried on those scores. The decision is right when the
likeliest candidate is the expected tool, or ``ANSWER`` when none is expected. The bias chosen is
the middle of the widest run of biases with the best DEV share (a plateau's middle moves least
when the prompts change). ``python -m bench tools`` then reports the chosen bias on EVAL, through
the real API.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.sets.tools import DEV, OFFERS, offered

BIASES = [round(-2 + 0.25 * i, 2) for i in range(21)]  # -2.0 .. +3.0


def dev_scores(lm: Any) -> list[tuple[str, str, str | None, list, Any]]:
    """(offer, prompt, expected tool or None, the tools offered, calibrated candidate scores) per
    DEV prompt and kind of session."""
    from core.cascade.tool_calls import choice_scores, tool_prompt
    from core.conversation.config import FunctionTool

    rows = []
    for offer in OFFERS:
        for i, case in enumerate(DEV):
            tools = [FunctionTool(**t) for t in offered(case, i, offer)]
            messages, fixed = tool_prompt([{"role": "user", "content": case[0]}], tools, False)
            scores, _, _ = choice_scores(lm, messages, tools, fixed)
            rows.append((offer, case[0], case[1], tools, scores))
    return rows


def sweep(rows: list[tuple[str, str, str | None, list, Any]], biases: list[float]) -> list[dict[str, Any]]:
    from core.cascade.tool_calls import decide

    def share(xs: list[bool]) -> float:
        return sum(xs) / len(xs)

    out = []
    for bias in biases:
        right = [(offer, expected, decide(scores, tools, bias) == expected) for offer, _, expected, tools, scores in rows]
        out.append({"bias": bias, "right": share([r for _, _, r in right]),
                    "right_all_tools": share([r for o, _, r in right if o == "all"]),
                    "right_one_tool": share([r for o, _, r in right if o == "one"]),
                    "right_tool_needed": share([r for _, e, r in right if e]),
                    "right_no_tool": share([r for _, e, r in right if not e])})
    return out


def choose(table: list[dict[str, Any]]) -> float:
    """The middle of the widest run of consecutive biases with the best share."""
    best = max(r["right"] for r in table)
    runs: list[list[float]] = [[]]
    for r in table:
        if r["right"] == best:
            runs[-1].append(r["bias"])
        elif runs[-1]:
            runs.append([])
    widest = max(runs, key=len)
    return widest[(len(widest) - 1) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from core.cascade.llm import SmolLm
    from core.cascade.tool_calls import ANSWER_BIAS

    lm = SmolLm(Path("data"), None, threads=args.threads)
    rows = dev_scores(lm)
    print(f"DEV: {len(DEV)} prompts ({sum(1 for c in DEV if c[1])} need a tool), each with all four tools and with one\n")
    print("| answer bias | right | with all four tools | with one tool | right when a tool is needed | "
          "right when none is |\n|---|---|---|---|---|---|")
    table = sweep(rows, BIASES)
    for r in table:
        mark = " (shipped)" if r["bias"] == ANSWER_BIAS else ""
        print(f"| {r['bias']:+.2f}{mark} | {r['right']:.0%} | {r['right_all_tools']:.0%} | {r['right_one_tool']:.0%} | "
              f"{r['right_tool_needed']:.0%} | {r['right_no_tool']:.0%} |")
    print(f"\nchosen on DEV: {choose(table):+.2f} (shipped: {ANSWER_BIAS:+.2f})")


if __name__ == "__main__":
    main()
