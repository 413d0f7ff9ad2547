"""What the embedded LLM is told and how it decodes when the session says nothing else.

A 135M model answers far better with a prompt made for voice. The default instructions live in
``core/instructions.py`` (shared with the gateway's presets): one system message, so the shared
system-prompt KV cache holds all of it, examples included, and they cost nothing per turn. Here
are the decoding settings a spoken reply uses, chosen with them.
"""

from __future__ import annotations

from typing import Any

from core.conversation.config import ConversationConfig
from core.instructions import DEFAULT_INSTRUCTIONS  # noqa: F401 - shared with the gateway's presets

# The temperature a client that names none gets: the realtime session's default
# (core/conversation/config.py); the REST job (core/rest_jobs.py) and chat completions
# (gateway/rest/models.py) default to the same 0.3.
SESSION_DEFAULT_TEMPERATURE: float = ConversationConfig.model_fields["temperature"].default
TOP_P = 0.9
NO_REPEAT_NGRAM = 4
# A spoken reply ends at the first sentence end after 20 words and is cut at 40 whatever happens;
# a session with a bigger max_output_tokens than the default 160 gets proportionally more.
SPOKEN_SENTENCE_END_WORDS = 20
SPOKEN_MAX_WORDS = 40
DEFAULT_MAX_TOKENS = 160


def voice_temperature(temperature: float) -> float:
    """The sampling temperature for the session's ``temperature``.

    A 135M model answers simple questions right far more often greedily (DEV: 72 % greedy,
    53 % sampling at 0.5), so the default path is greedy: any temperature up to the layers'
    default (0.3) decodes greedily. A client that asks for more still gets sampling, at its
    temperature less 0.3 (OpenAI clients' usual 0.8 samples at 0.5, 1.3 at 1.0): the scale is
    shifted so the default is the greedy end of it. A client cannot ask for 0.3 sampling apart
    from the default; it gets greedy decoding.
    """
    return max(0.0, temperature - SESSION_DEFAULT_TEMPERATURE)


def generation_settings(temperature: float, max_tokens: int, spoken: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``SmolLm.generate`` for one reply, from the session's settings.

    - ``temperature``: see ``voice_temperature`` (greedy by default), top-p 0.9 when sampling.
    - No repetition penalty (with greedy decoding it pushed away words an answer needs twice,
      "8 plus 5 is 13" after "What is 8 plus 5?"); the loop guard is a no-repeat-4-gram rule
      instead: a reply never repeats four tokens in a row it already said.
    - ``spoken``: the reply ends at the first sentence end after 20 words and is cut at 40
      (a sentence that long is a run-on the listener would not follow); a session that raises
      ``max_output_tokens`` above the default 160 gets proportionally more, and one that lowers
      it is bound by its token budget first. A text-only reply (``spoken=False``) has only the
      token budget: a text client can read a longer answer.
    """
    settings: dict[str, Any] = {
        "temperature": voice_temperature(temperature), "top_p": TOP_P, "repetition_penalty": 1.0,
        "no_repeat_ngram": NO_REPEAT_NGRAM, "max_tokens": max_tokens,
    }
    if spoken:
        scale = max(1.0, max_tokens / DEFAULT_MAX_TOKENS)
        settings["stop_after_words"] = round(SPOKEN_SENTENCE_END_WORDS * scale)
        settings["max_words"] = round(SPOKEN_MAX_WORDS * scale)
    return settings
