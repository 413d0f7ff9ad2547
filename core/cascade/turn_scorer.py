"""The embedded LLM's probability that the user's message is complete (``semantic_vad``).

SmolLM2 reads the partial transcript as a user message; the chance that its next token is the
end-of-message token (or terminal punctuation, which Whisper's guess was stripped of) is how
sure the model is that nothing more is coming, as LiveKit's turn detector reads it. One short
forward over the transcript's tokens (the chat prefix stays cached), ~70-90 ms on two cores.
"""

from __future__ import annotations

from core.cascade.llm import SmolLm
from core.cascade.voice_prompt import DEFAULT_INSTRUCTIONS
from core.conversation.end_of_turn import MessageEnd, strip_trailing_punctuation, without_last_word

PLACEHOLDER = "\u2063"  # marks where the user's words go in the chat template


class EndOfMessageScorer:
    """``system``: the system prompt the words are read under, the embedded model's default
    instructions unless named, so that the score agrees with the one a default reply's own
    prefill yields (``SmolLm.generate``'s ``end_of_message``)."""

    def __init__(self, lm: SmolLm, system: str | None = None) -> None:
        self.lm = lm
        tok = lm.tokenizer
        system = DEFAULT_INSTRUCTIONS if system is None else system
        ids = lm.prompt_tokens([{"role": "system", "content": system}, {"role": "user", "content": PLACEHOLDER}],
                               generation_prompt=False)
        marker = tok.encode(PLACEHOLDER, add_special_tokens=False)
        at = _find(ids, marker)
        self.prefix = ids[:at]  # the system prompt and "<|im_start|>user\n", cached once
        self._holder: dict = {}

    def probability(self, text: str) -> float:
        """P(the message ends after ``text``). Blocking: runs on the LLM thread."""
        return self.message_end(text).after_words

    def message_end(self, text: str) -> MessageEnd:
        """P(the message ends after ``text``) and after all but its last word, from one forward
        over the words. Blocking: runs on the LLM thread."""
        words = strip_trailing_punctuation(text)
        if not words:
            return MessageEnd(0.0)
        encode = self.lm.tokenizer.encode
        rest = encode(words, add_special_tokens=False)
        head = encode(without_last_word(words), add_special_tokens=False)
        cut = len(head)
        if 0 < cut < len(rest) and rest[:cut] == head:  # the words before the last cut cleanly
            logits, (before,) = self.lm.next_token_logits(self.prefix, rest, self._holder, also=[cut - 1])
            return MessageEnd(self.lm.end_probability(logits), self.lm.end_probability(before))
        return MessageEnd(self.lm.end_probability(self.lm.next_token_logits(self.prefix, rest, self._holder)))


def _find(ids: list[int], marker: list[int]) -> int:
    for i in range(len(ids) - len(marker) + 1):
        if ids[i : i + len(marker)] == marker:
            return i
    raise ValueError("the chat template lost the placeholder")
