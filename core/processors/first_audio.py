"""A reply's first audio out before the Talker has finished its first piece (Qwen2.5-Omni, issue 73).

Why: a piece is spoken whole (Talker, then vocoder), so a reply's first audio waited for every
codec frame of its first piece (~40 frames: 934-966 ms of Talker and 654-680 ms of vocoder on an
H200, issue 37). The vocoder's DiT attends in blocks (``block_size`` mel frames, ``repeats`` mel
frames a code): each layer sees its own block, and a look-ahead layer the next one, a look-back
layer the one before. So a block's mel depends on the codes of at most ``len(look_backward_layers)``
blocks before it and ``len(look_ahead_layers)`` after it, and on its own starting noise. Here:

- When the Talker has written ``blocks + ahead`` blocks of codes, their mel is solved and the
  audio of the first ``blocks`` is let out (exact: each of those blocks had every code it reads).
  BigVGAN reads a few mel frames either side (about 17 at Qwen2.5-Omni-7B's shapes,
  ``BIGVGAN_MARGIN``); the blocks ahead are the first audio's right margin.
- When the piece is done, the rest is solved from ``back`` blocks before it (again every code
  each block reads) and vocoded with the kept mel's last ``BIGVGAN_MARGIN`` frames as its left
  margin, whose samples are dropped.
- Both solves read one noise drawn for the whole piece, sliced, so the mel is the piece's mel
  solved whole, to rounding; only the first audio's last frames heard the ahead blocks' mel
  solved without their own look-ahead (``tests/unit/test_static_speech.py``: the two parts joined are the
  piece vocoded whole to 1e-5 of its peak on the tiny model; 90 dB SNR at the 7B's shapes, random weights).

Qwen's own streaming (vLLM-Omni's ``Qwen2_5OmniToken2WavModel.process_chunk``) cuts its chunks on
the same blocks; this cuts once, where time to first audio is decided.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

BIGVGAN_MARGIN = 24  # mel frames (one DiT block) either side of a cut: BigVGAN's reach, measured ~17


def block_codes(dit_config: Any) -> int:
    """Codes in one of the DiT's attention blocks (12 for Qwen2.5-Omni: 240 ms)."""
    return max(1, dit_config.block_size // dit_config.repeats)


def waits_for(dit_config: Any, blocks: int) -> int:
    """Codes the first audio of ``blocks`` blocks waits for: those blocks and the ones they look ahead
    to (at least one: BigVGAN's right margin)."""
    return (blocks + max(1, len(dit_config.look_ahead_layers))) * block_codes(dit_config)


class FirstAudio:
    """One first piece: ``early(codes)`` when the Talker has ``at`` codes, then ``rest(codes)``."""

    def __init__(self, vocoder: Any, dit_config: Any, conditioning, reference_mel, steps: int, blocks: int,
                 max_codes: int, emit: Callable[[np.ndarray], None]) -> None:
        import torch

        self.vocoder, self.conditioning, self.reference_mel, self.steps = vocoder, conditioning, reference_mel, steps
        self.repeats = dit_config.repeats
        self.block = block_codes(dit_config)
        self.back = len(dit_config.look_backward_layers)
        self.blocks = blocks
        self.at = waits_for(dit_config, blocks)
        self.emit = emit
        self.noise = torch.randn([1, max_codes * self.repeats, dit_config.mel_dim], dtype=reference_mel.dtype,
                                 device=reference_mel.device)
        self.kept = None  # the first audio's exact mel, [1, mel_dim, frames]
        self.timing: tuple[float, float] | None = None  # when the Talker had its codes (perf_counter), vocoder s

    @property
    def done(self) -> bool:
        return self.kept is not None

    def _mel(self, codes, start: int):
        end = codes.shape[1]
        return self.vocoder.mel(codes[:, start:], self.conditioning, self.reference_mel, self.steps,
                                noise=self.noise[:, start * self.repeats:end * self.repeats])

    def early(self, codes) -> None:
        """The Talker's first ``at`` codes ([1, at], none of them an end): the first blocks' audio out."""
        t0 = time.perf_counter()
        mel = self._mel(codes.to(self.noise.device), 0)  # transformers' streamer hands them over on the CPU
        frames = self.blocks * self.block * self.repeats
        wav = self.vocoder.wav(mel).reshape(-1)
        hop = wav.shape[0] // mel.shape[2]
        self.kept = mel[:, :, :frames]
        self.timing = (t0, time.perf_counter() - t0)
        self.emit(wav[: frames * hop].float().cpu().numpy())

    def rest(self, codes) -> np.ndarray:
        """Everything after the first audio, for the piece's codes ([1, n], ends cut off; n >= ``at``,
        since the first audio only left with ``at`` codes none of which ended the piece)."""
        import torch

        first = self.blocks * self.block
        start = max(0, self.blocks - self.back) * self.block
        mel = self._mel(codes, start)[:, :, (first - start) * self.repeats:]
        margin = min(BIGVGAN_MARGIN, self.kept.shape[2])
        wav = self.vocoder.wav(torch.cat([self.kept[:, :, -margin:], mel], dim=2)).reshape(-1)
        hop = wav.shape[0] // (margin + mel.shape[2])
        return wav[margin * hop:].float().cpu().numpy()


class CodesAt:
    """A ``transformers`` streamer for the eager Talker: calls ``then(codes)`` once, when
    ``generate`` has written ``at`` codes and none of them ends the piece (its first ``put`` is the prompt)."""

    def __init__(self, at: int, stops: list[int], then: Callable[[Any], None]) -> None:
        self.at, self.stops, self.then = at, set(stops), then
        self.codes: list = []
        self.prompt_seen = self.fired = False

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        if self.fired:
            return
        self.codes.append(value.reshape(1, -1))
        if int(value.reshape(-1)[0]) in self.stops:
            self.fired = True  # the piece ended first: spoken whole
        elif len(self.codes) == self.at:
            import torch

            self.fired = True
            self.then(torch.cat(self.codes, dim=1))

    def end(self) -> None:
        pass
