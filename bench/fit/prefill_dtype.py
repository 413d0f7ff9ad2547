"""SmolLM2's prefill in bfloat16 against float32, the decode in float16 for both (dev only).

    python -m bench.fit.prefill_dtype      # ~5 min on two cores after the models load

On a CPU with AVX512-BF16 and no AVX512-FP16 (AMD Zen 4 here) the prefill of a spoken turn is on
semantic_vad's critical path, and float32 reads twice bfloat16's bytes. SmolLM2 answers the dev
complete requests (``bench/sets/duplex.py``, the turn phrasings') and the answer set's dev
questions (``bench/sets/answers.py``), greedy, 40 tokens, at one thread (a listening session's
count), twice per dtype (the second pass is timed). Prints the prefill's time, how many greedy
answers are the same, how many dev questions each answers right (``bench.sets.answers.score``) and
the answers that differ, for a person to read.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

import torch

import bench.sets.turn_phrasings as turn_phrasings
import core.cascade.llm as llm_module
from bench.sets.answers import DEV as ANSWER_QUESTIONS, score
from bench.sets.duplex import DEV_COMPLETE
from core.cascade.llm import KvState, SmolLm
from core.processors.cascade import CascadeBackend


def _answers(llm: SmolLm, system: str, requests: list[str]) -> tuple[list[str], list[float]]:
    """Each request's greedy answer and its prefill's milliseconds (the system prompt cached)."""
    llm._prefixes.clear()
    texts, prefill = [], []
    for request in requests:
        pieces: list[str] = []
        stats = llm.generate([{"role": "system", "content": system}, {"role": "user", "content": request}],
                             KvState(), pieces.append, threading.Event(), max_tokens=40, temperature=0.0)
        texts.append("".join(pieces))
        prefill.append(stats.prefill_ms)
    return texts, prefill


def _load(path: Path, prefill: torch.dtype) -> SmolLm:
    chosen = llm_module.resolve_dtypes
    llm_module.resolve_dtypes = lambda name: (torch.float16, prefill)
    try:
        return SmolLm(Path("data"), model_path=str(path), threads=1)
    finally:
        llm_module.resolve_dtypes = chosen


def main() -> None:
    backend = CascadeBackend()
    backend.load()
    system = backend.options.instructions
    variants = {name: _load(backend.llm.path, dtype)
                for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
    SmolLm.use_threads(1)
    questions = [q.text for q in ANSWER_QUESTIONS]
    requests = list(DEV_COMPLETE) + list(turn_phrasings.DEV_MORE_COMPLETE)[:40] + questions
    out = {}
    for name, llm in variants.items():
        _answers(llm, system, requests)  # warm: every shape once
        out[name] = _answers(llm, system, requests)
    (a, a_ms), (b, b_ms) = out["float32"], out["bfloat16"]
    first = len(requests) - len(questions)
    right = {name: sum(score(t, q) for t, q in zip(texts[first:], ANSWER_QUESTIONS))
             for name, (texts, _) in out.items()}
    print(f"{len(requests)} dev requests, one thread; prefill p50: float32 {statistics.median(a_ms):.0f} ms, "
          f"bfloat16 {statistics.median(b_ms):.0f} ms; greedy answers the same: {sum(x == y for x, y in zip(a, b))}")
    print(f"dev answer set right: float32 {right['float32']}, bfloat16 {right['bfloat16']} of {len(questions)}")
    for request, x, y in zip(requests, a, b):
        if x != y:
            print(f"{request!r}\n  float32:  {x!r}\n  bfloat16: {y!r}")


if __name__ == "__main__":
    main()
