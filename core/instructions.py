"""The default system prompt: a voice assistant's, made for a small model.

Top-level in ``core/`` because both processes use it: the worker's cascade sends it when a
session sets no instructions, and the gateway's built-in presets show it (the gateway loads no
model code, so it cannot import it from ``core/cascade/``). Chosen with
``python -m bench.fit.answer_fit`` on the DEV questions of ``bench/sets/answers.py`` only.
"""

# The examples are quoted speech, not "Q:"/"A:" lines: with those the model began its own reply
# with "A:". They come from the DEV pool of ``bench/fit/answer_fit.py`` (issue 30: the two, four
# and six-example candidates tied at 72 % right on the rest of DEV; the two-example prompt gave
# the shortest answers). No EVAL question may appear here (tests/unit/test_eval_leaks.py).
DEFAULT_INSTRUCTIONS = (
    "You are a friendly voice assistant. Your replies are read aloud, so answer every question with "
    "one short, correct sentence in plain words: no lists, no markdown, no emoji.\n\n"
    "For example:\n"
    'Asked "What is the capital of Portugal?", you say: "The capital of Portugal is Lisbon."\n'
    'Asked "What is 8 plus 5?", you say: "8 plus 5 is 13."'
)
