"""Qwen2.5-Omni's vocoder (Token2Wav: a DiT solved by flow matching, then BigVGAN), its solver
replayed as one CUDA graph per piece length on a GPU.

Why: a piece's mel comes from ``num_steps - 1`` Runge-Kutta steps of four DiT passes each (36 at
the default 10 steps), every pass a few dozen small kernels: on a GPU the vocoder's time is
launches (issue 37: the first piece took it 654-680 ms). transformers' ``sample`` also compares
tensors on the host at every step. Here the same arithmetic runs with the step times as fixed
tensors, so the whole solve for one code length is captured once and replayed; the starting
noise is drawn as ``sample`` draws it and copied in. On a CPU it runs without graphs, and the
tests check it gives ``Token2Wav``'s waveform for one seed.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

MAX_GRAPHS = 12  # piece lengths whose solve stays captured (the least recently used goes)
GUIDANCE = 0.5  # Token2Wav's defaults, which the backend uses
SWAY = -1.0


class StaticVocoder:
    """Token2Wav's ``forward`` for one piece, on fixed tensors (and CUDA graphs when ``graphs``)."""

    def __init__(self, token2wav: Any, graphs: bool) -> None:
        self.t2w = token2wav
        self.dit = token2wav.code2wav_dit_model
        self.graphs = graphs
        self._solves: OrderedDict[tuple, _Solve | bool] = OrderedDict()  # False: capture failed

    def __call__(self, code, conditioning, reference_mel, num_steps: int = 10):
        return self.wav(self.mel(code, conditioning, reference_mel, num_steps))

    def mel(self, code, conditioning, reference_mel, num_steps: int = 10, noise=None):
        """The DiT's mel ([1, mel_dim, frames]) for ``code`` ([1, n]), solved from ``noise``
        ([1, frames, mel_dim]; drawn here as ``sample`` draws it when None: the same numbers for one seed)."""
        import torch

        dit = self.dit
        frames = code.shape[1] * dit.repeats
        if frames > dit.config.max_position_embeddings:
            raise ValueError(f"mel length {frames} exceeds the DiT's {dit.config.max_position_embeddings}")
        if noise is None:
            noise = torch.randn([reference_mel.shape[0], frames, dit.mel_dim], dtype=reference_mel.dtype,
                                device=code.device)
        solve = self._captured(noise, code, conditioning, reference_mel, num_steps) \
            if self.graphs and code.device.type == "cuda" else None
        if solve is None:
            return _solve(dit, noise, code, conditioning, reference_mel, num_steps)
        return solve.run(noise, code, conditioning, reference_mel).clone()

    def wav(self, mel):
        """BigVGAN's waveform for a mel."""
        return self.t2w.code2wav_bigvgan_model(mel)

    def _captured(self, noise, code, conditioning, reference_mel, num_steps: int) -> _Solve | None:
        """This shape's captured solve (captured now if new); None where capture failed (then
        the shape runs uncaptured from here on)."""
        key = (code.shape[1], tuple(conditioning.shape), tuple(reference_mel.shape), num_steps)
        solve = self._solves.pop(key, None)
        if solve is None:
            try:
                solve = _Solve(self.dit, noise, code, conditioning, reference_mel, num_steps)
            except Exception:  # noqa: BLE001 - a solve that cannot be captured still runs, uncaptured
                log.exception("the vocoder's solve could not be captured as a CUDA graph (%d codes): "
                              "it runs without one", code.shape[1])
                solve = False
            while len(self._solves) >= MAX_GRAPHS:
                self._solves.popitem(last=False)
        self._solves[key] = solve
        return solve or None


def _solve(dit, state, code, conditioning, reference_mel, num_steps: int):
    """``Token2Wav``'s DiT ``sample`` from the starting ``state``: guided flow matching by
    Runge-Kutta 4 over swayed time points, written with the same operations in the same order."""
    import torch

    frames = state.shape[1]
    speaker = conditioning.unsqueeze(1).repeat(1, frames, 1)
    times = torch.linspace(0, 1, num_steps, device=code.device, dtype=speaker.dtype)
    times += SWAY * (torch.cos(torch.pi / 2 * times) - 1 + times)

    def velocity(t, x):
        out = dit(hidden_states=x, quantized_code=code, speaker_embedding=speaker, condition_vector=reference_mel,
                  time_step=t, apply_cfg=True)
        guided, null = torch.chunk(out, 2, dim=0)
        return guided + (guided - null) * GUIDANCE

    third, two_thirds = 1 / 3, 2 / 3
    x = state
    for i in range(num_steps - 1):
        t0, t1 = times[i], times[i + 1]
        dt = t1 - t0
        k1 = velocity(t0, x)
        k2 = velocity(t0 + dt * third, x + dt * k1 * third)
        k3 = velocity(t0 + dt * two_thirds, x + dt * (k2 - k1 * third))
        k4 = velocity(t1, x + dt * (k1 - k2 + k3))
        x = x + (k1 + 3 * (k2 + k3) + k4) * dt / 8
    return x.permute(0, 2, 1)


class _Solve:
    """One code length's solve captured as a CUDA graph, on inputs it copies into fixed tensors."""

    def __init__(self, dit, noise, code, conditioning, reference_mel, num_steps: int) -> None:
        import torch

        self.state, self.code = noise.clone(), code.clone()
        self.conditioning, self.reference_mel = conditioning.clone(), reference_mel.clone()
        args = (dit, self.state, self.code, self.conditioning, self.reference_mel, num_steps)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _solve(*args)  # warm-up: cuBLAS, the allocator
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.mel = _solve(*args)

    def run(self, noise, code, conditioning, reference_mel):
        self.state.copy_(noise)
        self.code.copy_(code)
        self.conditioning.copy_(conditioning)
        self.reference_mel.copy_(reference_mel)
        self.graph.replay()
        return self.mel
