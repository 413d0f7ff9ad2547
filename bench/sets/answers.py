"""Simple factual and everyday questions with accepted key words, for answer quality.

    from bench.sets.answers import EVAL, DEV, score, words
    right = score(reply_text, EVAL[0])

- ``EVAL``: the evaluation set ``python -m bench answers`` reports on. Never tune prompts on it,
  never quote it in a prompt, an example or a test (``tests/unit/test_eval_leaks.py`` fails if one
  does).
- ``DEV``: a disjoint set of the same kinds of questions (different questions, not paraphrases) for
  tuning prompts and decoding defaults, and for test cases.

An item's ``keys`` is a tuple of groups, each a tuple of alternatives. An answer is right when every
group has one alternative present as a whole word or phrase, case-insensitively ("eight" does not
match "eighteen" or "twenty-eight"; "19" does not match "190" or "1.9"). Numeric answers are given
with ``num(n)``, which accepts the digits and the number words ("8" or "eight", "21", "twenty-one"
or "twenty one", "1000", "1,000", "one thousand" or "a thousand"). Key words are chosen not to occur
in the question, so a model that only echoes the question does not score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SHORT_WORDS = 40  # an answer of at most this many words counts as short

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
         "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n: int) -> list[str]:
    """Spellings of 0 <= n < 1,000,000: "twenty-one"/"twenty one", "one hundred (and) five", ..."""
    if not 0 <= n < 1_000_000:
        raise ValueError(n)
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        tens, ones = divmod(n, 10)
        return [_TENS[tens]] if ones == 0 else [f"{_TENS[tens]}-{_ONES[ones]}", f"{_TENS[tens]} {_ONES[ones]}"]
    big, unit = (n // 100, n % 100), "hundred"
    if n >= 1000:
        big, unit = (n // 1000, n % 1000), "thousand"
    lead, rest = big
    heads = [f"{w} {unit}" for w in number_words(lead)] + ([f"a {unit}"] if lead == 1 else [])
    if rest == 0:
        return heads
    tails = number_words(rest)
    return [f"{h}{sep}{t}" for h in heads for t in tails for sep in (" ", " and ")]


def num(n: int) -> tuple[str, ...]:
    """A key group for a number: its digits (and "1,000" style for thousands) and its words."""
    digits = [str(n)] + ([f"{n:,}"] if n >= 1000 else [])
    return (*digits, *number_words(n))


@dataclass(frozen=True)
class Question:
    text: str
    keys: tuple[tuple[str, ...], ...]


def q(text: str, *groups: tuple[str, ...] | list[str] | str) -> Question:
    """A question; each group is a tuple of alternatives (a bare string is a group of one)."""
    return Question(text, tuple((g,) if isinstance(g, str) else tuple(g) for g in groups))


def _normal(text: str) -> str:
    return " ".join(text.replace("\u2019", "'").replace("\u2011", "-").replace("\u2010", "-").split()).lower()


def _pattern(alternative: str) -> re.Pattern[str]:
    body = r"\s+".join(re.escape(part) for part in alternative.lower().split())
    # Not inside a word, not the tail of a hyphenated number ("twenty-eight" is not "eight"),
    # not part of a longer or decimal number ("1.9", "190").
    return re.compile(rf"(?<![\w-])(?<!\d[.,]){body}(?!\w|[.,]\d)")


def has(answer: str, alternative: str) -> bool:
    return _pattern(alternative).search(_normal(answer)) is not None


def score(answer: str, item: Question) -> bool:
    """Right when every key group has one alternative in the answer as a whole word or phrase."""
    return all(any(has(answer, alt) for alt in group) for group in item.keys)


def words(answer: str) -> int:
    return len(answer.split())


EVAL: list[Question] = [
    # geography
    # France moved to DEV (issue 30): the project's smoke question since the first commit, asked
    # by the README and many tests, so it was never held out; Canada took its place, unseen.
    q("What is the capital of Canada?", "Ottawa"),
    q("What is the capital of Japan?", "Tokyo"),
    q("What is the capital of Italy?", "Rome"),
    q("What is the capital of Germany?", "Berlin"),
    q("What is the capital of Spain?", "Madrid"),
    q("What is the capital city of the United Kingdom?", "London"),
    q("What is the capital of Egypt?", "Cairo"),
    q("Which ocean is the largest on Earth?", "Pacific"),
    q("In which country are the pyramids of Giza?", "Egypt"),
    q("What language do people mainly speak in Brazil?", "Portuguese"),
    # animals
    q("How many legs does a spider have?", num(8)),
    q("How many legs does a dog have?", num(4)),
    q("How many legs does an insect have?", num(6)),
    q("What animal says moo?", ("cow", "cows", "cattle")),
    q("What is the fastest land animal?", ("cheetah", "cheetahs")),
    q("What is the largest mammal in the world?", ("whale", "whales")),
    q("What do caterpillars turn into?", ("butterfly", "butterflies", "moth", "moths")),
    # replaced "What do bees make?" (issue 44): a near-copy of a duplex eval item ("how do bees make honey?")
    q("Which bird hoots at night?", ("owl", "owls")),
    q("Which animal is known as the king of the jungle?", ("lion", "lions")),
    # arithmetic
    q("What is 12 plus 7?", num(19)),
    q("What is 5 times 6?", num(30)),
    q("What is 20 minus 8?", num(12)),
    q("What is 100 divided by 4?", num(25)),
    q("What is 3 plus 4?", num(7)),
    q("What is half of 30?", num(15)),
    q("What is 9 times 9?", num(81)),
    # colours
    q("What colour is the sky on a clear day?", "blue"),
    q("What colour is grass?", "green"),
    q("What colour do you get when you mix red and white?", "pink"),
    q("What colour is a ripe banana?", "yellow"),
    q("What colour is snow?", "white"),
    # time, days, months
    q("How many days are in a week?", num(7)),
    q("What day comes after Monday?", "Tuesday"),
    q("What is the first month of the year?", "January"),
    q("How many months are in a year?", num(12)),
    q("Which month comes after June?", "July"),
    q("How many hours are in a day?", num(24)),
    q("What season comes after winter?", "spring"),
    q("How many minutes are in an hour?", num(60)),
    # units and measures
    q("How many centimetres are in a metre?", num(100)),
    q("How many grams are in a kilogram?", num(1000)),
    q("At what temperature in degrees Celsius does water boil at sea level?", num(100)),
    q("How many sides does a triangle have?", num(3)),
    q("How many wheels does a bicycle have?", num(2)),
    # opposites and words
    q("What is the opposite of hot?", "cold"),
    q("What is the opposite of up?", "down"),
    q("What is the opposite of big?", ("small", "little", "tiny")),
    q("What is the opposite of day?", "night"),
    q("What do you call frozen water?", "ice"),
    # everyday facts and science
    q("Which planet do we live on?", "Earth"),
    q("What is the largest planet in our solar system?", "Jupiter"),
    q("What gas do humans need to breathe to stay alive?", "oxygen"),
    q("What is the chemical formula H2O better known as?", "water"),
    q("What star is at the centre of our solar system?", "sun"),
    q("What do you use to cut paper?", ("scissors", "knife", "blade", "paper cutter", "cutter", "guillotine")),
    q("Which body part do you use to smell?", ("nose", "noses")),
    q("Who wrote Romeo and Juliet?", "Shakespeare"),
    # replaced "How many continents are there on Earth?" (issue 44): a near-copy of a turns dev item
    q("How many toes does a person have on one foot?", num(5)),
    q("What do cows produce that people drink?", "milk"),
    q("What falls from clouds when it rains?", ("water", "raindrops", "drops", "droplets")),
    q("What is the natural satellite of the Earth called?", "moon"),
    q("What do you call a baby dog?", ("puppy", "puppies", "pup", "pups")),
]

DEV: list[Question] = [
    q("What is the capital of France?", "Paris"),
    q("What is the capital of Portugal?", "Lisbon"),
    q("What is the capital of Russia?", "Moscow"),
    q("What is the capital of China?", ("Beijing", "Peking")),
    q("On which continent is Kenya?", "Africa"),
    q("What is the longest river in Africa?", "Nile"),
    q("How many legs does a bird have?", num(2)),
    q("What animal barks?", ("dog", "dogs")),
    q("What is the tallest animal in the world?", ("giraffe", "giraffes")),
    q("What do you call a baby cat?", ("kitten", "kittens", "kitty")),
    q("How many legs does an octopus have?", num(8)),
    q("What is 8 plus 5?", num(13)),
    q("What is 7 times 4?", num(28)),
    q("What is 50 minus 20?", num(30)),
    q("What is 42 divided by 6?", num(7)),
    q("What colour do you get when you mix blue and yellow?", "green"),
    q("What colour is a ripe strawberry?", "red"),
    q("What colour is coal?", "black"),
    q("What day comes before Sunday?", "Saturday"),
    q("What is the last month of the year?", "December"),
    q("How many seconds are in a minute?", num(60)),
    q("How many days are in a leap year?", num(366)),
    q("How many metres are in a kilometre?", num(1000)),
    q("How many sides does a square have?", num(4)),
    q("What is the opposite of wet?", "dry"),
    q("What is the opposite of fast?", ("slow", "slowly")),
    q("What do you call a person who flies a plane?", ("pilot", "pilots", "aviator")),
    q("What planet is known as the Red Planet?", "Mars"),
    q("What do plants take in from the air to make food?", ("carbon dioxide", "CO2")),
    q("Who painted the Mona Lisa?", ("Leonardo", "da Vinci")),
    q("What do you use to brush your teeth?", ("toothbrush", "toothbrushes", "toothpaste")),
    q("What is the freezing point of water in degrees Celsius?", num(0)),
    q("Which organ pumps blood around the body?", "heart"),
]
