"""How the backchannel-or-interruption judge's numbers and word list (``core/conversation/overlap.py``)
were chosen, on the dev set only.

    python -m bench.fit.overlap_fit      # ~3 min: speak, glance, grid-search, print

The dev part of ``bench/sets/duplex.py``: every ``DEV_BACKCHANNELS`` phrase and every
``DEV_INTERRUPTIONS`` phrase spoken by every ``DEV_VOICES`` voice (espeak-ng). Each clip is
glanced at as the judge does while the voice goes on (its first N ms plus 100 ms of silence, N
from 200 ms in 100 ms steps) and once whole. The word list is every word the glances heard in a
backchannel plus the backchannels' written words. A grid search over the first glance, the
glances that must agree, the letters that count and the longest backchannel then keeps the
settings whose backchannels are taken as interruptions at most ``MAX_FALSE`` of the time and,
among them, the one that sees interruptions soonest (p50 of the voice heard at the verdict).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np

from bench.sets.duplex import DEV_BACKCHANNELS, DEV_INTERRUPTIONS, DEV_VOICES
from core.conversation import overlap as ov

STEPS_MS = tuple(range(200, 1600, 100))
TAIL = 1600  # 100 ms of silence after the glanced voice, as the judge pads it
MAX_FALSE = 0.05
CACHE = Path(__file__).resolve().parents[2] / "data" / "overlap_fit.json"


def glances(silence_pad: bool = False, clips: list[tuple[str, str]] | None = None,
            cache: Path | None = None, prompt: str | None = None) -> list[dict]:
    """Per dev clip: its kind, length, the glance at each step inside it, and the whole clip's
    (``silence_pad``: the glances padded as ``WhisperAsr.glance(silence_pad=True)`` pads).
    ``clips``: (kind, text) to speak in every dev voice instead of the dev backchannels and
    interruptions, cached in ``cache``. ``prompt``: glanced after that previous text
    (``WhisperAsr.glance(prompt=...)``), cached apart (the caller names ``cache`` for it)."""
    if cache is None:
        cache = CACHE.with_name("overlap_fit_silence.json") if silence_pad else CACHE
        if prompt:
            cache = cache.with_name(f"{cache.stem}_prompt{prompt_key(prompt)}.json")
    if cache.exists():
        return json.loads(cache.read_text())
    from core.cascade.asr import WhisperAsr
    from devtools.espeak import espeak

    asr = WhisperAsr()
    rows = []
    if clips is None:
        clips = [("backchannel", t) for t in DEV_BACKCHANNELS] + [("interruption", t) for t, _ in DEV_INTERRUPTIONS]
    for kind, text in clips:
        for voice, speed, pitch in DEV_VOICES:
            pcm = espeak(text, voice, speed, pitch, rate=16000).astype(np.float32) / 32768
            pad = np.zeros(TAIL, np.float32)
            looks = {ms: asr.glance(np.concatenate([pcm[: ms * 16], pad]), silence_pad, prompt)
                     for ms in STEPS_MS if ms * 16 < pcm.size}
            whole = asr.glance(np.concatenate([pcm, pad, pad]), silence_pad, prompt)
            rows.append({"kind": kind, "text": text, "voice": voice, "ms": pcm.size // 16, "looks": looks,
                         "whole": whole})
            print(kind, voice, rows[-1]["ms"], repr(text), looks, repr(whole), file=sys.stderr, flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(rows))
    return rows


def prompt_key(prompt: str) -> str:
    """A short stable name for a glance prompt's cache files."""
    import hashlib

    return hashlib.sha256(prompt.encode()).hexdigest()[:8]


def word_list(rows: list[dict], min_clips: int = 1) -> frozenset[str]:
    """The backchannels' written words, and every word glances heard in at least ``min_clips``
    backchannel clips."""
    seen: dict[str, int] = {}
    for r in rows:
        if r["kind"] == "backchannel":
            for w in {w for text in [*r["looks"].values(), r["whole"]] for w in ov.words_of(text)}:
                seen[w] = seen.get(w, 0) + 1
    written = {w for t in DEV_BACKCHANNELS for w in ov.words_of(t)}
    return frozenset(written | {w for w, n in seen.items() if n >= min_clips})


def judge(r: dict, known: frozenset[str], first: int, confirm: int, letters: int, longest: int) -> tuple[str, int]:
    """(verdict, voice heard at the verdict in ms) for one clip, as the judge would rule."""
    in_a_row = 0
    for ms in STEPS_MS:
        if ms >= r["ms"]:
            break
        if ms >= longest:
            return "interruption", longest
        if ms < first:
            continue
        in_a_row = in_a_row + 1 if ov.unexpected_letters(r["looks"][str(ms)] if str(ms) in r["looks"]
                                                         else r["looks"][ms], known) >= letters else 0
        if in_a_row >= confirm:
            return "interruption", ms
    if r["ms"] >= longest:
        return "interruption", longest
    if not ov.words_of(r["whole"]):
        return "noise", r["ms"]
    return ("interruption" if ov.unexpected_letters(r["whole"], known) >= letters else "backchannel"), r["ms"]


def main() -> None:
    """Each setting is scored leaving one dev voice out: the word list is built from the other
    voices' glances and judged on that voice's clips (the list built from every clip would know
    each clip's own mishearings)."""
    rows = glances()
    voices = sorted({r["voice"] for r in rows})
    results = []
    for min_clips in (1, 2, 3):  # a word heard in at least this many backchannel clips joins the list
        lists = {v: word_list([r for r in rows if r["voice"] != v], min_clips) for v in voices}
        for first, confirm, letters, longest in itertools.product((200, 300, 400, 500), (1, 2), (1, 2, 3, 4, 5),
                                                                  range(800, 1700, 100)):
            verdicts = [(r, judge(r, lists[r["voice"]], first, confirm, letters, longest)) for r in rows]
            bcs = [v for r, (v, _) in verdicts if r["kind"] == "backchannel"]
            ints = [(v, ms) for r, (v, ms) in verdicts if r["kind"] == "interruption"]
            false = sum(v == "interruption" for v in bcs) / len(bcs)
            missed = sum(v != "interruption" for v, _ in ints) / len(ints)
            p50 = float(np.median([ms for _, ms in ints]))
            results.append((min_clips, first, confirm, letters, longest, false, missed, p50))
    ok = [x for x in results if x[5] <= MAX_FALSE and x[6] == 0]
    ok.sort(key=lambda x: (x[7], x[5], -x[4]))
    print("min_clips first confirm letters longest | backchannels as interruptions | interruptions missed "
          "| voice at verdict p50 (each voice judged with the others' list)")
    for x in ok[:15]:
        print(f"{x[0]:3d} {x[1]:5d} {x[2]:7d} {x[3]:7d} {x[4]:7d} | {x[5]:.1%} | {x[6]:.1%} | {x[7]:.0f} ms")
    print("\nthe trade-off: the soonest verdict p50 for each bound on backchannels taken as interruptions")
    for bound in (0.05, 0.10, 0.15, 0.20, 0.30, 0.50):
        within = sorted((x for x in results if x[5] <= bound and x[6] == 0), key=lambda x: (x[7], x[5]))
        if within:
            x = within[0]
            print(f"<= {bound:.0%}: {x[7]:.0f} ms (min_clips {x[0]}, first {x[1]}, confirm {x[2]}, letters {x[3]}, "
                  f"longest {x[4]}; {x[5]:.1%} false)")
    known = word_list(rows, ok[0][0] if ok else 1)
    print(f"\nBACKCHANNEL_WORDS ({len(known)}):")
    print("frozenset({" + ", ".join(repr(w) for w in sorted(known)) + "})")


if __name__ == "__main__":
    main()
