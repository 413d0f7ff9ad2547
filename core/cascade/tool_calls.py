"""Function calling for the cascade's small LLM: the model itself chooses between calling a tool
and answering, and writes the call's arguments, under a grammar (llguidance) that admits only
``ANSWER`` or ``CALL <tool name> <JSON valid under that tool's schema>``.

So a call always names a real tool and its arguments always parse and validate; the choice is
the model's (its greedy pick of the first token under the grammar, i.e. the likelier of the
two). llguidance was chosen over xgrammar and outlines: no dependencies of its own, Lark grammars
with inline JSON schemas, and ~1.4 ms per token mask on this CPU for SmolLM2's 49k vocabulary.
"""

from __future__ import annotations

import json
from typing import Any

import torch

CALL, ANSWER = "CALL ", "ANSWER"


class ToolGrammar:
    """One constrained generation: masks logits, consumes the chosen tokens."""

    def __init__(self, ll_tokenizer: Any, tools: list, required: bool) -> None:
        import llguidance
        import llguidance.torch

        self._ll = llguidance
        self.matcher = llguidance.LLMatcher(ll_tokenizer, tool_grammar(tools, required))
        if self.matcher.is_error():
            raise ValueError(f"tool grammar: {self.matcher.get_error()}")
        self._bitmask = llguidance.torch.allocate_token_bitmask(1, ll_tokenizer.vocab_size)

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        self._ll.torch.fill_next_token_bitmask(self.matcher, self._bitmask, 0)
        out = logits.clone().unsqueeze(0)
        self._ll.torch.apply_token_bitmask_inplace(out, self._bitmask)
        return out[0]

    def consume(self, token: int) -> bool:
        """Take ``token``; True when the grammar is complete (nothing more may follow)."""
        self.matcher.consume_token(token)
        return self.matcher.is_stopped()


def tool_grammar(tools: list, required: bool) -> str:
    """The llguidance grammar: ``ANSWER`` (unless required) or a call of one of ``tools``."""
    import llguidance

    alternatives = " | ".join(f'"{t.name} " %json {json.dumps(_schema(t.parameters))}' for t in tools)
    answer = "" if required else f' | "{ANSWER}"'
    return llguidance.LLMatcher.grammar_from_lark(f'start: "{CALL}" call{answer}\ncall: {alternatives}\n')


def grammar_error(tools: list) -> str | None:
    """Why the tools' schemas cannot be enforced (checked at ``session.update``), or None."""
    import llguidance

    try:
        error = llguidance.LLMatcher.validate_grammar(tool_grammar(tools, False))
    except Exception as exc:  # noqa: BLE001 - the schema text itself did not parse
        return str(exc)
    return error or None


def _schema(parameters: dict) -> dict:
    """The tool's parameters as a closed object schema (no invented fields)."""
    schema = dict(parameters or {"type": "object", "properties": {}})
    schema.setdefault("type", "object")
    if schema.get("type") == "object":
        schema.setdefault("additionalProperties", False)
    # compact JSON: no newlines and indentation for the model to spend tokens (and time) on
    schema["x-guidance"] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    return schema


def parse_choice(text: str) -> tuple[str, str] | None:
    """``(name, arguments)`` for a call, None for an answer."""
    if not text.startswith(CALL):
        return None
    name, _, arguments = text[len(CALL):].partition(" ")
    return name, arguments.strip() or "{}"


# The call-or-answer choice, by likelihood: each candidate start (``ANSWER`` and ``CALL <name> {``
# for every tool) is scored by the model's log-probability after the prompt, minus its
# log-probability after the same prompt with an empty user message ("contextual calibration",
# Zhao et al. 2021: it removes the prompt's own lean, e.g. towards the last example's tool), and
# ``ANSWER`` gets ANSWER_BIAS. The likeliest wins; the arguments are then written under the
# grammar for that tool. ANSWER_BIAS is chosen on the DEV prompts of ``bench/sets/tools.py`` only,
# each in a four-tool and a one-tool session (``python -m bench.fit.tool_fit``: +0.75 is the single
# best, 80 %); ``python -m bench tools`` reports it on EVAL (docs/benchmarks.md).
ANSWER_BIAS = 0.75

# A Live session with client delegation offers the model one hidden function: calling it hands the
# request to the client's application (``worker/live/delegation.py``). Its name, description and
# its own lean towards calling (added to its score; the answer keeps ANSWER_BIAS) are chosen on the
# DEV part of ``bench/sets/delegation.py`` with the ``tools`` set's DEV prompts
# (``python -m bench.fit.delegate_fit``: +2.25 is the middle of the best run, 25 of 27);
# ``--eval`` reports it on EVAL (docs/benchmarks.md). A general "ask someone else" function is
# far less likely to a 135M model than a named one (without the lean it never wins).
DELEGATION_TOOL = {
    "type": "function", "name": "use_app",
    "description": ("Live or personal information (weather, time, news, prices, the user's messages or orders) "
                    "or an action in the world."),
    "parameters": {"type": "object", "properties": {}},
}
DELEGATION_CALL_BIAS = 2.25
_calibration: dict[tuple[int, ...], torch.Tensor] = {}
_prefix_kv: dict[tuple[int, ...], Any] = {}


def candidates(tools: list) -> list[str]:
    return [ANSWER, *(f"{CALL}{t.name}" for t in tools)]


@torch.inference_mode()
def _scores(llm: Any, prompt: list[int], texts: list[str], fixed: list[int]) -> tuple[torch.Tensor, Any]:
    """Log-probability of each text after ``prompt``; also the prompt's KV cache. The KV of
    ``fixed`` (system prompt and examples, the same every turn for a tool set) is kept, and the
    texts' shared starts (``CALL``, `` get``...) are computed once (a token trie, walked on the
    prompt's own cache, cropped back after each branch: no copies)."""
    key = tuple(fixed)
    cache = None
    if key in _prefix_kv and tuple(prompt[:len(key)]) == key and len(prompt) > len(key):
        cache = llm.runner.copy_cache(_prefix_kv[key], len(key))
        last = llm.runner.forward(prompt[len(key):], cache).float()
    else:
        cache = llm.runner.new_cache()
        last = llm.runner.forward(prompt, cache).float()
        if tuple(prompt[:len(key)]) == key and len(prompt) > len(key):
            if len(_prefix_kv) >= 2:  # ~95 MB each (a preallocated cache)
                _prefix_kv.clear()
            _prefix_kv[key] = llm.runner.copy_cache(cache, len(key))
    sequences = [llm.tokenizer.encode(text, add_special_tokens=False) for text in texts]
    totals = [0.0] * len(texts)

    def walk(logits: torch.Tensor, length: int, depth: int, members: list[int]) -> None:
        logp = torch.log_softmax(logits, -1)
        children: dict[int, list[int]] = {}
        for i in members:
            totals[i] += float(logp[sequences[i][depth]])
            if len(sequences[i]) > depth + 1:
                children.setdefault(sequences[i][depth], []).append(i)
        for token, group in children.items():  # depth first on the one cache, cropped back after
            walk(llm.runner.forward([token], cache).float(), length + 1, depth + 1, group)
            cache.crop(length)

    walk(last, len(prompt), 0, list(range(len(texts))))
    return torch.tensor(totals), cache


def choice_scores(llm: Any, messages: list[dict[str, str]], tools: list,
                  fixed: int) -> tuple[torch.Tensor, Any, list[int]]:
    """Each candidate's calibrated score (``candidates(tools)`` order, before ANSWER_BIAS), with
    the prompt's KV cache and tokens (so the arguments' generation need not prefill again).
    ``messages[:fixed]`` are the system prompt and the examples: the content-free prompt is
    those and an empty user message."""
    texts = candidates(tools)
    prompt = llm.prompt_tokens(messages)
    empty = llm.prompt_tokens([*messages[:fixed], {"role": "user", "content": ""}])
    head = llm.template(messages[:fixed], generation_prompt=False)
    with llm.lock:
        key = tuple(empty) + tuple(hash(t) for t in texts)
        if key not in _calibration:
            if len(_calibration) > 32:
                _calibration.clear()
            _calibration[key] = _scores(llm, empty, texts, head)[0]
        scores, cache = _scores(llm, prompt, texts, head)
    return scores - _calibration[key], cache, prompt


def decide(scores: torch.Tensor, tools: list, answer_bias: float = ANSWER_BIAS,
           delegation_bias: float = DELEGATION_CALL_BIAS) -> str | None:
    """The likeliest candidate once ``ANSWER`` (and the hidden delegation function) has its
    bias: a tool's name, or None to answer."""
    biased = scores.clone()
    biased[0] += answer_bias
    for i, tool in enumerate(tools, 1):
        if is_delegation(tool):
            biased[i] += delegation_bias
    best = int(torch.argmax(biased))
    return None if best == 0 else tools[best - 1].name


def is_delegation(tool: Any) -> bool:
    """The hidden delegation function (its name and description both), not a client's own tool."""
    return tool.name == DELEGATION_TOOL["name"] and tool.description == DELEGATION_TOOL["description"]


def choose_tool(llm: Any, messages: list[dict[str, str]], tools: list,
                fixed: int) -> tuple[str | None, Any, list[int]]:
    """The model's choice: a tool's name, or None to answer; with the prompt's KV cache and tokens."""
    scores, cache, prompt = choice_scores(llm, messages, tools, fixed)
    return decide(scores, tools), cache, prompt


def tool_prompt(history: list[dict[str, str]], tools: list, required: bool) -> tuple[list[dict[str, str]], int]:
    """The tool step's chat: its system prompt, the few-shot turns, then ``history`` (the
    conversation's messages after the system one); with how many leading messages are fixed
    for a tool set (what ``choose_tool`` calibrates against)."""
    examples = tool_examples(tools)
    system = {"role": "system", "content": tool_instructions(tools, required)}
    return [system, *examples, *history], 1 + len(examples)


def tool_examples(tools: list) -> list[dict[str, str]]:
    """Few-shot turns built from the actual tools (their description as the user's request, a
    call with placeholder arguments) interleaved with a few plain chat turns answered ANSWER."""
    answers = ["Hi, how are you?", "Who was Napoleon?", "Thanks a lot"]
    calls = [(_one_line(t.description) or t.name.replace("_", " "), f"{CALL}{t.name} {_example_arguments(t)}")
             for t in tools]
    turns: list[tuple[str, str]] = []
    for i in range(max(len(calls), len(answers))):  # as many calls as answers, alternating
        turns += [(a, ANSWER) for a in answers[i:i + 1]] + [calls[i % len(calls)]]
    return [m for user, reply in turns for m in ({"role": "user", "content": user},
                                                   {"role": "assistant", "content": reply})]


def _example_arguments(tool: Any) -> str:
    out: dict[str, Any] = {}
    for key, spec in ((tool.parameters or {}).get("properties") or {}).items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(spec, dict) and spec.get("enum"):
            out[key] = spec["enum"][0]
        elif kind in ("integer", "number"):
            out[key] = 2
        elif kind == "boolean":
            out[key] = True
        else:
            out[key] = "..."
    return json.dumps(out)


def _one_line(text: str | None) -> str:
    """A tool's description on one line: a docstring's trailing newline or indented ``Args:``
    lines (LiveKit Agents sends them) changed the model's call-or-answer choice."""
    return " ".join((text or "").split())


def tool_instructions(tools: list, required: bool) -> str:
    """The tool step's system prompt. The session's own instructions are left out: for a 135M
    model they only blur the choice (measured)."""
    lines = ["You decide if the user's message needs one of these functions:"]
    for t in tools:
        props = ", ".join((t.parameters or {}).get("properties", {}))
        lines.append(f"- {t.name}({props}): {_one_line(t.description) or 'no description'}")
    if required:
        lines.append("Call the function that fits the user's last message: reply CALL <name> <JSON arguments>.")
    else:
        lines.append("If the message asks for what a function does, reply CALL <name> <JSON arguments>. "
                     "Otherwise reply ANSWER.")
    return "\n".join(lines)
