"""The lean Llama forward must compute what transformers computes, on the real SmolLM2 weights."""

from __future__ import annotations

import torch

from core.cascade.fast_llama import FastLlama, supports


def test_fast_forward_matches_transformers(cascade_backend):
    from transformers import AutoModelForCausalLM

    llm = cascade_backend.llm
    model = AutoModelForCausalLM.from_pretrained(llm.path, dtype=torch.float32).eval()
    assert supports(model)
    fast = FastLlama(model, torch.float32, max_len=256)
    ids = llm.prompt_tokens([{"role": "user", "content": "What is the capital of France?"}])
    with torch.inference_mode():
        reference = model(input_ids=torch.tensor([ids])).logits[0]
    cache = fast.new_cache()
    # prefill in two parts (as prefix reuse does), then one decode step
    fast.forward(ids[:10], cache)
    logits = fast.forward(ids[10:-1], cache)
    assert torch.allclose(logits, reference[-2], atol=2e-3)
    logits = fast.forward(ids[-1:], cache)
    assert torch.allclose(logits, reference[-1], atol=2e-3)
    assert cache.length == len(ids)
    # cropping and re-running the last token gives the same answer again
    cache.crop(-1)
    assert torch.allclose(fast.forward(ids[-1:], cache), reference[-1], atol=2e-3)


def test_backend_llm_answers_greedily_like_transformers(cascade_backend):
    """End to end through SmolLm.generate (whatever dtypes auto picked) at temperature 0."""
    import threading

    from core.cascade.llm import KvState

    pieces: list[str] = []
    stats = cascade_backend.llm.generate(
        [{"role": "system", "content": cascade_backend.options.instructions},
         {"role": "user", "content": "What is the capital of France?"}], KvState(), pieces.append,
        threading.Event(), max_tokens=12, temperature=0.0,
    )
    # the exact greedy answer float32 gives: lower-precision paths must not change it
    assert "".join(pieces).startswith("The capital of France is Paris")
    assert stats.output_tokens > 0


def test_prefill_lengths_fall_into_few_shapes_and_never_overrun_the_cache():
    """Per-shape kernel state made a worker grow ~2 MB per new prompt length (soak test); padded
    prefill bounds the shapes, and never pads past the cache's free room."""
    from core.cascade.fast_llama import padded_length

    shapes = {padded_length(n, 2048) for n in range(1, 2049)}
    assert len(shapes) <= 45, sorted(shapes)
    for n in range(1, 300):
        assert n <= padded_length(n, 2048) <= n * 4 / 3 + 1  # little wasted prefill
        assert padded_length(n, n + 1) in (n, n + 1)  # no room: exact length


def test_auto_dtypes_follow_the_cpu(monkeypatch):
    """(decode, prefill): float16 decode wherever AVX512 is; the prefill in float16 with
    AVX512-FP16, bfloat16 with AVX512-BF16 (issue 47: half of float32's bytes), else float32."""
    import core.cascade.llm as llm

    for flags, want in (("avx512f avx512_fp16 avx512_bf16", (torch.float16, torch.float16)),
                        ("avx512f avx512_bf16 avx512_vnni", (torch.float16, torch.bfloat16)),
                        ("avx512f avx512bw", (torch.float16, torch.float32)),
                        ("avx2 fma", (torch.float32, torch.float32))):
        monkeypatch.setattr(llm, "_cpu_flags", lambda flags=flags: f"flags\t: {flags}\n")
        assert llm.resolve_dtypes("auto") == want, flags
    assert llm.resolve_dtypes("float32") == (torch.float32, torch.float32)
