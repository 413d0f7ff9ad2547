"""The spoken turn-taking evaluation set (``bench/sets/turns.py``, eval part): complete questions and utterances with a pause mid-sentence.

    from bench.turn_set import items, synthesize
    clip = synthesize(items("paused")[0])  # PCM16 24 kHz mono + where the speech is

- ``complete``: a whole question or request; the system should answer it quickly.
- ``paused``: an unfinished phrase (ending in a preposition, an article, a conjunction, a filler,
  "if"...), 0.6-1.5 s of silence (fixed per item), then the rest. Answering inside
  the pause is a cut-in.

Spoken with Debian ``espeak-ng`` (not the project's Piper voice), several voices, speeds and
pitches, assigned round-robin within each kind so each kind uses every voice. Each espeak piece is
resampled 22050 -> 24000 Hz and trimmed to its first/last sample above ``VOICED``, so the last
voiced sample is well defined. WAVs (and a JSON sidecar with the sample marks) are cached under
``data/turn_set/`` (git-ignored), keyed by a hash of the text, voice and pause. The texts and
voices live with the other evaluation sets, in ``bench/sets/turns.py``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.sets.turns import EVAL_COMPLETE, EVAL_PAUSED, VOICES
from bench.spoken_clips import RATE, Clip, spoken  # noqa: F401 - RATE, Clip: for callers
from devtools.espeak import VOICED as ESPEAK_VOICED
from devtools.espeak import espeak_path  # noqa: F401 - for callers of this module

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "data" / "turn_set"
ESPEAK_RATE = 22050
VOICED = ESPEAK_VOICED  # |sample| above this (int16, about -40 dBFS) counts as voiced when trimming
SYNTH_VERSION = 1  # bump when synthesis changes, so cached WAVs are remade


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    kind: str  # "complete" or "paused"
    parts: tuple[str, ...]  # one piece, or (before the pause, after it)
    pause_s: float  # 0 for complete items
    voice: str
    speed: int
    pitch: int

    @property
    def text(self) -> str:
        return " ".join(self.parts)

    def key(self) -> str:
        spec = json.dumps([SYNTH_VERSION, self.parts, self.pause_s, self.voice, self.speed, self.pitch])
        return hashlib.sha1(spec.encode()).hexdigest()[:12]


def _all_items() -> list[Item]:
    out = []
    for i, text in enumerate(EVAL_COMPLETE):
        v, s, p = VOICES[i % len(VOICES)]
        out.append(Item(f"c{i:02d}", "complete", (text,), 0.0, v, s, p))
    for i, (before, pause, after) in enumerate(EVAL_PAUSED):
        v, s, p = VOICES[i % len(VOICES)]
        out.append(Item(f"p{i:02d}", "paused", (before, after), pause, v, s, p))
    return out


ITEMS: list[Item] = _all_items()


def items(kind: str | None = None, limit: int | None = None) -> list[Item]:
    """The items of one kind (or all, complete first), the first ``limit`` of each kind."""
    kinds = [kind] if kind else ["complete", "paused"]
    out: list[Item] = []
    for k in kinds:
        of_kind = [it for it in ITEMS if it.kind == k]
        out += of_kind[:limit] if limit is not None else of_kind
    return out


def synthesize(item: Item, cache_dir: Path | None = None) -> Clip:
    """The item as PCM16 24 kHz mono, from the cache or made with espeak-ng (then cached)."""
    return spoken(item, Path(cache_dir or CACHE))


def synthesize_all(kind: str | None = None, limit: int | None = None,
                   cache_dir: Path | None = None) -> list[Clip]:
    return [synthesize(it, cache_dir) for it in items(kind, limit)]


def longest_silence(pcm: np.ndarray, threshold: int = VOICED) -> tuple[int, int]:
    """(start, length) of the longest run of samples at or below ``threshold``."""
    quiet = np.abs(pcm.astype(np.int32)) <= threshold
    edges = np.diff(np.concatenate([[0], quiet.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if starts.size == 0:
        return 0, 0
    i = int(np.argmax(ends - starts))
    return int(starts[i]), int(ends[i] - starts[i])


if __name__ == "__main__":
    for clip in synthesize_all():
        it = clip.item
        pause = "" if clip.pause_start is None else f" pause {clip.pause_start}-{clip.resume}"
        print(f"{it.id} {it.voice:14s} {clip.seconds:5.2f}s{pause} {it.text}")
