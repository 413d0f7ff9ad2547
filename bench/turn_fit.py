"""How the semantic_vad weights in ``core/conversation/end_of_turn.py`` were chosen.

    python -m bench.turn_fit          # ~2 min: speak, transcribe, score, grid-search, print

A development set apart from the benchmark's (``bench/turn_set.py``; no phrase in common): 30
complete requests and 30 phrases cut off mid-sentence, spoken by the same espeak-ng voices and
transcribed by the cascade's Whisper as at a pause (0.3 s of silence after the words). Each gets
SmolLM2's end-of-message probability; a grid search over the cue weights and the wait curve
then minimises the complete turns' extra wait (beyond ~350 ms, when the score arrives anyway)
plus 2 s per share of cut-off phrases answered within a 1 s pause, at eagerness auto.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

DEV_COMPLETE = [
    "Where is the nearest train station?", "What is two plus two?", "Tell me a joke.", "Thanks, that's all.",
    "How old is the universe?", "Play some relaxing music.", "What does a cat eat?", "Is it going to rain tomorrow?",
    "Turn off the lights in the kitchen.", "How do airplanes fly?", "What's the weather like in Paris?",
    "Can you spell the word necessary?", "Who invented the telephone?", "I need a recipe for pancakes.",
    "Translate good morning into Spanish.", "How many continents are there?", "What year did the war end?",
    "Is coffee bad for you?", "Read me the news.", "Where do penguins live?", "What is the speed of light?",
    "Call my brother.", "How tall is the Eiffel tower?", "What should I cook tonight?", "Open the garage door.",
    "Why do leaves change colour?", "Can you help me with my homework?", "What is a black hole?",
    "Hello, how are you?", "Good night.",
]
DEV_OPEN = [
    "I would really like to visit", "Could you tell me the name of the", "My brother and", "What is the best",
    "I was thinking about going to", "Can you remind me to", "The problem is that", "Please add eggs and",
    "Do you think that", "How much does it cost to", "I'm looking for a restaurant that", "Tell me more about",
    "So, um,", "What happens when you", "I need to know whether", "Could you find me a", "Where can I buy",
    "Yesterday I went to the", "Is there a way to", "I forgot to", "What is the population of", "Let me think, uh,",
    "Can you play a song by", "How long should I", "My favourite colour is", "Show me pictures of",
    "I'd like to order a", "Who is the president of", "Give me directions to the", "It depends on whether",
]


def heard() -> list[tuple[str, int, float | None]]:
    """(transcript, 1 complete / 0 open, LM end-of-message probability) per dev phrase."""
    from pathlib import Path

    from bench.turn_set import VOICES, _espeak, items
    from core.audio import resample
    from core.cascade.asr import WhisperAsr
    from core.cascade.llm import SmolLm
    from core.cascade.turn_scorer import EndOfMessageScorer

    overlap = (set(DEV_COMPLETE) | set(DEV_OPEN)) & {t for it in items() for t in it.parts}
    assert not overlap, f"dev phrases in the benchmark's set: {overlap}"
    lm = SmolLm(Path("data"))
    scorer, asr = EndOfMessageScorer(lm), WhisperAsr()
    out = []
    for k, (texts, label) in enumerate(((DEV_COMPLETE, 1), (DEV_OPEN, 0))):
        for i, text in enumerate(texts):
            voice, speed, pitch = VOICES[(i + k) % len(VOICES)]
            audio = resample(_espeak(text, voice, speed, pitch).astype(np.float32) / 32768, 24000, 16000)
            pad = np.zeros(4800, np.float32)
            said = asr.transcribe(np.concatenate([pad, audio, pad])).text.strip()
            out.append((said, label, scorer.probability(said) if said else None))
    return out


def fit(rows: list[tuple[str, int, float | None]]) -> list[tuple[float, float, float, tuple]]:
    """Every grid point as (cost, mean extra wait of complete turns ms, cut-in share, weights)."""
    from core.conversation.end_of_turn import OPEN_ENDINGS, last_word

    feats = [(math.log10(max(lm or 1e-7, 1e-7)), last_word(t) in OPEN_ENDINGS, t.endswith("?"),
              t.endswith(("...", "…", ",", "-")), label) for t, label, lm in rows]
    results = []
    for center, slope, question, open_word, trailing, exponent in itertools.product(
            [-4, -3.5, -3, -2.7, -2.5, -2, -1.5], [1, 1.5, 2, 2.5], [0, 0.5, 1, 1.5], [-2, -3, -4],
            [-1, -2, -3], [1.5, 2, 3]):
        extra, cut = [], []
        for log_lm, is_open, is_question, trails, label in feats:
            z = (log_lm - center) * slope + open_word * is_open + question * is_question + trailing * trails
            wait = 4000 * (1 - 1 / (1 + math.exp(-max(min(z, 30), -30)))) ** exponent
            (extra if label else cut).append(max(0.0, wait - 350) if label else wait < 1000)
        results.append((float(np.mean(extra) + 2000 * np.mean(cut)), float(np.mean(extra)), float(np.mean(cut)),
                        (center, slope, question, open_word, trailing, exponent)))
    return sorted(results)


def main() -> None:
    rows = heard()
    for said, label, lm in rows:
        print(f"{'complete' if label else 'open    '} lm={lm if lm is None else f'{lm:.2e}'} {said!r}")
    print("\ncost, complete extra wait ms, cut-in share, (LM_CENTER, LM_SLOPE, '?', OPEN_WORD, TRAILING_OFF, exponent)")
    for cost, extra, cut, weights in fit(rows)[:5]:
        print(f"{cost:7.1f} {extra:6.1f} {cut:5.2f} {weights}")


if __name__ == "__main__":
    main()
