"""How few flow-matching steps Qwen2.5-Omni's vocoder needs (issue 73, item 2): a CPU check.

    python -m bench.fit.ode_steps                      # ~3 min: Qwen2.5-Omni-7B's DiT shapes, 4 layers
    python -m bench.fit.ode_steps --depth 0 --pieces 1 # all 22 layers (~10 min)

The vocoder's DiT solves an ODE from noise to a mel (``core/processors/vocoder_static.py``: RK4
over swayed time points, ``token2wav_steps`` points, 4 DiT passes a step). Its time is the
number of passes, so fewer steps are the cheapest cut, if the mel holds. Weights cannot be
fetched here: the DiT has Qwen2.5-Omni-7B's shapes and random weights (``devtools/omni_models.py``),
so this measures how far the solver is from the ODE's solution, not how the speech sounds.

For each piece (random codes, a random speaker), the mel at each step count is compared with
the mel at ``REFERENCE_STEPS`` steps from the same noise (the solver's error), and the mel at 10
steps (the model's default) from two noises is compared (what the sampling itself varies).
Errors are relative L2 norms over the whole mel. The rule, fixed before the first run: a step
count holds where its solver error is at most a tenth of the sampling's own spread and at most
twice the default's solver error (the median over pieces). The fewest steps that hold is printed
and is what ``scripts/gpu_bench.sh`` gives the change (``token2wav_steps``); the backend's
default stays Qwen's 10 until a listener has heard real weights at the new count.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

REFERENCE_STEPS = 64
DEFAULT_STEPS = 10
STEPS = (3, 4, 5, 6, 7, 8, 10)


def _dit(depth: int | None, seed: int):
    import torch
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniToken2WavModel

    from devtools.omni_models import qwen2_5_omni_7b_config

    config = qwen2_5_omni_7b_config(depth or None).token2wav_config
    torch.manual_seed(seed)
    return Qwen2_5OmniToken2WavModel(config).eval().float()


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def check(depth: int | None, pieces: int, codes: int, seed: int, log=print) -> dict:
    import torch

    from core.processors.vocoder_static import StaticVocoder

    t2w = _dit(depth, seed)
    dit = t2w.config.dit_config
    vocoder = StaticVocoder(t2w, graphs=False)
    gen = torch.Generator().manual_seed(seed)
    errors: dict[int, list[float]] = {s: [] for s in STEPS}
    spread: list[float] = []
    with torch.inference_mode():
        for k in range(pieces):
            t0 = time.perf_counter()
            code = torch.randint(0, dit.num_embeds - 1, (1, codes), generator=gen)
            cond = torch.randn(1, dit.enc_emb_dim, generator=gen)
            ref = torch.randn(1, 30, dit.mel_dim, generator=gen)
            noise = torch.randn(1, codes * dit.repeats, dit.mel_dim, generator=gen)
            other = torch.randn(1, codes * dit.repeats, dit.mel_dim, generator=gen)
            truth = vocoder.mel(code, cond, ref, REFERENCE_STEPS, noise=noise)
            mels = {s: vocoder.mel(code, cond, ref, s, noise=noise) for s in STEPS}
            for s in STEPS:
                errors[s].append(_rel(mels[s], truth))
            spread.append(_rel(vocoder.mel(code, cond, ref, DEFAULT_STEPS, noise=other), mels[DEFAULT_STEPS]))
            log(f"  piece {k + 1}/{pieces}: " + ", ".join(f"{s} steps {errors[s][-1]:.4f}" for s in STEPS)
                + f"; two noises {spread[-1]:.3f} ({time.perf_counter() - t0:.0f} s)")
    median = {s: float(np.median(v)) for s, v in errors.items()}
    noise_spread = float(np.median(spread))
    holds = {s: median[s] <= 0.1 * noise_spread and median[s] <= 2 * median[DEFAULT_STEPS] for s in STEPS}
    fewest = min((s for s in STEPS if holds[s]), default=DEFAULT_STEPS)
    return {"depth": depth or dit.num_hidden_layers, "pieces": pieces, "codes": codes,
            "solver_error": median, "noise_spread": noise_spread, "holds": holds, "fewest": fewest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=4, help="DiT layers (0: all 22, as in the model)")
    ap.add_argument("--pieces", type=int, default=3)
    ap.add_argument("--codes", type=int, default=48, help="codes a piece (50 a second)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = check(args.depth, args.pieces, args.codes, args.seed)
    if args.json:
        print(json.dumps(result))
        return
    print(f"\nQwen2.5-Omni-7B's DiT shapes, {result['depth']} layers, random weights; {args.pieces} pieces of "
          f"{args.codes} codes; the mel's relative L2 error against {REFERENCE_STEPS} steps (median over pieces); "
          f"two noises at {DEFAULT_STEPS} steps differ by {result['noise_spread']:.3f}\n")
    print("| steps | DiT passes | solver error | holds |\n|---|---|---|---|")
    for s in STEPS:
        print(f"| {s} | {4 * (s - 1)} | {result['solver_error'][s]:.4f} | {'yes' if result['holds'][s] else 'no'} |")
    print(f"\nfewest steps that hold: {result['fewest']}")


if __name__ == "__main__":
    main()
