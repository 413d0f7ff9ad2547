"""The spoken full-duplex sets (``bench/sets/duplex.py``): each part's phrases spoken by its voices.

    from bench.duplex_set import items, synthesize
    clip = synthesize(items("dev", "interruption")[0])  # PCM16 24 kHz mono + where the speech is

Kinds: ``complete`` (a whole question), ``paused`` (an unfinished phrase, 0.6-1.5 s of silence,
the rest), ``backchannel`` ("mm-hmm" while the assistant talks), ``interruption`` (a barge-in with
``expect`` keywords for the answer that should follow). The long-answer ``prompts`` are sent as
text (``prompts(part)``), not spoken. Within each kind the part's voices are assigned
round-robin, so every kind uses every voice of its part, and the eval part only its own voices.

As ``bench/turn_set.py``: each espeak-ng piece is resampled 22050 -> 24000 Hz and trimmed to its
first/last sample above ``VOICED``, so the clip's first sample is the voice's onset and its last
the last voiced sample. WAVs and a JSON sidecar with the marks are cached under
``data/duplex_set/`` (git-ignored), keyed by a hash of the text, voice, speed, pitch and pause.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from bench.sets.duplex import PARTS
from bench.spoken_clips import RATE, Clip, spoken  # noqa: F401 - RATE, Clip: for callers
from devtools.espeak import VOICED, espeak_path  # noqa: F401 - for callers (the tests)

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "data" / "duplex_set"
SYNTH_VERSION = 1  # bump when synthesis changes, so cached WAVs are remade
KINDS = ("complete", "paused", "backchannel", "interruption", "cutin")
OVERLAP_KINDS = ("backchannel", "interruption", "cutin")  # spoken over a long reply
_LETTER = {"complete": "c", "paused": "p", "backchannel": "b", "interruption": "i", "cutin": "s"}


@dataclass(frozen=True, slots=True)
class Item:
    id: str  # e.g. "dev-i03"
    part: str  # "dev" or "eval"
    kind: str  # one of KINDS
    parts: tuple[str, ...]  # one piece, or (before the pause, after it)
    pause_s: float  # paused items; 0 otherwise
    voice: str
    speed: int
    pitch: int
    expect: tuple[str, ...] = ()  # interruptions: keywords the next answer should contain

    @property
    def text(self) -> str:
        return " ".join(self.parts)

    def key(self) -> str:
        spec = json.dumps([SYNTH_VERSION, self.parts, self.pause_s, self.voice, self.speed, self.pitch])
        return hashlib.sha1(spec.encode()).hexdigest()[:12]


def _part_items(part: str) -> list[Item]:
    p = PARTS[part]
    voices = p["voices"]
    out: list[Item] = []

    def add(kind: str, i: int, parts: tuple[str, ...], pause: float = 0.0, expect: tuple[str, ...] = ()) -> None:
        v, s, pitch = voices[i % len(voices)]
        out.append(Item(f"{part}-{_LETTER[kind]}{i:02d}", part, kind, parts, pause, v, s, pitch, expect))

    for i, text in enumerate(p["complete"]):
        add("complete", i, (text,))
    for i, (before, pause, after) in enumerate(p["paused"]):
        add("paused", i, (before, after), pause)
    for i, text in enumerate(p["backchannel"]):
        add("backchannel", i, (text,))
    for i, (text, expect) in enumerate(p["interruption"]):
        add("interruption", i, (text,), expect=tuple(expect))
    for i, text in enumerate(p["cutin"]):
        add("cutin", i, (text,))
    return out


ITEMS: dict[str, list[Item]] = {part: _part_items(part) for part in PARTS}


def items(part: str = "eval", kind: str | None = None, limit: int | None = None) -> list[Item]:
    """One part's items of one kind (or all kinds, in ``KINDS`` order), the first ``limit`` of each."""
    out: list[Item] = []
    for k in [kind] if kind else KINDS:
        of_kind = [it for it in ITEMS[part] if it.kind == k]
        out += of_kind[:limit] if limit is not None else of_kind
    return out


def prompts(part: str = "eval") -> list[str]:
    """The part's long-answer prompts (sent as text, so a reply is playing when the clip comes)."""
    return list(PARTS[part]["prompts"])


def spoken_prompts(part: str, cache_dir: Path | None = None) -> list[Clip]:
    """The part's long-answer prompts spoken, by its voices in turn (``bench duplex --room``'s
    stories asked aloud: the answer follows the user's own voice)."""
    voices = PARTS[part]["voices"]
    out = []
    for i, text in enumerate(prompts(part)):
        v, s, pitch = voices[i % len(voices)]
        out.append(synthesize(Item(f"{part}-q{i:02d}", part, "complete", (text,), 0.0, v, s, pitch), cache_dir))
    return out


def synthesize(item: Item, cache_dir: Path | None = None) -> Clip:
    """The item as PCM16 24 kHz mono, from the cache or made with espeak-ng (then cached)."""
    return spoken(item, Path(cache_dir or CACHE), {"part": item.part, "expect": list(item.expect)})


def synthesize_all(part: str = "eval", kind: str | None = None, limit: int | None = None,
                   cache_dir: Path | None = None) -> list[Clip]:
    return [synthesize(it, cache_dir) for it in items(part, kind, limit)]


if __name__ == "__main__":
    import sys

    for clip in synthesize_all(sys.argv[1] if len(sys.argv) > 1 else "dev"):
        it = clip.item
        pause = "" if clip.pause_start is None else f" pause {clip.pause_start}-{clip.resume}"
        print(f"{it.id} {it.voice:20s} {clip.seconds:5.2f}s{pause} {it.text}")
