"""Cuts a token stream into speakable pieces: a small first piece, sentence-sized ones after.

The first piece goes out at the first clause mark, or after ``first_words`` complete words
(and a function word that follows them: no piece begins with "of" or "is"), whichever comes
first, so speech can start after a handful of tokens. Later pieces end at
sentence marks (longer pieces synthesise more efficiently and sound more natural), with a
clause or word fallback so a run-on sentence cannot hold audio back for long. When the
speaker is about to run dry (``hurry()`` says so: little audio left ahead of the listener), a
later piece is cut early too, at a clause mark or after ``hurry_words`` words, so a long first
sentence cannot leave a silent gap after the short first piece.

No cut inside a sentence (the first piece, a hurried one, at a comma or after a few words) leaves a
tiny last piece to be synthesised alone: it waits until one more word is complete after it, so the
words after the cut are at least that word and the one being read (a sentence's last word then
goes out with the words before it). Piper says a one-word piece with a piece's own onset and
fall: "The capital of France is" | "Paris." was heard "..., Aris" / "Harris" by the project's
Whisper in 18 of 40 syntheses, "... France" | "is Paris." in 0 of 40 (issue 69; earlier "of
France is" | "Paris." in 2 of 12). The price is one token more before such a cut. A sentence end
is a piece's natural end and is cut at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_SENTENCE_END = re.compile(r"[.!?;:…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:\u2014–-]\s|[.!?…]+[\"')\]]*\s")
_NEWLINE = re.compile(r"\n+")


class SpeechChunker:
    def __init__(self, first_words: int = 3, min_chars: int = 12, max_chars: int = 180,
                 hurry: Callable[[], bool] | None = None, hurry_words: int = 3) -> None:
        self.first_words = first_words
        self.hurry = hurry
        self.hurry_words = hurry_words
        self.min_chars = min_chars
        self.max_chars = max_chars
        self._buf = ""
        self._first = True

    def push(self, delta: str) -> list[str]:
        self._buf += _NEWLINE.sub(" ", delta)
        out: list[str] = []
        while True:
            piece = self._cut()
            if piece is None:
                return out
            if piece.strip():
                out.append(piece.strip())

    def flush(self) -> list[str]:
        rest, self._buf = self._buf.strip(), ""
        self._first = False
        return [rest] if rest else []

    def _take(self, end: int) -> str:
        piece, self._buf = self._buf[:end], self._buf[end:].lstrip()
        self._first = False
        return piece

    def _cut(self) -> str | None:
        buf = self._buf
        if self._first:
            return self._early(buf, self.first_words)
        for m in _SENTENCE_END.finditer(buf):
            if m.end() >= self.min_chars:
                return self._take(m.end())
        if self.hurry is not None and self.hurry():
            piece = self._early(buf, self.hurry_words)
            if piece is not None:
                return piece
        if len(buf) > self.max_chars:
            clause = None
            for m in _CLAUSE_END.finditer(buf[: self.max_chars]):
                clause = m
            if clause is not None and clause.end() >= self.min_chars:
                return self._take(clause.end())
            space = buf.rfind(" ", 0, self.max_chars)
            return self._take(space if space > 0 else self.max_chars)
        return None

    def _early(self, buf: str, words_wanted: int, words_after: int = 1) -> str | None:
        """A short piece: up to the first clause mark, or the first ``words_wanted`` words, once
        ``words_after`` more words are complete after the cut (at a sentence end: at once)."""
        m = _CLAUSE_END.search(buf)
        if m and len(buf[: m.start()].split()) >= 1:
            if _SENTENCE_END.fullmatch(m.group()) or _complete_words(buf[m.end():]) >= words_after:
                return self._take(m.end())
            return None  # a comma with too little after it yet: no word cut past it either
        words = buf.split()
        complete = _complete_words(buf)
        n = words_wanted  # a function word right after the cut goes with the piece before it
        while n < complete and n < words_wanted + _MAX_CARRIED and _bare(words[n]) in _OPENS_PHRASE:
            n += 1
        if complete >= n + words_after:
            idx = 0  # cut after the n-th word
            for i in range(n):
                idx = buf.index(words[i], idx) + len(words[i])
            return self._take(idx)
        return None


# A piece that begins with one of these is said with a weak, clipped onset by Piper: "The capital"
# | "of France is Paris." was heard "... Francis Pears" by the project's Whisper in 4-10 of 40
# syntheses; "The capital of" | "France is Paris." in 0 of 160 (issue 69). A word cut takes them
# along (at most ``_MAX_CARRIED``): one token more before the first audio, where it applies.
_OPENS_PHRASE = frozenset("of to in on at for with from by and or but is are was were".split())
_MAX_CARRIED = 2


def _bare(word: str) -> str:
    return word.lower().strip(".,;:!?\"'()[]")


def _complete_words(text: str) -> int:
    """Words in ``text`` known to be whole: all but a last one that no space follows yet."""
    words = text.split()
    return len(words) - (0 if not words or text[-1:].isspace() else 1)
