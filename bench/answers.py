"""Answer quality through the REST API: does the cascade's LLM answer simple questions right and
briefly, with its default instructions?

    python -m bench answers                       # a real gateway + one cascade worker, the EVAL set, 3 runs
    python -m bench answers --set dev --limit 10  # the tuning set (tune prompts on DEV only)
    python -m bench answers --llm-url http://host:8000/v1 --llm-model some-model  # + that LLM, same run
    python -m bench answers --json --out bench/results

The set is ``bench/sets/answers.py``: simple factual and everyday questions with accepted key words
(geography, animals, arithmetic, colours, days and months, units, opposites, everyday facts). Each
question is one ``POST /v1/chat/completions`` (the official ``openai`` SDK, text only, no stream)
whose messages are just the user question: no system message, so the backend's default
instructions apply, and the default temperature and token budget unless ``--temperature`` /
``--max-tokens`` are given. Scored per question: right (every key group present as a whole word,
``bench.sets.answers.score``), short (at most ``SHORT_WORDS`` words), words, and latency (request to
complete reply). One warm-up request is not counted.

Targets: ``embedded`` (the bundled SmolLM2-135M), and with ``--llm-url`` also ``llm`` (the cascade
with backend options ``llm_url`` / ``llm_model`` / ``llm_api_key``, passed only when given), each
on its own fresh stack, one after the other.

Goals: >= 80 % right and >= 90 % short, each marked met or missed, on the median of ``--runs``
runs (default 3) on one stack, each figure with its spread (min-max). The embedded model decodes
greedily at the default temperature, so its runs agree on the answers (the spread shows it); at a
sampling temperature they differ.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from openai import OpenAI

from bench.sets.answers import DEV, EVAL, SHORT_WORDS, Question, score, words
from bench.launch import ROOT, Launched, raise_fd_limit
from bench.stats import goal_mark, median_spread, summary

MODEL = "omniduplex-cascade"
GOAL_RIGHT = 0.80  # share of questions answered right (issue 19)
GOAL_SHORT = 0.90  # share answered in at most SHORT_WORDS words
REQUEST_TIMEOUT_S = 300.0
SHOWN_CHARS = 300  # wrong/long answers are listed up to this many characters (all of it with --verbose)


def questions(which: str = "eval", limit: int | None = None) -> list[Question]:
    chosen = {"eval": EVAL, "dev": DEV}[which]
    return chosen[:limit] if limit else list(chosen)


def commit() -> str:
    """The git commit the run measured (``+dirty`` when the work tree differs)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def ask(client: OpenAI, question: str, temperature: float | None, max_tokens: int | None) -> tuple[str, float]:
    """The reply's text and the request's latency in ms."""
    extra: dict[str, Any] = {}
    if temperature is not None:
        extra["temperature"] = temperature
    if max_tokens is not None:
        extra["max_tokens"] = max_tokens
    start = time.monotonic()
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}], **extra)
    return reply.choices[0].message.content or "", (time.monotonic() - start) * 1000


def run_target(gateway: str, items: list[Question], temperature: float | None = None,
               max_tokens: int | None = None) -> list[dict[str, Any]]:
    client = OpenAI(base_url=f"{gateway}/v1", api_key="x", max_retries=0, timeout=REQUEST_TIMEOUT_S)
    ask(client, "Hi!", temperature, max_tokens)  # warm-up, not counted
    rows = []
    for item in items:
        row: dict[str, Any] = {"question": item.text}
        try:
            answer, ms = ask(client, item.text, temperature, max_tokens)
            row.update(latency_ms=round(ms, 1))
        except Exception as e:  # noqa: BLE001 - a failed request is a wrong answer, reported as an error
            answer = ""
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        n = words(answer)
        row.update(answer=answer, right=score(answer, item), words=n, short=0 < n <= SHORT_WORDS)
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def share(xs: list[bool]) -> float | None:
        return round(sum(xs) / len(xs), 3) if xs else None

    latency = summary([r["latency_ms"] for r in rows if "latency_ms" in r])
    return {
        "questions": len(rows),
        "right": share([r["right"] for r in rows]),
        "short": share([r["short"] for r in rows]),
        "right_and_short": share([r["right"] and r["short"] for r in rows]),
        "mean_words": round(sum(r["words"] for r in rows) / len(rows), 1) if rows else None,
        "latency_ms_p50": latency["p50"],
        "latency_ms_p90": latency["p90"],
        "errors": sum("error" in r for r in rows),
    }


def backend_options(args) -> dict[str, Any]:
    """The cascade's LLM options for the ``llm`` target: only those given."""
    given = {"llm_url": args.llm_url, "llm_model": getattr(args, "llm_model", None),
             "llm_api_key": getattr(args, "llm_api_key", None)}
    return {k: v for k, v in given.items() if v}


def run_stack(items: list[Question], options: dict[str, Any], temperature: float | None,
              max_tokens: int | None, runs: int = 1) -> list[tuple[list[dict[str, Any]], float]]:
    """``runs`` passes over ``items`` on one fresh stack: (rows, wall seconds) per run."""
    out = []
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}},
                      backend={"name": "cascade", "options": options}) as launched:
            launched.wait_ready()
            for _ in range(runs):
                t0 = time.monotonic()
                rows = run_target(launched.url, items, temperature, max_tokens)
                out.append((rows, time.monotonic() - t0))
    return out


def run_cli(args) -> dict[str, Any]:
    raise_fd_limit()
    which = getattr(args, "set", None) or "eval"
    if which not in ("eval", "dev"):
        raise SystemExit(f"--set {which}: this benchmark has a dev and an eval part only")
    items = questions(which, getattr(args, "limit", None))
    temperature, max_tokens = getattr(args, "temperature", None), getattr(args, "max_tokens", None)
    targets: list[tuple[str, dict[str, Any]]] = [("embedded", {})]
    if getattr(args, "llm_url", None):
        targets.append(("llm", backend_options(args)))
    out: dict[str, Any] = {"set": which, "commit": commit(), "temperature": temperature, "max_tokens": max_tokens,
                           "verbose": bool(getattr(args, "verbose", False)), "targets": []}
    runs = max(1, getattr(args, "runs", None) or 3)
    out["runs"] = runs
    for name, options in targets:
        passes = run_stack(items, options, temperature, max_tokens, runs)
        label = name if name == "embedded" else f"llm ({options.get('llm_model') or options['llm_url']})"
        per_run = [{**summarise(rows), "wall_s": round(wall, 1)} for rows, wall in passes]
        spread = {k: median_spread([r[k] for r in per_run]) for k in per_run[0]}
        out["targets"].append({"target": label, "summary": {k: v["median"] for k, v in spread.items()},
                               "spread": {k: v["text"] for k, v in spread.items()}, "per_run": per_run,
                               "rows": passes[-1][0]})
    return out


def _one_line(text: str, limit: int | None) -> str:
    flat = " ".join(text.split())
    return flat if limit is None or len(flat) <= limit else flat[:limit] + "..."


def report(r: dict[str, Any]) -> str:
    def given(value: Any) -> Any:
        return "default" if value is None else value

    lines = [f"Set: {r['set']}; commit {r['commit']}; temperature {given(r['temperature'])}; "
             f"max_tokens {given(r['max_tokens'])}; median (min-max) of {r.get('runs', 1)} runs", "",
             f"| target | questions | right | short (<= {SHORT_WORDS} words) | right and short | mean words | "
             "latency p50 ms | latency p90 ms | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in r["targets"]:
        s = t.get("spread") or t["summary"]
        lines.append(f"| {t['target']} | {s['questions']} | {s['right']} | {s['short']} | {s['right_and_short']} | "
                     f"{s['mean_words']} | {s['latency_ms_p50']} | {s['latency_ms_p90']} | {s['errors']} |")
    for t in r["targets"]:
        s = t["summary"]
        lines.append(f"\nGoals ({t['target']}): right {s['right']:.0%}, "
                     f"{goal_mark(s['right'], GOAL_RIGHT, f'>= {GOAL_RIGHT:.0%}', at_least=True)}; short "
                     f"{s['short']:.0%}, {goal_mark(s['short'], GOAL_SHORT, f'>= {GOAL_SHORT:.0%}', at_least=True)}")
    verbose = r.get("verbose")
    for t in r["targets"]:
        shown = t["rows"] if verbose else [x for x in t["rows"] if not (x["right"] and x["short"])]
        title = "All answers" if verbose else "Wrong or long answers"
        lines += ["", f"{title} ({t['target']}, last run, {len(shown)} of {len(t['rows'])}):", ""]
        for x in shown:
            tags = [] if x["right"] else ["WRONG"]
            if not x["short"]:
                tags.append(f"{x['words']} words")
            if "error" in x:
                tags.append(f"error: {x['error']}")
            mark = f" [{', '.join(tags)}]" if tags else ""
            lines.append(f"- {x['question']} -> {_one_line(x['answer'], None if verbose else SHOWN_CHARS)}{mark}")
    return "\n".join(lines)
