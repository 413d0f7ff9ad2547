"""The function-calling set: typed prompts that need one of four tools, and prompts that need none.

Half the prompts need a tool, half do not (decoys: jokes, facts, thanks...). Each case names the
tool it needs (None: an answer) and the argument values the prompt names. ``DEV`` chooses the
tool prompt and ``ANSWER_BIAS`` (``core/cascade/tool_calls.py``, ``python -m bench.fit.tool_fit``);
``EVAL`` is what ``python -m bench tools`` reports on, never quoted in code or a test
(``tests/unit/test_eval_leaks.py``).
"""

from __future__ import annotations

from typing import Any

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "description": "Current weather for a city.",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
         "required": ["city"]}},
    {"type": "function", "name": "get_time", "description": "The current local time in a timezone or city.",
     "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}},
    {"type": "function", "name": "set_timer", "description": "Start a countdown timer.",
     "parameters": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1}},
                    "required": ["minutes"]}},
    {"type": "function", "name": "convert_currency", "description": "Convert an amount of money between currencies.",
     "parameters": {"type": "object", "properties": {
         "amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
         "required": ["amount", "from", "to"]}},
]

# (prompt, expected tool or None for an answer, expected argument values (case-insensitive,
# strings matched as substrings), part): "dev" prompts choose the tool prompt and the answer bias
# (``python -m bench.fit.tool_fit``); "eval" prompts are held out.
CASES: list[tuple[str, str | None, dict[str, Any], str]] = [
    # replaced "What's the weather like in Paris?" (issue 44): also a turns dev item
    ("What's the weather like in Madrid?", "get_weather", {"city": "madrid"}, "dev"),
    ("Is it raining in London right now?", "get_weather", {"city": "london"}, "eval"),
    ("How hot is it in Tokyo today, in fahrenheit?", "get_weather", {"city": "tokyo", "unit": "fahrenheit"}, "eval"),
    ("Tell me the weather forecast for Berlin.", "get_weather", {"city": "berlin"}, "dev"),
    ("Do I need an umbrella in Seattle today?", "get_weather", {"city": "seattle"}, "eval"),
    ("What time is it in Tokyo?", "get_time", {"timezone": "tokyo"}, "dev"),
    ("What's the current time in New York?", "get_time", {"timezone": "new york"}, "eval"),
    ("Tell me the time in UTC.", "get_time", {"timezone": "utc"}, "eval"),
    ("What time is it in Sydney right now?", "get_time", {"timezone": "sydney"}, "dev"),
    ("Set a timer for 5 minutes.", "set_timer", {"minutes": 5}, "dev"),
    ("Start a 10 minute timer please.", "set_timer", {"minutes": 10}, "eval"),
    ("Remind me in 20 minutes with a timer.", "set_timer", {"minutes": 20}, "eval"),
    ("Can you time 3 minutes for my eggs?", "set_timer", {"minutes": 3}, "dev"),
    ("Convert 100 dollars to euros.", "convert_currency", {"amount": 100, "from": "usd|dollar", "to": "eur"}, "dev"),
    ("How many yen is 50 euros?", "convert_currency", {"amount": 50, "from": "eur", "to": "jpy|yen"}, "eval"),
    ("What is 20 pounds in US dollars?", "convert_currency",
     {"amount": 20, "from": "gbp|pound", "to": "usd|dollar"}, "eval"),
    ("Change 250 euros into Swiss francs.", "convert_currency",
     {"amount": 250, "from": "eur", "to": "chf|franc"}, "dev"),
    ("Hello there!", None, {}, "dev"),
    ("Make me laugh with a silly pun.", None, {}, "eval"),  # replaced "Tell me a joke." (issue 44): turns dev
    # replaced "What is the capital of Italy?" (issue 44): an answers eval item
    ("What is the capital of Austria?", None, {}, "dev"),
    ("Thank you!", None, {}, "eval"),
    # replaced "Who wrote Romeo and Juliet?" (issue 44): also an answers eval item
    ("Who composed the Moonlight Sonata?", None, {}, "eval"),
    ("How are you today?", None, {}, "dev"),
    ("Write a short poem about the sea.", None, {}, "eval"),
    ("What is six times seven?", None, {}, "dev"),  # replaced "What is two plus two?" (issue 44): turns dev
    ("Can you explain what photosynthesis is?", None, {}, "eval"),
    ("What is your name?", None, {}, "dev"),
    ("Give me a tip for sleeping better.", None, {}, "eval"),
    # replaced "Translate good morning into Spanish." (issue 44): a turns dev item
    ("What is the Italian word for cheese?", None, {}, "eval"),
    ("Why is the sky blue?", None, {}, "dev"),
    ("Goodbye, see you later.", None, {}, "eval"),
    ("What's a good name for a cat?", None, {}, "eval"),
    # replaced "Who painted the Mona Lisa?" (issue 44): an answers dev item
    ("Who painted The Starry Night?", None, {}, "dev"),
    ("Tell me a fun fact about octopuses.", None, {}, "eval"),
]

DEV = [c for c in CASES if c[3] == "dev"]
EVAL = [c for c in CASES if c[3] == "eval"]

# Each case is asked in two kinds of session: with all four tools, and with one tool (the tool it
# needs, or for a decoy one of the four in turn), as most voice agents register a single function.
OFFERS = ("all", "one")


def offered(case: tuple[str, str | None, dict[str, Any], str], index: int, offer: str) -> list[dict[str, Any]]:
    """The tools a session offers for ``case`` (the ``index``-th of its part)."""
    if offer == "all":
        return TOOLS
    tool = case[1] or TOOLS[index % len(TOOLS)]["name"]
    return [t for t in TOOLS if t["name"] == tool]
