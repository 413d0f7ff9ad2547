"""How a reply's cut into speech pieces changes what a listener hears: each way of cutting one
reply is synthesised as the worker does (Piper, sampled, piece by piece, concatenated) several times
and transcribed as ``/v1/audio/transcriptions`` does (Whisper). Used to choose the chunker's hurry
rule (``core/cascade/chunker.py``): a sentence's last word spoken alone is misheard.

    python -m bench.fit.spoken_pieces                      # the reply of tests/e2e/webrtc/test_calls.py
    python -m bench.fit.spoken_pieces --times 20 --word paris "The capital|of France is|Paris." "The capital|of France is Paris."
"""

from __future__ import annotations

import argparse
import re

DEFAULT_CUTS = ("The capital|of France is|Paris.", "The capital|of France is Paris.")


def heard(cuts: list[str], word: str, times: int) -> list[tuple[str, int, list[str]]]:
    """Per cut (pieces split by ``|``): how many of ``times`` syntheses were heard with ``word``, and the misses."""
    from core.audio import pcm16_to_float, resample
    from core.cascade.asr import WhisperAsr
    from core.cascade.tts import PiperTts

    asr, tts = WhisperAsr(), PiperTts()
    out = []
    for cut in cuts:
        pieces = [p.strip() for p in cut.split("|")]
        texts = []
        for _ in range(times):
            pcm = b"".join(b"".join(tts.synthesize(p)) for p in pieces)
            samples = resample(pcm16_to_float(pcm, 24000), 24000, 16000)
            texts.append(" ".join(s.text for s in asr.transcribe_timed(samples, "en", None, 0.0, None)).strip())
        hits = sum(word in re.findall(r"[a-z]+", t.lower()) for t in texts)
        out.append((cut, hits, [t for t in texts if word not in re.findall(r"[a-z]+", t.lower())]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fit.spoken_pieces", description=__doc__.splitlines()[0])
    parser.add_argument("cuts", nargs="*", default=list(DEFAULT_CUTS), help="a reply's pieces, split by |")
    parser.add_argument("--word", default="paris", help="the content word a listener must hear")
    parser.add_argument("--times", type=int, default=12, help="syntheses per cut (Piper samples its noise)")
    args = parser.parse_args()
    for cut, hits, misses in heard(args.cuts, args.word.lower(), args.times):
        print(f"{cut!r}: {hits}/{args.times} heard {args.word!r}; misses: {misses}")


if __name__ == "__main__":
    main()
