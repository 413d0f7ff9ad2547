"""A lean forward pass for Llama-architecture checkpoints (SmolLM2 among them).

transformers' generic forward spends more time in Python bookkeeping (masks, cache objects,
hooks) than in arithmetic for a 135M model on two cores. This module runs the same maths on
the same weights with fused projections (q|k|v and gate|up), a preallocated KV cache, torch's
SDPA for a prefill and two float32 matmuls for a decode step's attention, which cuts the time
per token roughly in half. ``tests/unit/test_fast_llama.py``
checks its logits against transformers' own forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def supports(model) -> bool:
    cfg = model.config
    return (
        cfg.model_type == "llama"
        and not getattr(cfg, "attention_bias", False)
        and not getattr(cfg, "mlp_bias", False)
        and (getattr(cfg, "rope_scaling", None) or {}).get("rope_type", "default") == "default"
        and (getattr(cfg, "rope_parameters", None) or {}).get("rope_type", "default") == "default"
        and cfg.hidden_act == "silu"
    )


# Prefill lengths are padded up to one of these, so the matmuls see a few dozen shapes rather
# than one per prompt length: torch's oneDNN kernels keep per-shape state (primitive caches,
# JIT code, scratch buffers), and a worker serving thousands of turns of every length grew by
# ~2 MB per new length without end (the soak test found it). Padding sits after the real
# tokens, so the causal mask keeps it out of their attention and the cache never counts it.
_EXACT_UP_TO = 8
_BUCKETS = (
    *range(12, 33, 4), *range(40, 65, 8), *range(80, 129, 16),  # at most 3, 7, 15 pad tokens
    160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048,
    2560, 3072, 3584, 4096,
)  # 42 shapes with the exact ones; at worst a third more tokens (9 -> 12), ~2 MB of kernel state each


def padded_length(n: int, room: int) -> int:
    """The shape to run ``n`` new tokens at, given ``room`` free cache positions."""
    if n <= _EXACT_UP_TO:
        return n
    for size in _BUCKETS:
        if size >= n:
            return size if size <= room else n
    return n


@dataclass(slots=True)
class _Layer:
    norm1: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    norm2: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


class FastCache:
    """Preallocated K/V for one conversation: [layers, kv_heads, max_len, head_dim]."""

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, max_len: int, dtype: torch.dtype) -> None:
        # Uninitialised: attention reads only positions below ``length``, and zeroing ~90 MB
        # cost a new conversation's first reply 20-45 ms; untouched pages are never even mapped.
        self.k = torch.empty(n_layers, 1, kv_heads, max_len, head_dim, dtype=dtype)
        self.v = torch.empty_like(self.k)
        self.length = 0
        self.max_len = max_len

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions (``n`` >= 0) or drop the last ``-n`` (``n`` < 0)."""
        self.length = n if n >= 0 else max(0, self.length + n)

    def copy_prefix_from(self, other: FastCache, n: int) -> None:
        self.k[:, :, :, :n].copy_(other.k[:, :, :, :n])
        self.v[:, :, :, :n].copy_(other.v[:, :, :, :n])
        self.length = n


@dataclass(slots=True)
class _Weights:
    embed: torch.Tensor
    layers: list[_Layer]
    norm: torch.Tensor
    lm_head: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor


class FastLlama:
    """``dtype`` is used for one-token decode steps, ``prefill_dtype`` for multi-token
    prefill (on CPUs with AMX, bfloat16 matmuls are fastest at M>1 while float16 wins at
    M=1). The KV cache is kept in ``dtype``."""

    def __init__(
        self,
        model,
        dtype: torch.dtype = torch.float32,
        max_len: int = 2048,
        prefill_dtype: torch.dtype | None = None,
    ) -> None:
        cfg = model.config
        self.dtype = dtype
        self.prefill_dtype = prefill_dtype or dtype
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.max_len = min(max_len, cfg.max_position_embeddings)
        self.hidden = cfg.hidden_size
        self.inter = cfg.intermediate_size
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta") or getattr(cfg, "rope_theta", 10000.0)
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        freqs = torch.outer(torch.arange(self.max_len, dtype=torch.float32), inv_freq)
        self._emb = torch.cat([freqs, freqs], dim=-1)
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.decode_w = self._weights(model, dtype)
        self.prefill_w = (
            self.decode_w if self.prefill_dtype == dtype else self._weights(model, self.prefill_dtype)
        )

    def _weights(self, model, dtype: torch.dtype) -> _Weights:
        m = model.model

        def w(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(dtype).contiguous()

        layers = []
        for layer in m.layers:
            a, p = layer.self_attn, layer.mlp
            layers.append(
                _Layer(
                    norm1=w(layer.input_layernorm.weight),
                    qkv=w(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])),
                    o=w(a.o_proj.weight),
                    norm2=w(layer.post_attention_layernorm.weight),
                    gate_up=w(torch.cat([p.gate_proj.weight, p.up_proj.weight])),
                    down=w(p.down_proj.weight),
                )
            )
        embed = w(m.embed_tokens.weight)
        head = model.lm_head.weight
        tied = head.data_ptr() == m.embed_tokens.weight.data_ptr()
        return _Weights(
            embed=embed,
            layers=layers,
            norm=w(m.norm.weight),
            lm_head=embed if tied else w(head),
            cos=self._emb.cos().to(dtype),
            sin=self._emb.sin().to(dtype),
        )

    def new_cache(self) -> FastCache:
        return FastCache(self.n_layers, self.kv_heads, self.head_dim, self.max_len, self.dtype)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.hidden,), weight, self.eps)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, ids: list[int], cache: FastCache, also: int | list[int] | None = None):
        """Run ``ids`` after the cached positions; returns float32 logits of the last one (and,
        with ``also``, a pair: those and the logits after ``ids[also]``, or a list of them when
        ``also`` is a list of positions)."""
        real = len(ids)
        start = cache.length
        if start + real > cache.max_len:
            raise ValueError(f"context of {start + real} tokens exceeds {cache.max_len}")
        n = padded_length(real, cache.max_len - start)
        ids = list(ids) + [ids[-1]] * (n - real)
        wts = self.decode_w if n == 1 else self.prefill_w
        x = wts.embed[torch.tensor(ids, dtype=torch.long)].unsqueeze(0)  # [1, n, hidden]
        cos = wts.cos[start : start + n]
        sin = wts.sin[start : start + n]
        hq, hk, d = self.n_heads, self.kv_heads, self.head_dim
        end = start + n
        cast = wts is not self.decode_w
        for i, layer in enumerate(wts.layers):
            h = self._rms(x, layer.norm1)
            qkv = F.linear(h, layer.qkv)
            q = qkv[..., : hq * d].view(1, n, hq, d).transpose(1, 2)
            k = qkv[..., hq * d : (hq + hk) * d].view(1, n, hk, d).transpose(1, 2)
            v = qkv[..., (hq + hk) * d :].view(1, n, hk, d).transpose(1, 2)
            q = self._rope(q, cos, sin)
            k = self._rope(k, cos, sin)
            cache.k[i, :, :, start:end] = k
            cache.v[i, :, :, start:end] = v
            keys = cache.k[i, :, :, :end]
            values = cache.v[i, :, :, :end]
            if cast:
                keys, values = keys.to(x.dtype), values.to(x.dtype)
            if n == 1:
                attn = _attend_one(q, keys, values, self.scale)
            else:
                mask = torch.ones(n, end, dtype=torch.bool).tril(diagonal=start)
                attn = F.scaled_dot_product_attention(
                    q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
                )
            x = x + F.linear(attn.transpose(1, 2).reshape(1, n, hq * d), layer.o)
            h = self._rms(x, layer.norm2)
            gate, up = F.linear(h, layer.gate_up).split(self.inter, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        cache.length = start + real
        at = [] if also is None else [also] if isinstance(also, int) else list(also)
        # The few rows wanted go through the decode weights' vocabulary head, in one call: at
        # M <= 3 its float16 kernel takes ~3-5 ms where float32 takes ~10 ms a row (2 cores).
        last = self._rms(x[:, [real - 1, *at]], wts.norm).to(self.dtype)
        rows = F.linear(last, self.decode_w.lm_head)[0].float()
        if also is None:
            return rows[0]
        return rows[0], rows[1] if isinstance(also, int) else list(rows[1:])


def _attend_one(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """One new token's attention over the cache, in float32: for a single float16 query, torch's
    CPU SDPA took ~3x longer than these two matmuls at the same error (0.19 vs 0.06 ms a layer
    at 60 positions, 2.4 vs 0.24 ms at 1200), a fifth of a decode step in a short reply and most
    of it in a long conversation. Query heads share key/value heads in consecutive groups
    (GQA, as ``enable_gqa``)."""
    b, hq, _, d = q.shape
    groups = q.reshape(b, keys.shape[1], hq // keys.shape[1], d).float()
    scores = torch.matmul(groups, keys.transpose(-1, -2).float()) * scale
    return torch.matmul(scores.softmax(-1), values.float()).to(q.dtype).view(b, hq, 1, d)
