"""The spoken reply's decoding: the loop guard, the speech cap and the temperature mapping
(a scripted model with a tiny vocabulary; no weights)."""

from __future__ import annotations

import threading

import pytest
import torch

from core.cascade.llm import KvState, SmolLm, _ban_repeats, _speech_cap
from core.cascade.voice_prompt import DEFAULT_INSTRUCTIONS, generation_settings

VOCAB = ["<end>", " The", " sky", " is", " blue", ".", " It", " 3", ".5", " la", " da", " di", " do"]
END = 0


class _Tokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [END, 1, 2] if add_generation_prompt else [END, 1]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(VOCAB[i] for i in ids if not (skip_special_tokens and i == END))

    def encode(self, text, add_special_tokens=False):
        return [1]


class _Cache:
    def get_seq_length(self):
        return 0


class _Runner:
    """Each forward's logits prefer the script's next token (then the other tokens in order)."""

    def __init__(self, script: list[int]) -> None:
        self.script, self.calls = script, 0

    def new_cache(self):
        return _Cache()

    def forward(self, ids, cache, also=None):
        want = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        logits = -torch.arange(len(VOCAB), dtype=torch.float32)  # lower ids likelier as fallbacks
        logits[END] = -100.0
        logits[want] = 10.0
        return logits


def _model(script: list[int]) -> SmolLm:
    lm = SmolLm.__new__(SmolLm)
    lm.tokenizer, lm.runner = _Tokenizer(), _Runner(script)
    lm.stop_ids, lm.end_id, lm.final_ids = {END}, END, [5]
    lm.lock, lm._prefixes = threading.Lock(), {}
    return lm


def _reply(script: list[int], **settings) -> tuple[str, str]:
    pieces: list[str] = []
    stats = _model(script).generate([{"role": "user", "content": "hi"}], KvState(), pieces.append,
                                    threading.Event(), **settings)
    return "".join(pieces), stats.stop_reason


def test_a_looping_reply_never_repeats_an_ngram():
    text, _ = _reply([9, 10] * 20, max_tokens=30, no_repeat_ngram=3)
    tokens = text.split()
    trigrams = [tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2)]
    assert len(trigrams) == len(set(trigrams)), text
    looping, _ = _reply([9, 10] * 20, max_tokens=30, no_repeat_ngram=0)
    assert looping == " la da" * 15  # without the guard the scripted model loops


def test_ban_repeats_only_bans_what_completes_a_seen_ngram():
    logits = torch.zeros(len(VOCAB))
    banned = _ban_repeats(logits, [1, 2, 3, 1, 2], 3)
    assert banned[3] == float("-inf") and torch.isfinite(banned[torch.arange(len(VOCAB)) != 3]).all()
    assert _ban_repeats(logits, [1, 2], 3) is logits  # too short to repeat anything
    assert torch.isfinite(_ban_repeats(logits, [1, 2, 4, 5], 2)).all()


def test_the_reply_ends_at_a_sentence_end_once_long_enough():
    sentence = [1, 2, 3, 4, 5]  # " The sky is blue."
    text, reason = _reply(sentence * 4 + [END], stop_after_words=6, no_repeat_ngram=0)
    assert text == " The sky is blue. The sky is blue." and reason == "stop"
    text, reason = _reply(sentence + [END], stop_after_words=6, no_repeat_ngram=0)
    assert text == " The sky is blue." and reason == "stop"  # short replies end by themselves


def test_a_decimal_point_is_not_a_sentence_end():
    text, _ = _reply([1, 3, 7, 8, 6, 3, 4, 5, 6, END], stop_after_words=2, no_repeat_ngram=0)
    assert text == " The is 3.5 It is blue."


def test_the_hard_word_cap_cuts_a_reply_without_a_sentence_end():
    text, reason = _reply([9, 10, 11, 12] * 10, max_words=5, no_repeat_ngram=0, max_tokens=100)
    assert text.split() == ["la", "da", "di", "do", "la"] and reason == "length"


@pytest.mark.parametrize(("piece", "expected"), [(" It", "stop"), (".5", None), ("\n", "stop")])
def test_speech_cap_waits_for_the_next_word(piece, expected):
    assert _speech_cap("It is 3.", piece, 3, 0) == expected
    assert _speech_cap("It is 3.", piece, 4, 0) is None  # not long enough yet


def test_the_session_default_temperature_decodes_greedily_and_an_asked_one_samples():
    assert generation_settings(0.3, 160)["temperature"] == 0.0
    assert generation_settings(0.0, 160)["temperature"] == 0.0
    hot = generation_settings(0.8, 160)
    assert hot["temperature"] > 0.0 and hot["top_p"] < 1.0
    assert generation_settings(0.3, 40)["max_tokens"] == 40
    spoken, text = generation_settings(0.3, 160), generation_settings(0.3, 160, spoken=False)
    assert spoken["stop_after_words"] > 0 and spoken["max_words"] <= 40
    assert text.get("stop_after_words", 0) == 0 and text.get("max_words", 0) == 0


def test_the_default_instructions_are_one_neutral_system_text():
    assert "SmolLM" not in DEFAULT_INSTRUCTIONS and "Hugging Face" not in DEFAULT_INSTRUCTIONS
    assert "sentence" in DEFAULT_INSTRUCTIONS
