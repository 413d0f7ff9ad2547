"""The numbers behind ``tests/unit/test_semantic_vad.py``'s end-of-turn cases, measured on dev phrases.

    python -m bench.fit.turn_cases        # ~1 min: speak, transcribe, score, print

Each case is a development phrase (``bench/sets/turns.py`` ``DEV_COMPLETE`` / ``DEV_OPEN``, or
``bench/sets/duplex.py`` ``DEV_COMPLETE`` / ``DEV_PAUSED``), spoken by espeak-ng with the voice
``bench.fit.turn_fit`` speaks it with, transcribed by the cascade's Whisper as at a pause and scored
by SmolLM2 exactly as the fit hears it (``turn_fit.hear``), so a test case is one of the fit's own
rows. Printed per case: what it stands for, the heard text, Whisper's confidence in the last word,
``MessageEnd(after_words, before_last_word)``, and the score and wait (eagerness auto) under the
weights in ``core/conversation/end_of_turn.py``.
"""

from __future__ import annotations

from bench.fit.turn_fit import hear, models, turn_set_voice
from bench.sets.duplex import DEV_COMPLETE as DUPLEX_COMPLETE, DEV_PAUSED, DEV_VOICES
from bench.sets.turns import DEV_COMPLETE, DEV_OPEN


def turn_set(text: str) -> tuple[str, tuple[str, int, int]]:
    """A turn-set dev phrase and the voice the fit speaks it with."""
    label = 1 if text in DEV_COMPLETE else 0
    return text, turn_set_voice(label, (DEV_COMPLETE if label else DEV_OPEN).index(text))


def duplex(text: str, voice: int, whole: bool = False) -> tuple[str, tuple[str, int, int]]:
    """A full-duplex dev phrase (a complete request, or a paused item's opening; ``whole``: the
    opening and its rest as one piece) by the ``voice``-th dev voice, as the fit speaks it."""
    item = next((item for item in DEV_PAUSED if item[0] == text), None)
    assert item is not None or text in DUPLEX_COMPLETE, text
    return (f"{item[0]} {item[2]}" if whole else text), DEV_VOICES[voice]


# (what the case stands for in the test, (phrase, voice))
CASES: list[tuple[str, tuple[str, tuple[str, int, int]]]] = [
    ("complete, heard as said: answered at once", turn_set("Where is the nearest train station?")),
    ("complete, heard as said: answered at once", turn_set("Read me the news.")),
    ("complete, heard as said: answered at once", turn_set("What year did the war end?")),
    ("complete, heard as said: answered at once", turn_set("Call my brother.")),
    ("complete, heard as said: answered at once", duplex("Please add apples to my shopping list.", 1)),
    ("complete, its last word heard fairly: answered soon", turn_set("How many continents are there?")),
    ("complete, its last word heard fairly: answered soon", turn_set("Can you help me with my homework?")),
    ("complete, the LM doubts it: answered within a second", turn_set("Thanks, that's all.")),
    ("complete, the LM doubts it: answered within a second", turn_set("Can you recommend a good book?")),
    ("complete, one short word in doubt: the neutral wait", turn_set("Good night.")),
    ("open: waits past a long pause", turn_set("What is the population of")),
    ("open: waits past a long pause", turn_set("Let me think, uh,")),
    ("open: waits past a long pause", turn_set("How much does it cost to")),
    ("open: waits past a long pause", turn_set("What happens when you")),
    ("open: waits past a long pause", turn_set("Do you think that")),
    ("open, Whisper closed it with a full stop: waits past a long pause", turn_set("I would really like to visit")),
    ("open, the words before the doubtful last one look finished", turn_set("Put the kettle on and")),
    ("open, Whisper guessed a last word, fairly sure of it", duplex("Please set an alarm for", 2)),
    ("open, Whisper guessed a last word after the voice ended", duplex("Please set an alarm for", 0)),
    ("... and the whole item after the pause", duplex("Please set an alarm for", 0, whole=True)),
    ("open, a paused item's opening", duplex("How many people live in", 1)),
    ("... and the whole item after the pause", duplex("How many people live in", 1, whole=True)),
    ("open: high eagerness bounds the wait", turn_set("Is there a way to")),
    ("open: server_vad ignores the score", turn_set("Send a message to my")),
]


def main() -> None:
    from core.conversation.end_of_turn import end_of_turn_probability, wait_ms

    scorer, asr = models()
    for stands_for, (text, voice) in CASES:
        said, lm = hear(scorer, asr, text, voice)
        p = end_of_turn_probability(said, lm)
        end = "None" if lm is None else f"MessageEnd({lm.after_words:.3g}, {lm.before_last_word and f'{lm.before_last_word:.3g}'})"
        score = "no words" if p is None else f"p={p:.3f}"
        print(f"{stands_for}\n  said {text!r} by {voice}\n  heard {str(said)!r} last word "
              f"{said.last_word_confidence:.2f} {end}  {score} wait {wait_ms(p, 'auto')} ms")


if __name__ == "__main__":
    main()
