"""Qwen2.5-Omni's Talker decoding codec frames on a static KV cache, replayed as CUDA graphs on a GPU.

Why: one codec frame is one token through the Talker's 24 layers; on a GPU that step is bound by
Python and kernel launches, not by arithmetic (issue 37 on an H200: the first piece's 40 frames
took the Talker 934-966 ms). transformers' ``generate`` grows a dynamic cache, so no step can be
captured. Here the cache is a ``StaticCache`` of a fixed size (``bucket``): every tensor a step
touches keeps its address, so on CUDA the step is captured once per bucket (``torch.cuda.CUDAGraph``)
and replayed per frame. On a CPU the same code runs without graphs; the tests compare its codes
with ``generate``'s on the tiny models (greedy, and sampled with one seed).

What it keeps of ``generate``: the prefill is the Talker's own forward, called as ``generate``
calls it, and the logits are processed as ``generate`` does for the options the backend passes
(repetition penalty over the prompt's ids and the frames so far, suppressed ids, then
temperature, top-k and top-p when sampling). Only the decode step is written here: the frame's
codec embedding plus the reply's next Thinker state, the projection, the layers at the cache's
length (the same position in all three rope sections, as the Talker's model places a step
``generate`` gives no mask), the head.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable

log = logging.getLogger(__name__)

MIN_BUCKET = 256  # cache sizes are powers of two from here: a graph per size, reused across pieces
MAX_BUCKETS = 3  # caches (and their graphs) kept per worker; the least recently used goes


def bucket(tokens: int) -> int:
    """The cache size that holds ``tokens``: the next power of two, at least ``MIN_BUCKET``."""
    size = MIN_BUCKET
    while size < tokens:
        size *= 2
    return size


class StaticTalker:
    """One Talker's static-cache decoder (one piece at a time: the backend's Talker thread)."""

    def __init__(self, talker: Any, graphs: bool) -> None:
        self.talker = talker
        self.graphs = graphs  # capture the decode step (CUDA only)
        self._slots: OrderedDict[int, _Slot] = OrderedDict()

    def generate(self, *, talker_ids, input_text_ids, inputs_embeds, thinker_reply_part, suppress: list[int],
                 eos: list[int], max_new_tokens: int, stop: Callable[[], bool], do_sample: bool = False,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, repetition_penalty: float = 1.0,
                 at: tuple[int, Callable[[Any], None]] | None = None, **mm: Any):
        """The codec frames after ``talker_ids`` ([1, n] long, as ``generate(...)[:, n:]`` returns
        them): up to ``max_new_tokens``, ending with the first of ``eos``, or early when ``stop()``.
        ``at`` = (k, then): ``then(frames)`` once the first k frames are written, none of them an end."""
        import torch

        dev = talker_ids.device
        n = talker_ids.shape[1]
        slot = self._slot(bucket(n + max_new_tokens + 1))
        slot.reset()
        pick = _Picker(talker_ids, suppress, do_sample, temperature, top_k, top_p, repetition_penalty)
        # No attention mask, as transformers' generate calls it (5.23 hands the Talker none): so
        # its forward places the frames at plain positions and adds no codec embeddings of its own.
        out = self.talker(input_ids=talker_ids, input_text_ids=input_text_ids, inputs_embeds=inputs_embeds,
                          thinker_reply_part=thinker_reply_part, past_key_values=slot.cache, use_cache=True, **mm)
        reply = out.thinker_reply_part
        token = pick(out.logits[:, -1, :])
        codes = [token]
        eos_ids = torch.tensor(eos, device=dev)
        for i in range(max_new_tokens - 1):
            if bool(torch.isin(token, eos_ids).any()) or stop():
                break
            if at is not None and len(codes) == at[0]:
                at[1](torch.cat(codes, dim=1))
            logits = slot.step(token, reply[:, min(i, reply.shape[1] - 1)], self.graphs)
            token = pick(logits)
            codes.append(token)
        return torch.cat(codes, dim=1)

    def _slot(self, size: int) -> _Slot:
        slot = self._slots.pop(size, None)
        if slot is None:
            slot = _Slot(self.talker, size)
            while len(self._slots) >= MAX_BUCKETS:
                self._slots.popitem(last=False)
        self._slots[size] = slot
        return slot


class _Picker:
    """The next frame from a step's logits, as ``generate`` picks it for these options."""

    def __init__(self, prompt_ids, suppress: list[int], do_sample: bool, temperature: float, top_k: int,
                 top_p: float, repetition_penalty: float) -> None:
        import torch
        from transformers.generation.logits_process import (LogitsProcessorList, RepetitionPenaltyLogitsProcessor,
                                                            SuppressTokensLogitsProcessor, TemperatureLogitsWarper,
                                                            TopKLogitsWarper, TopPLogitsWarper)

        self.ids = prompt_ids
        procs = LogitsProcessorList()
        if repetition_penalty != 1.0:
            procs.append(RepetitionPenaltyLogitsProcessor(repetition_penalty))
        if suppress:
            procs.append(SuppressTokensLogitsProcessor(suppress, device=prompt_ids.device))
        if do_sample:
            if temperature != 1.0:
                procs.append(TemperatureLogitsWarper(temperature))
            if top_k:
                procs.append(TopKLogitsWarper(top_k=top_k))
            if top_p < 1.0:
                procs.append(TopPLogitsWarper(top_p=top_p))
        self.procs, self.sample, self.torch = procs, do_sample, torch

    def __call__(self, logits):
        torch = self.torch
        scores = self.procs(self.ids, logits.float())
        if self.sample:
            token = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1)
        else:
            token = torch.argmax(scores, dim=-1, keepdim=True)
        self.ids = torch.cat([self.ids, token], dim=1)
        return token


class _Slot:
    """A static cache of one size, its step's fixed input and output tensors and, on CUDA, the
    step's graph."""

    def __init__(self, talker: Any, size: int) -> None:
        import torch
        from transformers import StaticCache

        p = next(talker.parameters())
        self.talker, self.size, self.dev = talker, size, p.device
        self.cache = StaticCache(config=talker.config, max_cache_len=size)
        self.token = torch.zeros((1, 1), dtype=torch.long, device=p.device)
        self.reply = torch.zeros((1, 1, talker.config.embedding_size), dtype=p.dtype, device=p.device)
        self.positions = torch.arange(size, device=p.device)
        self.masked = torch.finfo(p.dtype).min  # an additive mask's "not visible", as transformers' masks use
        self.logits = None
        self.graph: Any = None  # None: not captured yet; False: capture failed, steps run without it

    def reset(self) -> None:
        """An empty cache for the next piece, every tensor where it was."""
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.zero_()

    def step(self, token, reply, graphs: bool):
        """The logits for the frame after ``token`` ([1, 1]) with the reply's Thinker state ``reply`` ([1, E])."""
        self.token.copy_(token)
        self.reply[:, 0].copy_(reply)
        if not graphs or self.dev.type != "cuda" or self.graph is False:
            return self._forward()
        if self.graph is None:
            try:
                self._capture()
            except Exception:  # noqa: BLE001 - a step that cannot be captured still runs, uncaptured
                log.exception("the Talker's decode step could not be captured as a CUDA graph (cache size %d): "
                              "it runs without one", self.size)
                self.graph = False
                return self._forward()
        self.graph.replay()
        return self.logits

    def _forward(self):
        """One decode step on the fixed tensors (what the graph records)."""
        import torch

        talker = self.talker
        length = self.cache.layers[0].cumulative_length  # frames in the cache: this one's position
        embeds = talker.get_input_embeddings()(self.token) + self.reply
        hidden = talker.thinker_to_talker_proj(embeds)
        position = length.reshape(1, 1, 1).expand(3, 1, 1)
        mask = torch.where(self.positions <= length, 0.0, self.masked).to(hidden.dtype).reshape(1, 1, 1, self.size)
        out = talker.model(inputs_embeds=hidden, attention_mask={"full_attention": mask}, position_ids=position,
                           past_key_values=self.cache, use_cache=True)
        return talker.codec_head(out.last_hidden_state)[:, -1, :].float()

    def _capture(self) -> None:
        """Record the step once for this cache size: warmed up on a side stream first (cuBLAS
        and the allocator), then captured; the cache's lengths are put back after the warm-up, so
        the real step that follows writes where the warm-up did."""
        import torch

        lengths = [layer.cumulative_length.clone() for layer in self.cache.layers]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward()
                for layer, n in zip(self.cache.layers, lengths):
                    layer.cumulative_length.copy_(n)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self._forward()
