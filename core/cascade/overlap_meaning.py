"""What a voice over the assistant's reply means: how likely its words take the floor (issue 47).

The overlap judge (``core/conversation/overlap.py``) read its glances against a list of the words
Whisper had heard in the dev set's backchannels, so any acknowledgement phrased outside the list
was taken as an interruption, however plainly it only acknowledged. This reads the words by
meaning: SmolLM2 (the cascade's bundled model, its first ``LAYER`` layers) reads them framed as
what a listener said while the assistant talked, and a logistic regression on that reading (the
last token's hidden state and the mean over the words) gives P(interruption). It is fitted at
load on labelled dev examples (``overlap_examples.py``: the dev phrases as written and as Whisper
heard them in the dev voices) and kept in ``data_dir`` (``overlap_meaning-<hash>.npz``), so a
later start only loads it. Why this and not the embedded LLM asked a question: a 135M model
answers a yes/no question about the words no better than chance, while its hidden states
separate acknowledgements from requests well (``python -m bench.fit.meaning_fit``, held out by
phrase and by voice on dev). Blocking: runs on the glance thread, tens of ms a reading; torch
on that second thread left the LLM thread's decoding as fast as before (measured 57.3 -> 59.0 ms
a piece).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from core.cascade.overlap_examples import BACKCHANNELS, INTERRUPTIONS

LAYER = 16  # of SmolLM2-135M's 30: chosen on dev (held out by phrase: 12 -> 1, 16 -> 0, 30 -> 2 of 52 wrong)
FRAME = ('While the assistant was talking, the listener said: "', '"')
L2 = 10.0  # ridge on the standardised features (C = 0.1 per example), chosen on dev
STEPS = 300  # gradient steps of the fit (deterministic, converged at this size)
VERSION = 1  # bump when the features change: the cached head is keyed by it


class WordsReader:
    """SmolLM2's reading of words said over the reply: the features the head is fitted on."""

    def __init__(self, model_path: Path) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.name = Path(model_path).name
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModel.from_pretrained(model_path, dtype=torch.float32).eval()
        model.layers = model.layers[:LAYER]  # the rest is never read: less to run and to hold
        model.config.num_hidden_layers = LAYER
        self.model = model
        self.lock = threading.Lock()
        self.tail_ids = self.tokenizer.encode(FRAME[1], add_special_tokens=False)
        self._prefix = self._run(self.tokenizer.encode(FRAME[0], add_special_tokens=False), None)[1]  # read once

    @torch.inference_mode()
    def _run(self, ids: list[int], past):
        out = self.model(input_ids=torch.tensor([ids], dtype=torch.long), past_key_values=past, use_cache=True)
        return out.last_hidden_state[0], out.past_key_values

    def features(self, words: str) -> np.ndarray:
        """The last token's hidden state and the mean over the words' (and the closing quote's)."""
        ids = self.tokenizer.encode(words.strip(), add_special_tokens=False) + self.tail_ids
        with self.lock:
            hidden, _ = self._run(ids, copy.deepcopy(self._prefix))
        return torch.cat([hidden[-1], hidden.mean(0)]).numpy()


class OverlapMeaning:
    """P(a voice's words take the floor): the reader and a logistic head fitted on ``examples``."""

    def __init__(self, model_path: Path, cache_dir: Path | None = None,
                 examples: tuple[Sequence[str], Sequence[str]] = (BACKCHANNELS, INTERRUPTIONS)) -> None:
        self.reader = WordsReader(model_path)
        backchannels, interruptions = examples
        key = hashlib.sha256(json.dumps([VERSION, LAYER, FRAME, L2, STEPS, self.reader.name,
                                         list(backchannels), list(interruptions)]).encode()).hexdigest()[:16]
        cached = cache_dir / f"overlap_meaning-{key}.npz" if cache_dir is not None else None
        if cached is not None and cached.exists():
            head = np.load(cached)
            self.head = (head["mean"], head["scale"], head["weights"], float(head["bias"]))
            return
        features = np.stack([self.reader.features(t) for t in [*backchannels, *interruptions]])
        labels = np.array([0.0] * len(backchannels) + [1.0] * len(interruptions))
        self.head = fit_logistic(features, labels)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.stem}.{os.getpid()}.tmp.npz")
            mean, scale, weights, bias = self.head
            np.savez(tmp, mean=mean, scale=scale, weights=weights, bias=bias)
            os.replace(tmp, cached)  # atomic: a worker starting beside this one reads all or nothing

    def interruption_probability(self, words: str) -> float:
        """P(``words``, said over the reply, take the floor). Blocking."""
        return probability(self.head, self.reader.features(words))


def probability(head: tuple[np.ndarray, np.ndarray, np.ndarray, float], features: np.ndarray) -> float:
    mean, scale, weights, bias = head
    return float(1.0 / (1.0 + np.exp(-(((features - mean) / scale) @ weights + bias))))


def fit_logistic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Ridge logistic regression by gradient descent on standardised features: (mean, scale,
    weights, bias). Small and deterministic; no solver library needed for a few hundred rows."""
    mean, scale = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / scale
    w, b = np.zeros(z.shape[1]), 0.0
    lam = L2 / len(y)
    for _ in range(STEPS):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        w -= 0.5 * (z.T @ (p - y) / len(y) + lam * w)
        b -= 0.5 * float((p - y).mean())
    return mean, scale, w, b
