"""The client-delegation set (issue 48): spoken-style requests a voice assistant cannot do from
what it knows (live facts, the user's own things, actions in the world), which a Live session with
``delegation.type`` ``client`` should hand to the application, and ones it should answer itself.

``DEV`` (with the ``tools`` set's dev prompts) chooses the hidden delegation tool's description
(``worker/live/delegation.py``, ``python -m bench.fit.delegate_fit``); ``EVAL`` is reported by
``python -m bench.fit.delegate_fit --eval`` once that choice is made, and appears nowhere else. Thirteen first-written items were replaced because the leak matcher found
them in another set (the same question, or one part of it).
"""

from __future__ import annotations

# (request, whether it should be delegated, part)
CASES: list[tuple[str, bool, str]] = [
    ("Check if my flight to Denver is on time.", True, "dev"),
    ("How much is one bitcoin worth at the moment?", True, "dev"),
    ("Send a message to Tom saying I will be late.", True, "dev"),
    ("Order a large pepperoni pizza for delivery.", True, "dev"),
    ("How bad is the traffic on the highway now?", True, "dev"),
    ("Did my package from the bookshop arrive yet?", True, "dev"),
    ("Which animal is the fastest swimmer?", False, "dev"),
    ("What colour do blue and yellow make together?", False, "dev"),
    ("How long should green tea steep?", False, "dev"),
    ("What do pandas eat?", False, "dev"),
    ("Nice to meet you.", False, "dev"),
    ("How many wheels does a tricycle have?", False, "dev"),
    ("Is the science museum open tomorrow?", True, "eval"),
    ("Book me a taxi to the train station.", True, "eval"),
    ("Is the stock market up or down this afternoon?", True, "eval"),
    ("Email my boss that I'm sick today.", True, "eval"),
    ("What films are showing at the cinema tonight?", True, "eval"),
    ("How much money is left in my bank account?", True, "eval"),
    ("At what temperature does water boil?", False, "eval"),
    ("What is the main ingredient of guacamole?", False, "eval"),
    ("Can owls turn their heads all the way around?", False, "eval"),
    ("How do you say thank you in German?", False, "eval"),
    ("Which planet is closest to the sun?", False, "eval"),
    ("Hey, lovely to chat with you.", False, "eval"),
]

DEV = [c for c in CASES if c[2] == "dev"]
EVAL = [c for c in CASES if c[2] == "eval"]
