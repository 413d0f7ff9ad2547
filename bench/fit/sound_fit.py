"""Can the sound of a voice over the reply tell a backchannel from a floor-taker where the words
fail? (issue 47, dev only)

    python -m bench.fit.sound_fit      # ~6 min the first time (speaks and encodes), seconds after

The overlap judge reads what Whisper heard in its glances; most of its errors are mishearings
("Definitely." heard as "in the" in a dev voice). Whisper's encoder has heard the sound before any word is
chosen, and a glance computes it anyway. This fits a logistic head on the encoder's states over
the voiced frames (their mean and their maximum) and joins it with the words' reading
(``words_meaning``) as a weighted mean of log-odds, every dev clip judged by heads fitted
without its phrase group and its voice (as ``bench.fit.meaning_fit`` holds out), and prints,
by weight and threshold, backchannels taken and floor-takers missed. A second pass holds out
the phrase group and a whole base voice (en-us or en-gb), closer to meeting an unheard accent.
``--l2=X``: the sound head's ridge (the words' head keeps its own). ``--piper``: the sound head
fitted instead on the dev phrases as the bundled Piper voice says them (what a worker could do at
start), judged on the espeak-ng dev clips.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.fit.meaning_fit import (
    GROUPS, TAKES_THE_FLOOR, WordsFeatures, examples, fit_heads, group_of, held_out_heads, meaning_threshold, more_rows,
    written,
)
from bench.fit.overlap_fit import TAIL, glances
from bench.fit.stop_words import _look
from bench.sets.duplex import DEV_VOICES
from core.cascade.words_meaning import L2, fit_logistic, probability
from core.conversation.end_of_turn import join_log_odds
from core.conversation import overlap as ov

SOUNDS = Path(__file__).resolve().parents[2] / "data" / "sound_fit_features.npz"
PIPER_SOUNDS = SOUNDS.with_name("sound_fit_piper.npz")
PIPER_SPEEDS = (0.9, 1.0, 1.15)
GLANCES_MS = tuple(range(ov.GLANCE_FIRST_MS, ov.LONGEST_BACKCHANNEL_MS, ov.GLANCE_EVERY_MS))
FRAME_MS = 20  # one encoder state per 20 ms


def pooled(states: np.ndarray, voice_ms: int) -> np.ndarray:
    """The mean and the maximum of the encoder's states over the voiced frames."""
    n = max(1, min(states.shape[0], -(-voice_ms // FRAME_MS)))
    voiced = states[:n]
    return np.concatenate([voiced.mean(0), voiced.max(0)])


class SoundEncoder:
    """Whisper's encoder states of a clip's glances and of the whole clip, pooled (``pooled``)."""

    def __init__(self) -> None:
        import ctranslate2

        from core.cascade.asr import GLANCE_FRAMES, WhisperAsr

        self._storage, self._frames, self._asr = ctranslate2.StorageView, GLANCE_FRAMES, WhisperAsr()
        self._pad = np.zeros(TAIL, np.float32)

    def _encode(self, samples: np.ndarray) -> np.ndarray:
        mel = self._asr._mel(samples[: 2 * 16000], min_frames=self._frames, silence_pad=False)
        return np.array(self._asr._model.encode(self._storage.from_array(mel[None]), to_cpu=True))[0]

    def clip(self, pcm: np.ndarray) -> dict[str, np.ndarray]:
        """Glance ms (as text) or "whole" -> pooled states, padded as the judge pads its glances."""
        out = {str(ms): pooled(self._encode(np.concatenate([pcm[: ms * 16], self._pad])), ms)
               for ms in GLANCES_MS if ms * 16 < pcm.size}
        out["whole"] = pooled(self._encode(np.concatenate([pcm, self._pad, self._pad])), pcm.size // 16)
        return out


def cached(path: Path, make) -> dict[tuple[str, str, str], np.ndarray]:
    """``make()``'s features, kept in ``path`` (keys are string triples)."""
    if path.exists():
        with np.load(path, allow_pickle=False) as kept:
            keys, xs = kept["keys"], kept["x"]
            return {tuple(k): xs[i] for i, k in enumerate(keys)}
    out = make()
    keys = sorted(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, keys=np.array(keys), x=np.stack([out[k] for k in keys]))
    return out


def sound_features(rows: list[dict]) -> dict[tuple[str, str, str], np.ndarray]:
    """(text, voice, glance ms or "whole") -> pooled encoder states of every dev clip (espeak-ng)."""
    def make():
        from devtools.espeak import espeak

        encoder, out = SoundEncoder(), {}
        voices = {v: (v, s, p) for v, s, p in DEV_VOICES}
        for i, r in enumerate(rows):
            pcm = espeak(r["text"], *voices[r["voice"]], rate=16000).astype(np.float32) / 32768
            out.update({(r["text"], r["voice"], k): x for k, x in encoder.clip(pcm).items()})
            if i % 100 == 0:
                print(f"encoded {i}/{len(rows)}", file=sys.stderr, flush=True)
        return out

    return cached(SOUNDS, make)


def piper_features(phrases: list[str]) -> dict[tuple[str, str, str], np.ndarray]:
    """(phrase, speed, glance ms or "whole") -> pooled encoder states of the phrase spoken by the
    bundled Piper voice (deterministic, trimmed to its voiced span): a sound head a worker could
    fit at start, with no fitted numbers shipped."""
    def make():
        from core.audio import resample
        from core.cascade.tts import PiperTts

        encoder, tts, out = SoundEncoder(), PiperTts(), {}
        for i, phrase in enumerate(phrases):
            for speed in PIPER_SPEEDS:
                pcm = np.frombuffer(b"".join(tts.synthesize(phrase, speed, deterministic=True)), "<i2")
                pcm = resample(pcm.astype(np.float32) / 32768, 24000, 16000)
                loud = np.flatnonzero(np.abs(pcm) > 0.02 * np.abs(pcm).max())
                pcm = pcm[loud[0]: loud[-1] + 1]
                out.update({(phrase, str(speed), k): x for k, x in encoder.clip(pcm).items()})
            if i % 50 == 0:
                print(f"piper {i}/{len(phrases)}", file=sys.stderr, flush=True)
        return out

    return cached(PIPER_SOUNDS, make)


def judge(r: dict, p_words, p_sound, weight: float) -> str:
    """The shipped Overlap judge over a clip, its words' chance joined with the sound's."""
    def chance(words: str, at: str) -> float | None:
        if not ov.words_of(words) or ov.says_stop(words):
            return None
        return join_log_odds(p_words(words), p_sound(at), weight)

    o = ov.Overlap("item", 0, None, 0.0)
    for ms in GLANCES_MS:
        if ms >= r["ms"]:
            break
        words = _look(r, ms)
        if o.glanced(words, ms, chance(words, str(ms))) is not None:
            return o.verdict
    if r["ms"] >= ov.LONGEST_BACKCHANNEL_MS:
        return "interruption"
    return o.ended(r["whole"], r["ms"], chance(r["whole"], "whole"))


def main() -> None:
    rows = glances() + more_rows()
    sounds = sound_features(rows)
    words_x = WordsFeatures()
    ex, _ = examples(rows)
    base = {v: v.split("+")[0] for v, _, _ in DEV_VOICES}

    def fold_of(r_voice: str, phrase: str, by_base: bool) -> tuple:
        return (group_of(phrase), base[r_voice]) if by_base else (group_of(phrase), r_voice)

    if "--piper" in sys.argv:
        piper(rows, sounds, words_x, ex)
        words_x.keep()
        return
    sound_l2 = float(next((a.split("=")[1] for a in sys.argv if a.startswith("--l2=")), L2))
    for by_base in (False, True):
        folds = sorted({fold_of(r["voice"], r["text"], by_base) for r in rows})

        def left_out(f, voice, phrase, by_base=by_base):
            if by_base:
                return group_of(phrase) == f[0] or (voice is not None and base[voice] == f[1])
            return group_of(phrase) == f[0] or voice == f[1]

        word_heads = fit_heads(ex, words_x, folds, left_out)
        sound_heads = {}
        for f in folds:  # every glance and whole clip of the clips left in, labelled by kind
            sx, sy = [], []
            for r in rows:
                if left_out(f, r["voice"], r["text"]) or ov.says_stop(r["text"]):
                    continue
                for k in [*(str(ms) for ms in GLANCES_MS), "whole"]:
                    if (r["text"], r["voice"], k) in sounds:
                        sx.append(sounds[r["text"], r["voice"], k])
                        sy.append(float(r["kind"] in TAKES_THE_FLOOR))
            sound_heads[f] = fit_logistic(np.stack(sx), np.array(sy), sound_l2)
        print(f"\nheld out by {'phrase group and base voice (en-us / en-gb)' if by_base else 'phrase group and voice'}:")
        table(rows, words_x, sounds,
              lambda r, by_base=by_base, wh=word_heads, sh=sound_heads: (wh[fold_of(r["voice"], r["text"], by_base)],
                                                                          sh[fold_of(r["voice"], r["text"], by_base)]))
    words_x.keep()


def table(rows, words_x, sounds, heads) -> None:
    """Backchannels taken and floor-takers missed by the sound's weight and the threshold, each
    clip judged by ``heads(row)``: its (words' head, sound head)."""
    print("| sound weight | threshold | backchannels taken | floor-takers missed |\n|---|---|---|---|")
    bcs = [r for r in rows if r["kind"] == "backchannel" and not ov.says_stop(r["text"])]
    floor = [r for r in rows if r["kind"] in TAKES_THE_FLOOR]
    for weight in (0.0, 0.25, 0.5, 0.75, 1.0):
        for threshold in (0.5, 0.6, 0.7):
            def verdict(r):
                wh, sh = heads(r)
                return judge(r, lambda w: probability(wh, words_x(w)),
                             lambda k: probability(sh, sounds[r["text"], r["voice"], k]), weight)
            with meaning_threshold(threshold):
                taken = sum(verdict(r) == "interruption" for r in bcs)
                missed = sum(verdict(r) != "interruption" for r in floor)
            print(f"| {weight:.2f} | {threshold:.1f} | {taken}/{len(bcs)} ({taken / len(bcs):.0%}) "
                  f"| {missed}/{len(floor)} ({missed / len(floor):.0%}) |", flush=True)


def piper(rows, sounds, words_x, ex) -> None:
    """The sound head fitted on the dev phrases as the bundled Piper voice says them, judged on the
    espeak-ng dev clips (no dev voice in its fit), each held out by phrase group; the words' head
    as in ``main`` (held out by phrase group and voice)."""
    labels = {t: y for t, y in written().items() if not ov.says_stop(t)}
    sp = piper_features(sorted(labels))
    word_heads = held_out_heads(ex, words_x, sorted({r["voice"] for r in rows}))
    sound_heads = {}
    for g in range(GROUPS):
        sx = [(x, labels[k[0]]) for k, x in sp.items() if group_of(k[0]) != g]
        sound_heads[g] = fit_logistic(np.stack([x for x, _ in sx]), np.array([y for _, y in sx], float))
    print("\nthe sound head fitted on Piper's speech of the dev phrases, held out by phrase group:")
    table(rows, words_x, sounds, lambda r: (word_heads[group_of(r["text"]), r["voice"]], sound_heads[group_of(r["text"])]))


if __name__ == "__main__":
    main()
