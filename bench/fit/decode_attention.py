"""A decode step's attention: two float32 matmuls (what ships) against torch's SDPA (dev only).

    python -m bench.fit.decode_attention      # ~4 min on two cores after the models load

SmolLM2 answers the dev complete requests (``bench/sets/duplex.py`` and the turn phrasings'),
greedy, 40 tokens, at one thread (a listening session's count), and one long request (~330 tokens
of prompt). Prints the time a token takes after the prefill with each attention, how many answers
are the same, and how many of each match the answers of float32 weights (the exact maths): a
faster attention must not move the answers further from them.
"""

from __future__ import annotations

import statistics
import threading
import time

import torch
import torch.nn.functional as F

import bench.sets.turn_phrasings as turn_phrasings
import core.cascade.fast_llama as fast_llama
from bench.sets.duplex import DEV_COMPLETE
from core.cascade.llm import KvState, SmolLm
from core.processors.cascade import CascadeBackend

LONG = "Tell me a long story about a dragon who loves books, with many details about the library. " * 12


def _sdpa(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, keys, values, scale=scale, enable_gqa=True)


def _answers(llm: SmolLm, system: str, requests: list[str]) -> tuple[list[str], list[float]]:
    """Each request's greedy answer and its milliseconds a token after the prefill."""
    llm._prefixes.clear()  # no prompt cached by the other variant
    texts, per_token = [], []
    for request in requests:
        pieces: list[str] = []
        t0 = time.perf_counter()
        stats = llm.generate([{"role": "system", "content": system}, {"role": "user", "content": request}],
                             KvState(), pieces.append, threading.Event(), max_tokens=40, temperature=0.0)
        total = (time.perf_counter() - t0) * 1000
        per_token.append((total - stats.prefill_ms) / max(1, stats.output_tokens - 1))
        texts.append("".join(pieces))
    return texts, per_token


def main() -> None:
    from transformers import AutoModelForCausalLM

    backend = CascadeBackend()
    backend.load()
    llm, system = backend.llm, backend.options.instructions
    SmolLm.use_threads(1)
    requests = list(DEV_COMPLETE) + list(turn_phrasings.DEV_MORE_COMPLETE)[:40] + [LONG]
    shipped = fast_llama._attend_one
    ours, ours_ms = _answers(llm, system, requests)
    fast_llama._attend_one = _sdpa
    try:
        theirs, theirs_ms = _answers(llm, system, requests)
    finally:
        fast_llama._attend_one = shipped
    model = AutoModelForCausalLM.from_pretrained(llm.path, dtype=torch.float32).eval()
    llm.runner.fast = fast_llama.FastLlama(model, torch.float32, llm.max_context, torch.float32)
    exact, _ = _answers(llm, system, requests)
    n = len(requests) - 1  # the short requests; the long one is timed apart
    print(f"ms a token after the prefill, p50 of {n} requests: SDPA {statistics.median(theirs_ms[:n]):.1f}, "
          f"two float32 matmuls {statistics.median(ours_ms[:n]):.1f}")
    print(f"after a {llm.count_tokens(LONG)}-token request: SDPA {theirs_ms[-1]:.1f}, matmuls {ours_ms[-1]:.1f}")
    print(f"same answers: {sum(a == b for a, b in zip(ours, theirs))} of {len(requests)}; "
          f"as float32 weights answer: SDPA {sum(a == b for a, b in zip(theirs, exact))}, "
          f"matmuls {sum(a == b for a, b in zip(ours, exact))}")
    for request, a, b, c in zip(requests, ours, theirs, exact):
        if a != b:
            print(f"  {request[:60]!r}\n    matmuls: {a!r}\n    SDPA:    {b!r}\n    float32: {c!r}")


if __name__ == "__main__":
    main()
