"""What words mean for turn-taking, read by SmolLM2 and a small logistic head (issue 47).

Two questions, one reader:
- **Over the reply** (``OVERLAP``): do the words said while the assistant talks take the floor
  (an interruption) or only acknowledge (a backchannel)? The overlap judge
  (``core/conversation/overlap.py``) read its glances against a list of the words Whisper had
  heard in the dev backchannels, so any acknowledgement phrased outside the list was an
  interruption, however plainly it only acknowledged.
- **At a pause** (``TURN``): is the user's message complete? ``semantic_vad`` joins this with
  its end-of-turn score (``core/conversation/end_of_turn.py``).

SmolLM2 (the cascade's bundled model, its first ``LAYER`` layers) reads the words inside a frame
(the question's), and a logistic regression on that reading (the last token's hidden state and
the mean over the words) gives the probability. Each head is fitted at load on labelled dev
examples (``overlap_examples.py``, ``turn_examples.py``) and kept in ``cache_dir``
(``<name>-<hash>.npz``), so a later start only loads it. Why this and not the embedded LLM
asked a question: a 135M model answers a yes/no question about the words no better than chance,
while its hidden states separate acknowledgements from requests, and complete messages from
openings, on phrasings held out of the fit (``python -m bench.fit.meaning_fit``,
``python -m bench.fit.turn_meaning_fit``). Blocking: runs on the glance thread, ~45 ms a
reading of a short turn at one thread, bound by reading 16 layers' float32 weights; a reading
that extends the last one in its frame runs only its new tokens (~26 ms for one). Torch on
that second thread left the LLM thread's decoding as fast as before (57.3 -> 59.0 ms a piece).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from core.cascade.llm import common_prefix

LAYER = 16  # of SmolLM2-135M's 30: chosen on dev (held out by phrase: 12 -> 1, 16 -> 0, 30 -> 2 of 52 wrong)
OVERLAP = ('While the assistant was talking, the listener said: "', '"')
TURN = ("User: ", "")  # chosen on dev among three frames (bench.fit.turn_meaning_fit)
L2 = 10.0  # ridge on the standardised features (C = 0.1 per example), chosen on dev
STEPS = 300  # gradient steps of the fit (deterministic, converged at this size)
VERSION = 1  # bump when the features change: the cached heads are keyed by it

Head = tuple[np.ndarray, np.ndarray, np.ndarray, float]  # mean, scale, weights, bias
Example = str | tuple[str, int]  # a text, or a text and how many times it counts in the fit


def counted(example: Example) -> tuple[str, int]:
    """(text, times it counts) of an example."""
    return (example, 1) if isinstance(example, str) else (example[0], int(example[1]))


def fit_counted(read: Callable[[str], np.ndarray], zeros: Sequence[Example], ones: Sequence[Example]) -> Head:
    """A head on label-0 and label-1 examples: each text read once, its row counted as often as
    the example says (``fit_logistic`` on the repeated rows)."""
    every = [(*counted(e), y) for y, part in ((0.0, zeros), (1.0, ones)) for e in part]
    times = [n for _, n, _ in every]
    rows = np.stack([read(t) for t, _, _ in every])
    return fit_logistic(np.repeat(rows, times, axis=0), np.repeat(np.array([y for _, _, y in every]), times))


def _key_part(examples: list[tuple[str, int]]) -> list:
    """The examples as the cache key has always named them: a bare text when it counts once
    (the turn head's cached files keep their names)."""
    return [t if n == 1 else [t, n] for t, n in examples]


class WordsReader:
    """SmolLM2's reading of words in a frame: the features the heads are fitted on."""

    def __init__(self, model_path: Path) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.name = Path(model_path).name
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModel.from_pretrained(model_path, dtype=torch.float32).eval()
        model.layers = model.layers[:LAYER]  # the rest is never read: less to run and to hold
        model.config.num_hidden_layers = LAYER
        self.model = model
        self.lock = threading.Lock()
        self._prefixes: dict[str, object] = {}  # each frame's opening, read once
        # Per frame, the last words read: their ids, the cache after them and their hidden rows.
        # A turn's words are read at every pause and each reading mostly extends the last, so a
        # reading runs only the tokens after the common start (the final one, on semantic_vad's
        # critical path beside the reply's prefill, then costs a word, not the whole turn).
        self._last: dict[str, tuple[list[int], object, torch.Tensor]] = {}

    @torch.inference_mode()
    def _run(self, ids: list[int], past):
        out = self.model(input_ids=torch.tensor([ids], dtype=torch.long), past_key_values=past, use_cache=True)
        return out.last_hidden_state[0], out.past_key_values

    def features(self, words: str, frame: tuple[str, str] = OVERLAP) -> np.ndarray:
        """The last token's hidden state and the mean over the words' (and the frame's closing)."""
        encode = self.tokenizer.encode
        ids = encode(words.strip(), add_special_tokens=False) + encode(frame[1], add_special_tokens=False)
        with self.lock:
            hidden = self._read(frame[0], ids)
        return torch.cat([hidden[-1], hidden.mean(0)]).numpy()

    def _read(self, opening: str, ids: list[int]) -> torch.Tensor:
        """Hidden rows of ``ids`` after the frame's ``opening``: the tokens the last reading in
        this frame shares with ``ids`` are taken from it, the rest run after its cache."""
        if opening not in self._prefixes:
            self._prefixes[opening] = self._run(self.tokenizer.encode(opening, add_special_tokens=False), None)[1]
        start = self._prefixes[opening].get_seq_length()
        kept, rows = 0, None
        last = self._last.get(opening)
        if last is not None:
            kept = min(common_prefix(last[0], ids), len(ids) - 1)  # at least one token runs
        if kept > 0:
            past = copy.deepcopy(last[1])
            extra = past.get_seq_length() - (start + kept)
            if extra > 0:
                past.crop(-extra)  # this transformers crops by a negative count only
            rows = last[2][:kept]
        else:
            past = copy.deepcopy(self._prefixes[opening])
        new, past = self._run(ids[kept:], past)
        hidden = new if rows is None else torch.cat([rows, new])
        self._last[opening] = (list(ids), past, hidden)
        return hidden


class MeaningHead:
    """P(label 1) for words in ``frame``: the reader and a logistic head fitted on ``examples``
    (label-0 examples, label-1 examples; each a text, or a text and how many times it counts),
    cached in ``cache_dir`` as ``<name>-<hash>.npz``."""

    def __init__(self, reader: WordsReader, name: str, frame: tuple[str, str],
                 examples: tuple[Sequence[Example], Sequence[Example]], cache_dir: Path | None = None) -> None:
        self.reader, self.frame = reader, frame
        zeros, ones = ([counted(e) for e in part] for part in examples)
        key = hashlib.sha256(json.dumps([VERSION, LAYER, frame, L2, STEPS, reader.name,
                                         _key_part(zeros), _key_part(ones)]).encode()).hexdigest()[:16]
        cached = cache_dir / f"{name}-{key}.npz" if cache_dir is not None else None
        if cached is not None and cached.exists():
            head = np.load(cached)
            self.head: Head = (head["mean"], head["scale"], head["weights"], float(head["bias"]))
            return
        self.head = fit_counted(lambda t: reader.features(t, frame), zeros, ones)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.stem}.{os.getpid()}.tmp.npz")
            mean, scale, weights, bias = self.head
            np.savez(tmp, mean=mean, scale=scale, weights=weights, bias=bias)
            os.replace(tmp, cached)  # atomic: a worker starting beside this one reads all or nothing

    def probability(self, words: str) -> float:
        """Blocking."""
        return probability(self.head, self.reader.features(words, self.frame))


def overlap_head(reader: WordsReader, cache_dir: Path | None) -> MeaningHead:
    """P(words said over the reply take the floor)."""
    from core.cascade.overlap_examples import BACKCHANNELS, INTERRUPTIONS

    return MeaningHead(reader, "overlap_meaning", OVERLAP, (BACKCHANNELS, INTERRUPTIONS), cache_dir)


def turn_head(reader: WordsReader, cache_dir: Path | None) -> MeaningHead:
    """P(the user's message is complete after these words)."""
    from core.cascade.turn_examples import COMPLETE, OPEN

    return MeaningHead(reader, "turn_meaning", TURN, (OPEN, COMPLETE), cache_dir)


def probability(head: Head, features: np.ndarray) -> float:
    mean, scale, weights, bias = head
    return float(1.0 / (1.0 + np.exp(-(((features - mean) / scale) @ weights + bias))))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2) -> Head:
    """Ridge logistic regression by gradient descent on standardised features: (mean, scale,
    weights, bias). Small and deterministic; no solver library needed for a few hundred rows."""
    mean, scale = x.mean(0), x.std(0) + 1e-6
    z = (x - mean) / scale
    w, b = np.zeros(z.shape[1]), 0.0
    lam = l2 / len(y)
    for _ in range(STEPS):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        w -= 0.5 * (z.T @ (p - y) / len(y) + lam * w)
        b -= 0.5 * float((p - y).mean())
    return mean, scale, w, b
