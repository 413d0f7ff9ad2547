"""Reading words by meaning (``core/cascade/words_meaning.py``), on the real model: phrasings it
was not fitted on are read for what they mean (issue 47: "judge by meaning, not by a list of
mishearings"), the overlap judge follows the reading, and a request reads as more complete than
its own opening (semantic_vad joins that with its score).

The phrases below were written for this test: none is a dev example the reader is fitted on (the
test checks) and none an eval item (``test_eval_leaks``).
"""

from __future__ import annotations

import pytest

from core.cascade.overlap_examples import BACKCHANNELS, INTERRUPTIONS
from core.cascade.turn_examples import COMPLETE, OPEN
from core.cascade.words_meaning import OVERLAP, TURN, MeaningHead, WordsReader, overlap_head, turn_head
from core.conversation.overlap import MEANING_THRESHOLD, Overlap, words_of
from tests.support.stack import ROOT

# "Exactly.", "Great.", "Totally.", "Definitely." and "Brilliant." became fitted examples with
# bench/sets/overlap_phrasings.py; these five, written then, took their places.
ACKNOWLEDGEMENTS = ["That's right.", "Good stuff.", "Good idea.", "Righto.", "Sure thing.", "Oh nice.", "Very nice.",
                    "Ah, okay then.", "Right on.", "Okay, got you."]
REQUESTS = ["What do you mean by that?", "Can you skip ahead?", "Tell me about the moon instead.",
            "Go back a bit.", "I don't like this story.", "Let's talk about cars.", "Could you speak slower?",
            "Say that again?", "How old is the dragon?"]


@pytest.fixture(scope="module")
def meaning() -> MeaningHead:
    from core.cascade.llm import converted_model

    model = converted_model(ROOT / "data")  # converted here in a fresh clone whose cascade never started
    return overlap_head(WordsReader(model), model.parent)  # the head cached beside the model


def test_the_phrases_are_not_examples_it_was_fitted_on():
    fitted = {" ".join(words_of(t)) for t, _ in (*BACKCHANNELS, *INTERRUPTIONS)}
    assert not [p for p in ACKNOWLEDGEMENTS + REQUESTS if " ".join(words_of(p)) in fitted]


def test_unseen_acknowledgements_read_as_backchannels(meaning):
    read = {p: meaning.probability(p) for p in ACKNOWLEDGEMENTS}
    assert all(v < MEANING_THRESHOLD for v in read.values()), read


def test_unseen_requests_read_as_taking_the_floor(meaning):
    read = {p: meaning.probability(p) for p in REQUESTS}
    assert all(v >= MEANING_THRESHOLD for v in read.values()), read


def test_the_judge_follows_the_reading(meaning):
    """An acknowledgement outside the word list is a backchannel by meaning (by the list alone it
    would be an interruption); a request is an interruption at the second glance."""
    phrase = "Righto."
    assert Overlap("i", 0, None, 0.0).ended(phrase, 600) == "interruption"  # the list does not know it
    ov = Overlap("i", 0, None, 0.0)
    assert ov.glanced(phrase, 500, meaning.probability(phrase)) is None
    assert ov.ended(phrase, 700, meaning.probability(phrase)) == "backchannel"
    ask = "Tell me about the moon instead."
    ov = Overlap("i", 0, None, 0.0)
    assert ov.glanced(ask, 500, meaning.probability(ask)) is None
    assert ov.glanced(ask, 600, meaning.probability(ask)) == "interruption"


# --------------------------------------------------------------------------- completeness at a pause

COMPLETE_TURNS = ["Could you play some quiet piano music", "What time does the bakery open",
                  "Please turn off the kitchen lights", "How tall is a giraffe"]
OPEN_TURNS = ["Could you play some", "What time does the", "Please turn off the kitchen",
              "I was wondering whether"]


@pytest.fixture(scope="module")
def completeness(meaning) -> MeaningHead:
    return turn_head(meaning.reader, ROOT / "data" / "models")


def test_turn_phrases_are_not_examples_it_was_fitted_on():
    fitted = {" ".join(words_of(t)) for t in (*COMPLETE, *OPEN)}
    assert not [p for p in COMPLETE_TURNS + OPEN_TURNS if " ".join(words_of(p)) in fitted]


def test_unseen_complete_requests_read_as_more_complete_than_their_openings(completeness):
    """Each request is read as more complete than its own opening (the pairs share their first
    words, so only where the words stop differs)."""
    pairs = {(c, o): (completeness.probability(c), completeness.probability(o))
             for c, o in zip(COMPLETE_TURNS, OPEN_TURNS)}
    assert all(pc > po for pc, po in pairs.values()), pairs


def test_a_reading_that_extends_the_last_one_reads_as_a_fresh_one(meaning):
    """Each reading reuses what the last one in its frame shares with it; the words read must
    come out as a reading from scratch would give them, whatever was read before (longer,
    shorter, other words, the other frame)."""
    reader = meaning.reader
    sequence = [("How many", TURN), ("How many seconds are", TURN), ("Mm-hmm.", OVERLAP),
                ("How many seconds are in a", TURN), ("How many seconds are in a day?", TURN),
                ("How many seconds", TURN), ("What is", TURN), ("How many seconds are in a day?", TURN)]
    for words, frame in sequence:
        read = reader.features(words, frame)
        reader._last.clear()
        fresh = reader.features(words, frame)
        assert abs(read - fresh).max() < 1e-4, (words, abs(read - fresh).max())
        reader.features(words, frame)  # leave this reading as the last for the next
