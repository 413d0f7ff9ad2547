"""The end-of-turn cases measured on dev phrases, and the checks on them that depend on the
semantic_vad weights: ``tests/unit/test_semantic_vad.py`` asserts them, and ``bench.fit.turn_fit``
keeps only the weights that pass them all (``SCORE_CHECKS``), so the two cannot drift apart.

The numbers are ``python -m bench.fit.turn_cases``'s. No case comes from an eval item (issue 44).
"""

from __future__ import annotations

from core.conversation.end_of_turn import HeardText, MessageEnd, end_of_turn_probability, wait_ms

# Every case with a language-model score is a dev phrase (bench/sets/turns.py DEV_COMPLETE / DEV_OPEN,
# bench/sets/duplex.py DEV_COMPLETE / DEV_PAUSED) spoken by the voice the weights' fit speaks it
# with, as Whisper heard it, with Whisper's confidence in the last word and SmolLM2's
# MessageEnd(after the words, after all but the last word), all measured by
# ``python -m bench.fit.turn_cases`` (espeak-ng, the cascade's Whisper and SmolLM2; one of the fit's
# own rows each; measured with the recogniser as of commit 382461f: rerun it when Whisper's input
# changes). ``bench.fit.turn_fit`` keeps only the weights that pass SCORE_CHECKS (the end of this
# module). No case comes from an eval item (issue 44: the cases these replace were).

# complete, heard as said with a confident last word
CONFIDENT = [
    (HeardText("Where is the nearest train station?", 1.0), MessageEnd(0.0502, 2.58e-4)),
    (HeardText("Read me the news.", 0.99), MessageEnd(0.175, 3.65e-4)),
    (HeardText("What year did the war end?", 1.0), MessageEnd(0.646, 1.26e-4)),
    (HeardText("Call my brother", 0.98), MessageEnd(0.101, 5.36e-5)),
    (HeardText("Please add apples to my shopping list.", 1.0), MessageEnd(0.757, 3.11e-3)),  # a duplex dev voice
]
# complete, heard as said, the last word heard fairly (Whisper's token probabilities run low on
# words it did hear)
FAIRLY_HEARD = [
    (HeardText("How many continents are there?", 0.77), MessageEnd(0.53, 7.99e-6)),
    (HeardText("Can you help me with my homework?", 0.68), MessageEnd(0.853, 3.36e-5)),
]
# complete, but SmolLM2 would rather go on ("Can you recommend a good book?" heard as "... a notebook?")
DOUBTED = [
    (HeardText("Thanks, that's all!", 0.98), MessageEnd(3.48e-3, 3.99e-4)),
    (HeardText("Can you recommend a notebook?", 0.79), MessageEnd(5.19e-3, 1.44e-5)),
]
# cut off mid-sentence, as Whisper heard them (its "?", "..." and "." are guesses)
OPEN = [
    (HeardText("What is the population of?", 0.98), MessageEnd(6.17e-5, 3.18e-4)),
    (HeardText("Let me think, uh...", 0.78), MessageEnd(0.174, 0.0701)),
    (HeardText("How much does it cost to?", 0.73), MessageEnd(4.75e-4, 1.25e-3)),
    (HeardText("What happens when you?", 0.65), MessageEnd(2.08e-5, 9.23e-5)),
    (HeardText("Do you think that?", 0.92), MessageEnd(1.63e-4, 4.42e-5)),
    (HeardText("I would really like to visit.", 0.99), MessageEnd(5.03e-4, 1.18e-4)),  # closed with a full stop
]
# "Please set an alarm for" (a duplex dev item's opening, before its pause) heard as "... for it.":
# one dev voice's "it" began after the voice had ended (confidence 0), another's at 0.64
ALARM = "Please set an alarm for it."
ALARM_LM = MessageEnd(0.287, 4.26e-5)
# "Good night." heard as one word, in doubt; SmolLM2 cannot score the words before it (there are none)
GOODNIGHT = (HeardText("Goodnight", 0.23), MessageEnd(0.335))
# "Put the kettle on and" heard with "and" in doubt; "Put the kettle on" reads as finished
KETTLE = (HeardText("Put the kettle on and...", 0.45), MessageEnd(1.54e-3, 0.473))


def complete_answered_sooner(heard, lm) -> None:
    """A complete turn is answered sooner than server_vad's 500 ms of silence."""
    assert wait_ms(end_of_turn_probability(heard, lm), "auto") < 450


def doubted_answered_within_a_second(heard, lm) -> None:
    """SmolLM2 gives "Thanks, that's all!" an end-of-message probability of 0.0035: such a turn
    may wait longer than server_vad's 500 ms (a flatter LM slope that answers it at once answers
    more cut-off phrases too: the fit's cost weighs both), but never a second."""
    assert wait_ms(end_of_turn_probability(heard, lm), "auto") < 1000


def open_waits_past_a_long_pause(heard, lm) -> None:
    """A 1.5 s pause mid-sentence is not cut into; eagerness bounds the wait."""
    p = end_of_turn_probability(heard, lm)
    assert wait_ms(p, "auto") > 1500
    assert wait_ms(p, "high") <= 2000 and wait_ms(p, "low") <= 8000


def words_count_without_a_language_model() -> None:
    assert wait_ms(end_of_turn_probability("Tell me more about"), "auto") > 1500
    assert wait_ms(end_of_turn_probability("What is the date today?"), "auto") < 450


def guessed_ending_waits_like_the_words_before_it() -> None:
    """At the pause after "Please set an alarm for", Whisper heard "... for it.": the turn waits
    past the pause instead of answering a request never made, by how much Whisper doubts "it"."""
    assert wait_ms(end_of_turn_probability(HeardText(ALARM, 0.99), ALARM_LM), "auto") < 100  # said: at once
    assert wait_ms(end_of_turn_probability(HeardText(ALARM, 0.64), ALARM_LM), "auto") > 450  # past the score
    assert wait_ms(end_of_turn_probability(HeardText(ALARM, 0.0), ALARM_LM), "auto") > 1500  # the words before it


def one_doubtful_word_reads_like_no_words() -> None:
    assert 150 < wait_ms(end_of_turn_probability(*GOODNIGHT), "auto") < 600  # the neutral wait


# Each check with its cases: the fit runs them all under every weight set it tries.
SCORE_CHECKS = (
    (complete_answered_sooner, CONFIDENT + FAIRLY_HEARD),
    (doubted_answered_within_a_second, DOUBTED),
    (open_waits_past_a_long_pause, OPEN),
    (words_count_without_a_language_model, [()]),
    (guessed_ending_waits_like_the_words_before_it, [()]),
    (one_doubtful_word_reads_like_no_words, [()]),
)
