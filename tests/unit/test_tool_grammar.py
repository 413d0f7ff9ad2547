"""The cascade's tool grammar makes schema-invalid calls impossible: whatever the model's
logits say (here: random ones, many times over), a generation under ``ToolGrammar`` is either
``ANSWER`` or ``CALL <a declared tool> <JSON valid under that tool's schema>``."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from core.cascade.tool_calls import ANSWER, ToolGrammar, parse_choice
from core.conversation.config import FunctionTool

TOOLS = [
    FunctionTool(name="get_weather", description="Weather in a city.", parameters={
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                         "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city", "unit"]}),
    FunctionTool(name="set_timer", description="Start a timer.", parameters={
        "type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1, "maximum": 120}},
        "required": ["minutes"]}),
]


@pytest.fixture(scope="module")
def tokenizer():
    import llguidance.hf
    from transformers import AutoTokenizer

    from core.cascade.llm import CACHE_NAME, bundled_gguf_dir
    from tests.support.stack import ROOT

    path = ROOT / "data" / "models" / CACHE_NAME
    if not path.exists():  # the converted model is made on the first start; the GGUF has the tokenizer
        path = bundled_gguf_dir()
    tok = AutoTokenizer.from_pretrained(path) if (path / "tokenizer.json").exists() else AutoTokenizer.from_pretrained(
        path, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    return tok, llguidance.hf.from_tokenizer(tok)


def generate(tok, ll, required: bool, seed: int, max_tokens: int = 120) -> tuple[str, bool]:
    """(text, complete): the cascade emits a call only for a complete generation."""
    grammar = ToolGrammar(ll, TOOLS, required)
    gen = torch.Generator().manual_seed(seed)
    ids: list[int] = []
    for _ in range(max_tokens):
        logits = grammar.mask(torch.randn(len(tok), generator=gen) * 5)
        token = int(torch.argmax(logits))
        if token == tok.eos_token_id:
            return tok.decode(ids), grammar.matcher.is_accepting()
        ids.append(token)
        if grammar.consume(token):
            return tok.decode(ids), True
    return tok.decode(ids), False


@pytest.mark.parametrize("required", [False, True], ids=["auto", "required"])
def test_random_logits_still_give_a_valid_call_or_answer(tokenizer, required):
    tok, ll = tokenizer
    calls = 0
    for seed in range(40):
        text, complete = generate(tok, ll, required, seed)
        if not complete:
            continue  # out of tokens mid-call (a never-ending string): not emitted
        choice = parse_choice(text)
        if choice is None:
            assert not required and text == ANSWER, text
            continue
        calls += 1
        name, arguments = choice
        tool = next(t for t in TOOLS if t.name == name)
        jsonschema.validate(json.loads(arguments), tool.parameters)
    # compact JSON and bounded strings: most random walks complete (under auto, about half answer)
    assert calls >= (20 if required else 5)


def test_a_tool_description_is_put_to_the_model_on_one_line():
    """LiveKit Agents sends a function's docstring as its description ("...city.\n"); its line
    breaks must not reach the prompt, where they changed the call-or-answer choice."""
    from core.cascade.tool_calls import tool_examples, tool_instructions
    from core.conversation.config import FunctionTool

    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    plain = FunctionTool(name="get_weather", description="Get the current weather in a city.", parameters=params)
    docstring = FunctionTool(name="get_weather", description="Get the current weather in a city.\n\n    Args:\n"
                             "        city: the city\n", parameters=params)
    assert tool_instructions([plain], False).count("\n") == tool_instructions([docstring], False).count("\n")
    assert tool_examples([FunctionTool(name="get_weather", description=plain.description + "\n",
                                       parameters=params)]) == tool_examples([plain])
