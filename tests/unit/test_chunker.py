from core.cascade.chunker import SpeechChunker
from core.cascade.tts import speakable


def feed(chunker: SpeechChunker, tokens: list[str]) -> list[tuple[int, str]]:
    out = []
    for i, tok in enumerate(tokens):
        out += [(i, piece) for piece in chunker.push(tok)]
    out += [(len(tokens), piece) for piece in chunker.flush()]
    return out


def test_first_piece_is_cut_after_a_few_words_then_sentences():
    tokens = ["The", " capital", " of", " France", " is", " Paris", ".", " It", " is", " a", " lovely",
              " city", " with", " museums", ",", " parks", " and", " cafes", ".", " Ask", " more", "?"]
    pieces = feed(SpeechChunker(first_words=3), tokens)
    texts = [p for _, p in pieces]
    assert texts[0] == "The capital of"
    assert pieces[0][0] == 3  # out as soon as the third word is known to be complete
    assert texts[1] == "France is Paris."
    assert texts[2] == "It is a lovely city with museums, parks and cafes."
    assert texts[3] == "Ask more?"
    assert " ".join(texts) == "".join(tokens).strip()


def test_first_piece_stops_at_a_clause_mark():
    pieces = [p for _, p in feed(SpeechChunker(first_words=5), ["Hello", ",", " there", "!", " I", " am", " fine", "."])]
    assert pieces[0] == "Hello,"
    assert pieces[-1].endswith("fine.")


def test_run_on_text_is_cut_before_max_chars():
    chunker = SpeechChunker(first_words=2, max_chars=60)
    words = ["word"] * 80
    pieces = feed(chunker, [" " + w for w in words])
    assert all(len(p) <= 60 for _, p in pieces)
    assert sum(len(p.split()) for _, p in pieces) == 80


def test_speakable_strips_markdown():
    assert speakable("**Paris** is `the` capital # 1") == "Paris is the capital 1"


def test_a_speaker_about_to_run_dry_gets_the_next_piece_early():
    hurry = [False]
    chunker = SpeechChunker(first_words=2, hurry=lambda: hurry[0])
    assert chunker.push("Paris is ") == ["Paris is"]
    # A long sentence with no mark yet: normally it waits for the sentence end...
    assert chunker.push("the capital city of France and ") == []
    # ...but with little audio left ahead of the listener it goes now, after whole words.
    hurry[0] = True
    assert chunker.push("its") == ["the capital city", "of France and"]
    hurry[0] = False
    assert chunker.push(" largest city.  ") == ["its largest city."]
