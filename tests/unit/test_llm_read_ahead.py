"""Reading a turn's words ahead (issue 47): the reply's prefill gets shorter, nothing else changes.

On the real SmolLM2: a reply made after its words were read ahead says what it says without, and
scores the turn's end the same, whether the words heard later begin like the ones read or not.
"""

from __future__ import annotations

import math
import threading

import pytest

from core.cascade.llm import KvState
from core.conversation.end_of_turn import MessageEnd

QUESTION = "How do I change a flat tire?"
# The prefill runs in bfloat16 where the CPU has it (``resolve_dtypes``), and its rounding differs
# with how the words are split between passes: up to 0.054 in log-odds here (float32: within 2 %).
# A reuse one token too long moved it by 1.7 (and changed the words); semantic_vad's wait reads the log-odds.
SAME_SCORE_LOG_ODDS = 0.1


def same_score(a: float, b: float) -> bool:
    return abs(math.log(a / (1 - a)) - math.log(b / (1 - b))) <= SAME_SCORE_LOG_ODDS


def reply(llm, system: str, words: str, state: KvState) -> tuple[str, MessageEnd, int]:
    pieces: list[str] = []
    ends: list[MessageEnd] = []
    stats = llm.generate([{"role": "system", "content": system}, {"role": "user", "content": words}], state,
                         pieces.append, threading.Event(), max_tokens=10, temperature=0.0,
                         end_of_message=ends.append)
    return "".join(pieces), ends[0], stats.reused_tokens


@pytest.mark.parametrize("heard_before", ["How do I change a flat", "How do I fix the", QUESTION])
def test_a_reply_after_reading_ahead_says_and_scores_the_same(cascade_backend, heard_before):
    llm, system = cascade_backend.llm, cascade_backend.options.instructions
    text, end, reused = reply(llm, system, QUESTION, KvState())
    state = KvState()
    read = llm.read_ahead([{"role": "system", "content": system}, {"role": "user", "content": heard_before}],
                          state, threading.Event())
    assert read > 0
    text_after, end_after, reused_after = reply(llm, system, QUESTION, state)
    assert text_after == text and text
    assert same_score(end_after.after_words, end.after_words), (end_after, end)
    # the score without the last word is still made: its row is recomputed, not taken as read
    assert end.before_last_word is not None and end_after.before_last_word is not None
    assert same_score(end_after.before_last_word, end.before_last_word), (end_after, end)
    if heard_before.startswith("How do I change"):
        assert reused_after > reused  # the words read ahead are not prefilled again


def test_nothing_is_read_after_a_cancel(cascade_backend):
    llm, system = cascade_backend.llm, cascade_backend.options.instructions
    cancelled = threading.Event()
    cancelled.set()
    state = KvState()
    assert llm.read_ahead([{"role": "system", "content": system}, {"role": "user", "content": QUESTION}],
                          state, cancelled) == 0
    assert state.cache is None and state.tokens == []
