"""Every evaluation set in one place, each split into a ``dev`` part and an ``eval`` part.

- ``answers`` (``bench/sets/answers.py``): simple questions with accepted key words.
- ``tools`` (``bench/sets/tools.py``): prompts that need a function call, and decoys.
- ``delegation`` (``bench/sets/delegation.py``): requests a Live session hands to the client, and ones it answers.
- ``turns`` (``bench/sets/turns.py``): spoken complete turns, and turns paused mid-sentence.
- ``duplex`` (``bench/sets/duplex.py``): spoken turns, pauses, backchannels, interruptions and
  long-answer prompts for ``python -m bench duplex``, with their own voices per part.

``dev`` is where prompts, few-shot examples, thresholds, weights and word lists are chosen, and
where test cases come from; ``eval`` is run once a choice is made and appears nowhere else:
``tests/unit/test_eval_leaks.py`` fails when an ``eval`` item, or a near-copy of one
(``Item.found_in``), appears in a shipped file or a test, and when two items of different sets or
parts are near-copies. A new set adds its module here.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class EvalSet:
    name: str
    dev: tuple[str, ...]  # the texts of the dev items
    eval: tuple[str, ...]  # the texts of the held-out items


def normalise(text: str) -> str:
    """Lower case, apostrophes dropped, every other run of non-alphanumerics one space: the same
    words match whatever the quoting, punctuation or line breaks around them."""
    text = text.lower().replace("\u2019", "'").replace("'", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text).split())


# --- near-copies ---------------------------------------------------------------------------------

_SAYS_IS = "what|that|it|there|here|who|where|how|when|why|he|she|this"
_CONTRACTIONS = [  # (pattern on lower-case text with straight apostrophes, replacement), in order
    (r"\bcan't\b|\bcannot\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"\blet's\b", "let us"), (r"\bi'm\b", "i am"), (rf"\b({_SAYS_IS})'s\b", r"\1 is"),
    (r"(?<=[a-z])n't\b", " not"), (r"(?<=[a-z])'re\b", " are"), (r"(?<=[a-z])'ve\b", " have"),
    (r"(?<=[a-z])'ll\b", " will"), (r"(?<=[a-z])'d\b", " would"),
]
_NUMBERS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
# British spellings folded to American ones, where a regular expression does it cheaply: "our" ->
# "or" after these beginnings ("colours", "favourite"), "re" -> "er" at the end of these words
# ("centimetres"), "ise" -> "ize" after these beginnings, "grey" and "tyre".
_SPELLING = [
    (r"\b(colo|favo|flavo|hono|neighbo|behavio|harbo|humo|labo|rumo|odo|vapo)ur", r"\1r"),
    (r"\b(cent|met|kilomet|centimet|millimet|lit|theat|fib|somb)re(s?)\b", r"\1er\2"),
    (r"\b(organ|real|recogn|apolog|summar|memor)is(e|es|ed|ing)\b", r"\1iz\2"),
    (r"\bgrey\b", "gray"), (r"\btyre(s?)\b", r"tire\1"),
]
# Words that carry no topic: what a question's template, a filler or a backchannel is made of.
STOPWORDS = frozenset("""
a an the of to in on at for from by with about into over than and or but if so as then
is are was were be been being am do does did done have has had can could will would shall should may might
must not no yes what which who whom whose how many much when where why there here this that these those
it its i me my mine you your yours we us our they them their he him his she her please tell some any
just let like very really also too up out oh ah uh um er mm hm hmm mhm well okay ok
""".split())
# Discourse markers: words that open or pad a short turn without changing what it asks ("Right,
# enough of that." is "Okay, enough of that."; "Yeah, totally." is "Totally."). For an item of
# fewer than two content words they are filler, as the stopwords are (issue 69).
DISCOURSE = frozenset("""
right okay ok yeah yep yes yup alright so well oh now hey look listen uh um er ah hmm mm actually
sorry excuse pardon
""".split())
FILLER = STOPWORDS | DISCOURSE
# What a short item may swap, add or drop and stay the same request: the discourse markers, a
# polite modal ("Can I jump in?", "May I jump in?") and a pad ("just", "please", "here").
SWAPPABLE = DISCOURSE | frozenset("can could may might please just here".split())


# A token: a word (with its apostrophes: "what's"), or a mark that ends a sentence (. ? ! ; : brackets,
# = and such: code's syntax too) or a quotation (a string may go on in the next literal: "How many
# days are there " "in a week?").
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")
_TOKEN = re.compile(r"([a-z0-9]+(?:'[a-z0-9]+)*)|([.?!;:()\[\]{}<>=|*#])|[\"`']")
_SENTENCE, _QUOTE = "\x00", "\x01"


@functools.lru_cache(maxsize=None)
def _word(token: str) -> tuple[str, ...]:
    """One token's canonical words: "what's" -> ("what", "is"), "colours" -> ("colors",), "nine" -> ("9",)."""
    for pattern, replacement in _CONTRACTIONS + _SPELLING:
        token = re.sub(pattern, replacement, token)
    return tuple(str(_TENS[w]) if w in _TENS else _NUMBERS.get(w, w) for w in token.replace("'", "").split())


def _words(text: str, marks: bool = False) -> list[str]:
    """The canonical words of ``text``; with ``marks``, ``_SENTENCE`` and ``_QUOTE`` where they end."""
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    if not marks:
        tokens = _WORD.findall(text)
        if _TENS.keys().isdisjoint(tokens):  # nothing to join: the quick way
            return [w for token in tokens for w in _word(token)]
    tokens = [w or (_SENTENCE if end else _QUOTE) for w, end in _TOKEN.findall(text)]
    out: list[str] = []
    tens = False  # the last token was a multiple of ten written out ("twenty"): "one" adds to it
    for token in tokens:
        for w in _word(token):
            if tens and token in _NUMBERS and 0 < int(w) < 10:
                out[-1] = str(int(out[-1]) + int(w))
                tens = False
            else:
                out.append(w)
                tens = token in _TENS
    return [w for w in out if w not in (_SENTENCE, _QUOTE)] if not marks else out


def canonical(text: str) -> list[str]:
    """The words of ``text`` in one form: lower case, contractions expanded ("what's" -> "what is",
    "don't" -> "do not"), number words below 100 as digits ("twenty-one" -> "21"), British
    spellings folded ("colour" -> "color", "metre" -> "meter"), punctuation gone."""
    return _words(text)


class Text:
    """A text made ready to look for many items in: its canonical words (joined with spaces, as a
    set, and, when asked, each word's places and the sentence and quotation it belongs to)."""

    def __init__(self, text: str):
        self.text = text
        self.words = _words(text)
        self.joined = f" {' '.join(self.words)} "
        self.vocabulary = frozenset(self.words)

    @functools.cached_property
    def at(self) -> dict[str, list[int]]:
        at: dict[str, list[int]] = {}
        for i, w in enumerate(self.words):
            at.setdefault(w, []).append(i)
        return at

    @functools.cached_property
    def sentence(self) -> list[int]:
        """A number per word, one more after each sentence end."""
        return self._ends[0]

    @functools.cached_property
    def quotation(self) -> list[int]:
        """A number per word, one more after each sentence or quotation end."""
        return self._ends[1]

    @functools.cached_property
    def _ends(self) -> tuple[list[int], list[int]]:
        sentence, quotation, n, k = [], [], 0, 0
        for w in _words(self.text, marks=True):
            if w in (_SENTENCE, _QUOTE):
                n += w == _SENTENCE
                k += 1
            else:
                sentence.append(n)
                quotation.append(k)
        return sentence, quotation

    @functools.cached_property
    def frames(self) -> frozenset[tuple[str, ...]]:
        """Each whole sentence or quotation with its ``SWAPPABLE`` words dropped: what a short item
        is looked for by ("right enough of that" and "okay enough of that" are both "enough of that")."""
        out: set[tuple[str, ...]] = set()
        start = 0
        for k in range(1, len(self.words) + 1):
            if k == len(self.words) or self.quotation[k] != self.quotation[k - 1]:
                frame = tuple(w for w in self.words[start:k] if w not in SWAPPABLE)
                if frame:
                    out.add(frame)
                start = k
        return frozenset(out)

    def content_word(self, k: int, step: int, quotation: int) -> str | None:
        """The first content word from place ``k`` on, going by ``step``, within ``quotation``."""
        while 0 <= k < len(self.words) and self.quotation[k] == quotation:
            if self.words[k] not in STOPWORDS:
                return self.words[k]
            k += step
        return None


def _joined(words: tuple[str, ...] | list[str]) -> str:
    return f" {' '.join(words)} "


@dataclass(frozen=True)
class Item:
    """An item made ready to be looked for (``Item.of(text)``). It is found in a text when:

    - its whole canonical form (``canonical``) occurs there, on word boundaries; an item with fewer
      than two content words once discourse markers are set aside (``FILLER``: "Yep.", "Thank
      you!", "How many continents are there?", "Okay, enough of that.") only so, or as the
      non-filler words of a short sentence or quotation (``_short_in``: filler swaps);
    - or a window of ``WINDOW`` or more consecutive item words occurs that holds two content words
      and half of the item's ("what colour is the sky" for "What colour is the sky on a clear
      day?"; not "Tell me a long story." for "... a long story about a pirate who lost his ship."),
      unless the text's sentence or quotation goes on, right before or after it, with a content
      word the item does not have on that side (a shared template: "What colour is a ripe
      strawberry?" is no copy of "What colour is a ripe banana?");
    - or all its content words occur in its order in one sentence within ``len(words) + SLACK``
      words, with at most one other content word among them ("how many days are there in a week"
      for "How many days are in a week?"; not "import time / from datetime import UTC" for "Tell
      me the time in UTC.").

    Content words are the words not in ``STOPWORDS``: a template that holds one ("What is the
    capital of ...?", "How many legs does a ... have?") is never enough.
    """

    text: str
    words: tuple[str, ...]
    content: tuple[str, ...]
    windows: tuple[tuple[int, int], ...]  # (start, end): the shortest distinctive windows
    core: tuple[str, ...] = ()  # the words that are not filler (``FILLER``): fewer than two make a short item
    frame: tuple[str, ...] = ()  # the words that are not ``SWAPPABLE``: how a short item is found

    WINDOW = 4
    SLACK = 3

    @classmethod
    def of(cls, text: str) -> Item:
        words = tuple(canonical(text))
        is_content = [w not in STOPWORDS for w in words]
        windows = []
        if sum(is_content) >= 2:
            for start in range(len(words)):
                end, count = start, 0
                while end < len(words) and (end - start < cls.WINDOW or count < 2):
                    count += is_content[end]
                    end += 1
                if end - start >= cls.WINDOW and count >= 2 and end - start < len(words):
                    windows.append((start, end))
        core = tuple(w for w in words if w not in FILLER)
        frame = tuple(w for w in words if w not in SWAPPABLE)
        return cls(text, words, tuple(w for w, c in zip(words, is_content) if c), tuple(windows), core, frame)

    def found_in(self, text: Text | str) -> bool:
        """Whether ``text`` holds this item or a near-copy of it (see the class)."""
        t = text if isinstance(text, Text) else Text(text)
        if not self.words:
            return False
        if len(self.core) < 2:
            return self._short_in(t)
        if len(t.vocabulary.intersection(self.content)) < 2:  # cheap test first: no rule below can hold
            return False
        if _joined(self.words) in t.joined:
            return True
        if any(_joined(self.words[s:e]) in t.joined and self._window_at(s, e, t) for s, e in self.windows):
            return True
        return t.vocabulary.issuperset(self.content) and self._in_order(t)

    def copy_in(self, other: Text) -> bool:
        """Whether another item holds this one, or a near-copy of it: it is found there, and if this
        item has fewer than two content words, it is itself a run of ``WINDOW`` words or more ("How
        many continents are there?") or the rest of the other is filler ("Wow." in "Oh wow.", not
        "Right." in "Is it raining in London right now?")."""
        if not self.found_in(other):
            return False
        if len(self.core) >= 2 or len(self.words) >= self.WINDOW:
            return True
        if self.frame and self.frame in other.frames:
            return True  # the other is this item with markers or pads swapped
        rest = list(other.words)
        for w in self.words:
            if w in rest:
                rest.remove(w)
        return all(w in FILLER for w in rest)

    def _short_in(self, t: Text) -> bool:
        """A short item (fewer than two content words, discourse markers aside): its whole form on
        word boundaries, or a whole sentence or quotation that is the item but for ``SWAPPABLE``
        words ("Right, enough of that." for "Okay, enough of that."; "Totally." for "Yeah,
        totally."; "May I jump in here?" for "Can I jump in?")."""
        if _joined(self.words) in t.joined:
            return True
        return bool(self.frame) and self.frame in t.frames

    def _window_at(self, start: int, end: int, t: Text) -> bool:
        """Whether the item's words ``start:end`` occur in ``t`` somewhere its sentence does not go on,
        right before or after them, with a content word the item does not have on that side."""
        window, n = list(self.words[start:end]), len(self.words)
        for p in t.at[window[0]]:
            if t.words[p:p + len(window)] != window:
                continue
            s, e, q = start, end, p + len(window)  # the window grown to all the words both have there
            while s > 0 and p > 0 and t.words[p - 1] == self.words[s - 1]:
                s, p = s - 1, p - 1
            while e < n and q < len(t.words) and t.words[q] == self.words[e]:
                e, q = e + 1, q + 1
            if 2 * sum(w not in STOPWORDS for w in self.words[s:e]) < len(self.content):
                continue  # less than half the item's content words
            before = {w for w in self.words[:s] if w not in STOPWORDS}
            after = {w for w in self.words[e:] if w not in STOPWORDS}
            behind = t.content_word(p - 1, -1, t.quotation[p])
            ahead = t.content_word(q, 1, t.quotation[q - 1])
            if not (before and behind and behind not in before or after and ahead and ahead not in after):
                return True
        return False

    def _in_order(self, t: Text) -> bool:
        span, own = len(self.words) + self.SLACK, set(self.content)
        for first in t.at[self.content[0]]:
            end = first  # each next content word at its first place after the last: the shortest run
            for w in self.content[1:]:
                places = t.at[w]
                k = bisect.bisect_right(places, end)
                if k == len(places):
                    return False  # no later start can do better
                end = places[k]
                if end - first >= span:
                    break
            else:
                others = sum(w not in STOPWORDS and w not in own for w in t.words[first:end])
                if others <= 1 and t.sentence[first] == t.sentence[end]:
                    return True
        return False


def near_copies(a: str, b: str) -> bool:
    """Whether two items are the same or near-copies: either is a copy in the other
    (``Item.copy_in``)."""
    return Item.of(a).copy_in(Text(b)) or Item.of(b).copy_in(Text(a))


def all_sets() -> list[EvalSet]:
    from bench.sets import answers, delegation, duplex, tools, turns

    return [
        EvalSet("answers", tuple(x.text for x in answers.DEV), tuple(x.text for x in answers.EVAL)),
        EvalSet("tools", tuple(c[0] for c in tools.DEV), tuple(c[0] for c in tools.EVAL)),
        EvalSet("delegation", tuple(c[0] for c in delegation.DEV), tuple(c[0] for c in delegation.EVAL)),
        EvalSet("turns", tuple(turns.DEV_COMPLETE + turns.DEV_OPEN),
                # a paused item's opening (the words before the pause) and its whole text
                tuple(turns.EVAL_COMPLETE + [text for before, _, after in turns.EVAL_PAUSED
                                             for text in (before, f"{before} {after}")])),
        # dev2 (issue 34's eval, spent by the diagnoses of issue 47) is tuning data now (issue 69)
        EvalSet("duplex", tuple(duplex.texts("dev") + duplex.texts("dev2")), tuple(duplex.texts("eval"))),
    ]
