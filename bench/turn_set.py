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
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.sets.turns import EVAL_COMPLETE, EVAL_PAUSED, VOICES
from devtools.espeak import VOICED as ESPEAK_VOICED
from devtools.espeak import espeak, espeak_path  # noqa: F401 - espeak_path: for callers of this module
from core.files import atomic_write_bytes
from core.media import write_wav

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "data" / "turn_set"
RATE = 24000
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


@dataclass(frozen=True, slots=True)
class Clip:
    item: Item
    pcm: np.ndarray  # int16, mono, RATE
    last_voiced: int  # sample index of the last voiced sample
    pause_start: int | None  # paused items: first silent sample of the pause
    resume: int | None  # paused items: first voiced sample after it
    path: Path

    @property
    def seconds(self) -> float:
        return self.pcm.size / RATE


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


def _load(item: Item, wav_path: Path, meta_path: Path) -> Clip | None:
    try:
        meta = json.loads(meta_path.read_text())
        with wave.open(str(wav_path), "rb") as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
                return None
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
    except (OSError, ValueError, EOFError, wave.Error):
        return None
    if pcm.size != meta.get("samples"):
        return None
    return Clip(item, pcm, meta["last_voiced"], meta["pause_start"], meta["resume"], wav_path)


def synthesize(item: Item, cache_dir: Path | None = None) -> Clip:
    """The item as PCM16 24 kHz mono, from the cache or made with espeak-ng (then cached)."""
    cache = Path(cache_dir or CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    wav_path = cache / f"{item.id}-{item.key()}.wav"
    meta_path = wav_path.with_suffix(".json")
    if wav_path.exists() and meta_path.exists():
        clip = _load(item, wav_path, meta_path)
        if clip is not None:
            return clip
    pieces = [espeak(text, item.voice, item.speed, item.pitch, RATE, VOICED) for text in item.parts]
    pause_start = resume = None
    if item.kind == "paused":
        pause_start = pieces[0].size
        gap = np.zeros(int(round(item.pause_s * RATE)), dtype=np.int16)
        resume = pause_start + gap.size
        pcm = np.concatenate([pieces[0], gap, pieces[1]])
    else:
        pcm = np.concatenate(pieces)
    meta = {"id": item.id, "kind": item.kind, "text": item.text, "voice": item.voice, "speed": item.speed,
            "pitch": item.pitch, "pause_s": item.pause_s, "rate": RATE, "samples": int(pcm.size),
            "last_voiced": int(pcm.size - 1), "pause_start": pause_start, "resume": resume}
    write_wav(wav_path, pcm, RATE)
    atomic_write_bytes(meta_path, json.dumps(meta, indent=1).encode())
    return Clip(item, pcm, meta["last_voiced"], pause_start, resume, wav_path)


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
