"""How the embedded model's voice defaults (``core/cascade/voice_prompt.py``) were chosen.

    python -m bench.fit.answer_fit                    # every candidate on DEV (~1 min each on two cores)
    python -m bench.fit.answer_fit --only pool-4      # one candidate
    python -m bench.fit.answer_fit --set eval --only default   # the chosen defaults, once, on EVAL

Each candidate is a system prompt and the decoding keywords for ``SmolLm.generate``; each scored
question is asked alone (a fresh conversation under that system prompt) and the reply scored: the
share right (``score``), the share of at most 40 words (``words``), and the mean words. Few-shot
examples come only from ``POOL``, eight DEV questions that are never scored; the other 25 DEV
questions (``bench/sets/answers.py``) score every candidate. EVAL is the held-out set.

Second pass (issue 30): the first pass's prompts quoted two EVAL questions as examples (a
capital city and a vehicle's parts), so their examples were re-chosen from the DEV pool;
the template (voice line, quoted speech, greedy decoding, no-repeat-4-gram guard) is the first
pass's choice. DEV less the pool (25 questions), greedy, one run each (deterministic):

    candidate        right  <=40 words  mean words
    default (before)   72%    100%        13.8     the first pass's prompt (two EVAL examples), for reference
    voice-only         60%    100%         9.6     the voice line, no examples
    pool-2             72%    100%        10.8     a capital and a sum  <- chosen (tie; the shortest answers)
    pool-4             72%    100%        11.5     + a count of legs, a colour
    pool-4b            68%    100%        12.2     a capital, legs, a product, a job name
    pool-6             72%    100%        12.6     pool-4 + an opposite, a month
    pool-8             64%    100%        12.4     the whole pool

First pass (32 DEV questions; prompts since withdrawn): the old prompt 59 % (sampling at 0.3,
repetition penalty 1.15; 41 % greedy), "Q:/A:" examples 66-69 % (the model copied "A:"), four
quoted examples 72 %, six or eight 66-69 %, a bare instruction 59 %, chat turns in the system
text 59 %; sampling at 0.5 53 %; a repetition penalty 69 %; a penalty on tokens seen twice 66 %.
The prompts plateau near 70 %: what is left wrong is what the 4-bit 135M model does not know
(7 times 4, the freezing point, the day before Sunday), not the form of the answer.

EVAL (62 questions) is reported by ``python -m bench answers`` (docs/benchmarks.md, "Answers").
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

from bench.sets.answers import DEV, EVAL, SHORT_WORDS, Question, score, words
from core.cascade.voice_prompt import DEFAULT_INSTRUCTIONS, generation_settings

OLD = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

VOICE_LINE = (
    "You are a friendly voice assistant. Your replies are read aloud, so answer every question with "
    "one short, correct sentence in plain words: no lists, no markdown, no emoji."
)

# The few-shot examples come from this pool of DEV questions only, with answers written as the
# reply should sound; the pool's questions are never scored, so every candidate is scored on the
# same remaining DEV questions and no candidate scores its own examples.
POOL: dict[str, str] = {
    "What is the capital of Portugal?": "The capital of Portugal is Lisbon.",
    "How many legs does a bird have?": "A bird has two legs.",
    "What is 8 plus 5?": "8 plus 5 is 13.",
    "What colour is coal?": "Coal is black.",
    "What is the opposite of wet?": "The opposite of wet is dry.",
    "What is the last month of the year?": "The last month of the year is December.",
    "What do you call a person who flies a plane?": "A person who flies a plane is a pilot.",
    "What is 7 times 4?": "7 times 4 is 28.",
}


def quoted(*questions: str, opening: str = VOICE_LINE) -> str:
    """The voice line and quoted examples ("Asked "...", you say: "...""): with "Q:"/"A:" lines
    the model began its own reply with "A:" (the first pass)."""
    return opening + "\n\nFor example:\n" + "\n".join(f'Asked "{q}", you say: "{POOL[q]}"' for q in questions)


_CAPITAL, _LEGS, _PLUS, _COAL, _WET, _MONTH, _PILOT, _TIMES = POOL

# The old prompt's settings: sampling at the session default with a repetition penalty.
OLD_DECODING: dict[str, Any] = {"temperature": 0.3, "top_p": 0.9, "repetition_penalty": 1.15, "no_repeat_ngram": 0,
                                "max_tokens": 160}
VOICE = generation_settings(0.3, 160)  # greedy, the no-repeat-4-gram guard, the spoken caps

CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    "old": (OLD, OLD_DECODING),
    "old-greedy": (OLD, VOICE),
    "voice-only": (VOICE_LINE, VOICE),
    "pool-2": (quoted(_CAPITAL, _PLUS), VOICE),
    "pool-4": (quoted(_CAPITAL, _LEGS, _PLUS, _COAL), VOICE),
    "pool-4b": (quoted(_CAPITAL, _LEGS, _TIMES, _PILOT), VOICE),
    "pool-6": (quoted(_CAPITAL, _LEGS, _PLUS, _COAL, _WET, _MONTH), VOICE),
    "pool-8": (quoted(*POOL), VOICE),
    "pool-4-helpful": (quoted(_CAPITAL, _LEGS, _PLUS, _COAL, opening="You are a helpful AI assistant. "
                              + VOICE_LINE.removeprefix("You are a friendly voice assistant. ")), VOICE),
    "default": (DEFAULT_INSTRUCTIONS, VOICE),
    "default-t0.8": (DEFAULT_INSTRUCTIONS, generation_settings(0.8, 160)),
}


def scored(which: str) -> list[Question]:
    """DEV less the example pool, or EVAL."""
    return [x for x in DEV if x.text not in POOL] if which == "dev" else list(EVAL)


def run(lm, system: str, settings: dict[str, Any], items: list[Question], show: bool = False) -> dict[str, Any]:
    from core.cascade.llm import KvState

    right = short = total_words = 0
    t0 = time.perf_counter()
    for item in items:
        pieces: list[str] = []
        messages = [{"role": "system", "content": system}, {"role": "user", "content": item.text}]
        lm.generate(messages, KvState(), pieces.append, threading.Event(), **settings)
        answer = "".join(pieces).strip()
        ok, n = score(answer, item), words(answer)
        right += ok
        short += n <= SHORT_WORDS
        total_words += n
        if show:
            print(f"  {'ok ' if ok else 'BAD'} {n:3d}w  {item.text}  ->  {answer!r}", flush=True)
    k = len(items)
    return {"right": right / k, "short": short / k, "mean_words": total_words / k, "n": k,
            "s_per_answer": (time.perf_counter() - t0) / k}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("dev", "eval"), default="dev")
    ap.add_argument("--only", nargs="*", help="candidate names (default: all)")
    ap.add_argument("--show", action="store_true", help="print every answer")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from core.cascade.llm import SmolLm

    items = scored(args.set)
    names = args.only or list(CANDIDATES)
    lm = SmolLm(Path("data"), None, threads=args.threads)
    print(f"{args.set.upper()}: {len(items)} questions")
    for name in names:
        system, settings = CANDIDATES[name]
        r = run(lm, system, settings, items, args.show)
        print(f"{name:16s} right {r['right']:.0%}  <= {SHORT_WORDS} words {r['short']:.0%}  "
              f"mean {r['mean_words']:.1f} words  ({r['s_per_answer']:.2f} s/answer)", flush=True)


if __name__ == "__main__":
    main()
