"""How the embedded model's voice defaults (``core/cascade/voice_prompt.py``) were chosen.

    python -m bench.answer_fit                    # every candidate on DEV (~1 min each on two cores)
    python -m bench.answer_fit --only voice-qa    # one candidate
    python -m bench.answer_fit --set eval --only default   # the chosen defaults, once, on EVAL

Each candidate is a system prompt and the decoding keywords for ``SmolLm.generate``; each DEV
question (``bench/sets/answers.py``) is asked alone (a fresh conversation under that system
prompt) and the reply scored: the share right (``score``), the share of at most 40 words
(``words``), and the mean words. Tune on DEV only; EVAL is the held-out set.

DEV (32 questions), greedy unless named, spoken cap on unless "old":

    candidate        right  <=40 words  mean words
    old                59%     53%        49.2     the old prompt, sampling 0.3, repetition penalty 1.15
    old-greedy         41%    100%        16.9     the old prompt under the new decoding
    issue              --                          not run (the issue prompt under the old sampling)
    issue-greedy       69%    100%         8.4     system line + three "Q:/A:" examples
    voice-qa           66%    100%         8.6     voice line + four "Q:/A:" examples ("A:" copied)
    voice-quoted       72%    100%        11.1     voice line + four quoted examples  <- chosen
    quoted-noguard     72%    100%        10.8     the same without the no-repeat-4-gram guard
    quoted-rp1.15      69%    100%        13.5     the same with repetition penalty 1.15
    quoted-t0.8        53%    100%        12.1     the same at session temperature 0.8 (samples at 0.5)
    quoted-more        66%    100%        10.8     six quoted examples
    quoted-wide        69%    100%        10.5     eight quoted examples, one per kind of question
    quoted-terse       59%    100%        12.4     a bare one-line instruction + the quoted examples
    quoted-direct      69%    100%        11.3     + "say the answer itself; do not explain how"
    helpful-quoted     69%    100%        10.0     "You are a helpful AI assistant." opening
    helpful-wide       66%    100%        10.5     that opening + eight examples
    voice-more         59%    100%         9.9     "User:/Assistant:" lines, seven examples
    chat-turns         59%    100%         7.0     the examples as chat turns inside the system text
    default            72%    100%        12.8     voice-quoted with the shipped settings (20-word sentence end)

Also tried and dropped: a penalty on tokens already seen twice in the question and the reply
("The day before Sunday is Sunday"): 66 % at 2 and at 4. The prompts plateau near 70 %: what
is left wrong is what the 4-bit 135M model does not know (7 times 4, the freezing point, the
day before Sunday), not the form of the answer.

EVAL (62 questions), the shipped defaults, run once after the choice: 74 % right, 100 % at most
40 words, 11.4 words on average.
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

# The example prompt from the issue: a system line and three short question/answer pairs.
ISSUE = (
    "You are a voice assistant. Answer in one short, correct sentence.\n\n"
    "Q: What is the capital of Spain?\nA: The capital of Spain is Madrid.\n"
    "Q: How many wheels does a bicycle have?\nA: A bicycle has two wheels.\n"
    "Q: What is 3 plus 4?\nA: 3 plus 4 is 7."
)

VOICE_QA = (
    "You are a friendly voice assistant. Your replies are read aloud, so answer every question with "
    "one short, correct sentence in plain words: no lists, no markdown, no emoji.\n\n"
    "Examples:\n"
    "Q: What is the capital of Spain?\nA: The capital of Spain is Madrid.\n"
    "Q: How many wheels does a bicycle have?\nA: A bicycle has two wheels.\n"
    "Q: What is 9 plus 6?\nA: 9 plus 6 is 15.\n"
    "Q: What do cows drink?\nA: Cows drink water."
)

# The examples as quoted speech, not "Q:"/"A:" lines (the model copied "A:" into its reply).
VOICE_QUOTED = (
    "You are a friendly voice assistant. Your replies are read aloud, so answer every question with "
    "one short, correct sentence in plain words: no lists, no markdown, no emoji.\n\n"
    "For example:\n"
    "Asked \"What is the capital of Spain?\", you say: \"The capital of Spain is Madrid.\"\n"
    "Asked \"How many wheels does a bicycle have?\", you say: \"A bicycle has two wheels.\"\n"
    "Asked \"What is 9 plus 6?\", you say: \"9 plus 6 is 15.\"\n"
    "Asked \"What do cows drink?\", you say: \"Cows drink water.\""
)

# The same quoted examples, six of them (each arithmetic operation, a name for a person's job).
QUOTED_MORE = VOICE_QUOTED + (
    "\nAsked \"What is 6 times 3?\", you say: \"6 times 3 is 18.\"\n"
    "Asked \"What do you call someone who fixes teeth?\", you say: \"Someone who fixes teeth is a dentist.\""
)

# A bare system line and the quoted examples.
QUOTED_TERSE = (
    "You are a voice assistant. Answer with one short, correct sentence.\n\n"
    + VOICE_QUOTED.split("\n\n", 1)[1]
)

# The quoted examples after a line against working a sum out loud ("To solve this problem, ...").
QUOTED_DIRECT = (
    "You are a friendly voice assistant. Your replies are read aloud, so answer every question with "
    "one short, correct sentence in plain words: no lists, no markdown, no emoji. Say the answer "
    "itself straight away; do not explain how to work it out.\n\n"
    + VOICE_QUOTED.split("\n\n", 1)[1]
)

# The examples as chat turns written into the system text (the template's own markers).
CHAT_TURNS = (
    VOICE_QUOTED.split("\n\n", 1)[0] + "<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of Spain?<|im_end|>\n"
    "<|im_start|>assistant\nThe capital of Spain is Madrid.<|im_end|>\n"
    "<|im_start|>user\nHow many wheels does a bicycle have?<|im_end|>\n"
    "<|im_start|>assistant\nA bicycle has two wheels.<|im_end|>\n"
    "<|im_start|>user\nWhat is 9 plus 6?<|im_end|>\n"
    "<|im_start|>assistant\n9 plus 6 is 15.<|im_end|>\n"
    "<|im_start|>user\nWhat do cows drink?<|im_end|>\n"
    "<|im_start|>assistant\nCows drink water."
)

# The model's own training-time opening ("a helpful AI assistant"), unnamed, before the voice line.
HELPFUL_QUOTED = "You are a helpful AI assistant. " + VOICE_QUOTED.removeprefix("You are a friendly voice assistant. ")

# Eight quoted examples, one per kind of everyday question.
_WIDE = (
    ("What is the capital of Spain?", "The capital of Spain is Madrid."),
    ("How many wheels does a bicycle have?", "A bicycle has two wheels."),
    ("What is 9 plus 6?", "9 plus 6 is 15."),
    ("What is 10 minus 4?", "10 minus 4 is 6."),
    ("What colour is the sky on a clear day?", "The sky is blue on a clear day."),
    ("What day comes after Monday?", "Tuesday comes after Monday."),
    ("What do you call a person who fixes cars?", "A person who fixes cars is a mechanic."),
    ("What do cows drink?", "Cows drink water."),
)
QUOTED_WIDE = VOICE_QUOTED.split("\n\n", 1)[0] + "\n\nFor example:\n" + "\n".join(
    f'Asked "{q}", you say: "{a}"' for q, a in _WIDE)
HELPFUL_WIDE = "You are a helpful AI assistant. " + QUOTED_WIDE.removeprefix("You are a friendly voice assistant. ")

# More and more varied examples (arithmetic with each operation, a word meaning, a name for a thing).
VOICE_MORE = (
    "You are a helpful voice assistant. Your answers are spoken aloud, so reply with one short, "
    "correct sentence and no lists or markdown. Think of the right fact and state it plainly.\n\n"
    "Examples:\n"
    "User: What is the capital of Spain?\nAssistant: The capital of Spain is Madrid.\n"
    "User: How many wheels does a bicycle have?\nAssistant: A bicycle has two wheels.\n"
    "User: What is 9 plus 6?\nAssistant: 9 plus 6 is 15.\n"
    "User: What is 6 times 3?\nAssistant: 6 times 3 is 18.\n"
    "User: What is the opposite of hot?\nAssistant: The opposite of hot is cold.\n"
    "User: What animal says moo?\nAssistant: A cow says moo.\n"
    "User: What do you call someone who fixes teeth?\nAssistant: Someone who fixes teeth is a dentist."
)

# The old prompt's settings: sampling at the session default with a repetition penalty.
OLD_DECODING: dict[str, Any] = {"temperature": 0.3, "top_p": 0.9, "repetition_penalty": 1.15, "no_repeat_ngram": 0,
                                "max_tokens": 160}

CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    "old": (OLD, OLD_DECODING),
    "old-greedy": (OLD, generation_settings(0.3, 160)),
    "issue": (ISSUE, OLD_DECODING),
    "issue-greedy": (ISSUE, generation_settings(0.3, 160)),
    "voice-qa": (VOICE_QA, generation_settings(0.3, 160)),
    "voice-quoted": (VOICE_QUOTED, generation_settings(0.3, 160)),
    "voice-more": (VOICE_MORE, generation_settings(0.3, 160)),
    "quoted-more": (QUOTED_MORE, generation_settings(0.3, 160)),
    "quoted-terse": (QUOTED_TERSE, generation_settings(0.3, 160)),
    "helpful-quoted": (HELPFUL_QUOTED, generation_settings(0.3, 160)),
    "quoted-wide": (QUOTED_WIDE, generation_settings(0.3, 160)),
    "helpful-wide": (HELPFUL_WIDE, generation_settings(0.3, 160)),
    "quoted-direct": (QUOTED_DIRECT, generation_settings(0.3, 160)),
    "chat-turns": (CHAT_TURNS, generation_settings(0.3, 160)),
    "quoted-noguard": (VOICE_QUOTED, {**generation_settings(0.3, 160), "no_repeat_ngram": 0}),
    "quoted-t0.8": (VOICE_QUOTED, generation_settings(0.8, 160)),
    "quoted-rp1.15": (VOICE_QUOTED, {**generation_settings(0.3, 160), "repetition_penalty": 1.15}),
    "default": (DEFAULT_INSTRUCTIONS, generation_settings(0.3, 160)),
    "default-t0.8": (DEFAULT_INSTRUCTIONS, generation_settings(0.8, 160)),
}


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

    items = DEV if args.set == "dev" else EVAL
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
