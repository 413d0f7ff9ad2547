"""The answer quality set (bench/sets/answers.py): sizes, disjointness, and how answers are scored."""

from __future__ import annotations

from bench.sets.answers import DEV, EVAL, SHORT_WORDS, Question, num, number_words, score, words


def test_sets_are_big_enough_and_disjoint():
    assert len(EVAL) >= 50 and len(DEV) >= 25
    eval_texts, dev_texts = {x.text.lower() for x in EVAL}, {x.text.lower() for x in DEV}
    assert len(eval_texts) == len(EVAL) and len(dev_texts) == len(DEV)
    assert not eval_texts & dev_texts
    assert all(isinstance(x, Question) and x.keys and all(x.keys) for x in EVAL + DEV)
    assert SHORT_WORDS == 40


def test_number_words():
    assert number_words(8) == ["eight"]
    assert {"twenty-one", "twenty one"} <= set(number_words(21))
    assert {"one hundred", "a hundred"} <= set(number_words(100))
    assert {"one thousand", "a thousand"} <= set(number_words(1000))
    assert "three hundred and sixty-six" in number_words(366)
    assert {"1000", "1,000", "one thousand"} <= set(num(1000))


def test_digits_and_number_words_both_score():
    item = Question("How many legs does an octopus have?", (num(8),))
    assert score("An octopus has 8 legs.", item)
    assert score("Octopuses have EIGHT legs.", item)
    assert score("Eight-legged, of course.", item)
    assert score("**8**", item)
    sum_ = Question("What is 11 plus 8?", (num(19),))
    assert score("11 plus 8 is 19.", sum_) and score("It is nineteen.", sum_)


def test_wrong_numbers_and_parts_of_words_fail():
    item = Question("How many legs does an octopus have?", (num(8),))
    for wrong in ("An octopus has six legs.", "eighteen", "twenty-eight", "eighty", "88",
                  "1.8 legs", "180", "weight"):
        assert not score(wrong, item), wrong
    sum_ = Question("What is 11 plus 8?", (num(19),))
    assert not score("11 plus 8 is 18.", sum_)
    assert not score("It is 190.", sum_)
    assert score("The answer is 19. Nice!", sum_)


def test_phrases_and_groups():
    item = Question("x", (("carbon dioxide", "CO2"), ("leaves",)))
    assert score("Plants take in Carbon\n dioxide through their leaves.", item)
    assert not score("Plants take in carbon dioxide.", item)  # the second group is missing
    assert not score("carbonated dioxides in the leaves", item)


def test_an_echo_of_the_question_does_not_score():
    for item in EVAL + DEV:
        assert not score(item.text, item), item.text
        assert not score(f"You asked: {item.text} Let me think about that.", item), item.text


def test_every_item_can_score():
    for item in EVAL + DEV:
        assert score(" and ".join(group[0] for group in item.keys), item), item.text


def test_words():
    assert words("An octopus has eight legs.") == 5
    assert words("  ") == 0


def test_answers_report_lists_wrong_and_long_answers():
    from bench.answers import questions, report, summarise

    assert len(questions("eval")) == len(EVAL) and len(questions("dev", limit=5)) == 5
    rows = [{"question": "What do spiders make?", "answer": "Spiders make webs.", "right": True, "words": 3,
             "short": True, "latency_ms": 100.0},
            {"question": "What is 11 plus 8?", "answer": "It is 18.", "right": False, "words": 3, "short": True,
             "latency_ms": 300.0},
            {"question": "What colour is chalk?", "answer": "", "right": False, "words": 0, "short": False,
             "error": "APITimeoutError: timed out"}]
    s = summarise(rows)
    assert (s["questions"], s["right"], s["errors"], s["latency_ms_p50"]) == (3, 0.333, 1, 200.0)
    text = report({"set": "eval", "commit": "abc", "temperature": None, "max_tokens": None, "verbose": False,
                   "targets": [{"target": "embedded", "summary": s, "rows": rows}]})
    assert "| embedded | 3 | 0.333 |" in text
    assert "What is 11 plus 8? -> It is 18. [WRONG]" in text and "webs" not in text
    assert "error: APITimeoutError" in text
    greedy = report({"set": "dev", "commit": "abc", "temperature": 0.0, "max_tokens": None, "verbose": True,
                     "targets": [{"target": "embedded", "summary": s, "rows": rows}]})
    assert "temperature 0.0; max_tokens default" in greedy and "Spiders make webs." in greedy
