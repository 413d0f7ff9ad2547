"""Speech over the assistant's reply: a backchannel ("mm-hmm", "yeah"), an interruption, or noise.

People say "mm-hmm" while they listen; only an interruption should stop the reply. When the VAD
hears a voice while the listener hears the assistant (``PlaybackClock.audible``), turn-taking
holds back ``speech_started`` and this judge decides from:
- the voice's length: longer than the dev set's backchannels -> an interruption;
- glances (``transcribe_glance``, ~30 ms each) from ``GLANCE_FIRST_MS`` of voice on, every
  ``GLANCE_EVERY_MS``: words that take the floor, ``CONFIRM`` glances in a row -> an interruption;
- the whole clip once the voice pauses: words that do not take the floor -> a backchannel, no
  words -> noise, anything else -> an interruption.
- a hum (``only_hums``: "Mm-hmm" spelled in m's and h's) never takes the floor by itself;
- a negation or a request to stop (``STOP_WORDS``, ``STOP_PHRASES``) in any glance or the clip ->
  an interruption at once, whatever the voice's length (issue 47: "No." must never be ignored);
- its own words heard back (issue 70, ``echo_words.py``): words that repeat what the listener
  heard the assistant say in the last moments (``said``) are its echo, judged as noise (no words);
  a stop word counts only when the assistant did not just say it ("...the bus would not stop"
  heard back must not cut the story), so a listener's "Stop." still cuts at once (after a "stop"
  of its own it is judged as any words are: one word is no repeat). The length limit still holds:
  a long echo is the echo canceller's (``room.py``) to take out.

Whether words take the floor is read by meaning where the backend can
(``Backend.interruption_probability``: the cascade's ``core/cascade/words_meaning.py``, a
classifier on SmolLM2's reading of the words that generalises to phrasings it was not fitted on,
issue 47); otherwise by a word list. The word list is what Whisper heard when the dev set's backchannels (``DEV_BACKCHANNELS`` in
``bench/sets/duplex.py``, spoken by its dev voices) were glanced at, plus their written words:
at 300 ms "yeah" often reads "here", "mm-hmm" reads "and" or "M". ``python -m
bench.fit.overlap_fit`` rebuilds it and chose the numbers below on the dev set only.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from core.conversation.echo_words import repeats

Verdict = Literal["backchannel", "noise", "interruption"]

# Chosen on the dev set, each voice judged with a word list built from the other voices' glances:
# the soonest verdict with at most 5 % of backchannels taken as interruptions (4.5 %, 0 of 100
# interruptions missed, p50 600 ms of voice). Sooner costs backchannels: p50 550 ms at 9 %,
# 400 ms at 12 %, 300 ms at 26 % (``python -m bench.fit.overlap_fit`` prints the trade-off).
GLANCE_FIRST_MS = 500  # voice heard before the first glance
GLANCE_EVERY_MS = 100
CONFIRM = 2  # glances in a row that must hear non-backchannel words
MIN_LETTERS = 4  # letters of non-backchannel words a glance must hear (one "I" or "M" is a guess)
LONGEST_BACKCHANNEL_MS = 1300  # voice this long is an interruption whatever its words
# Silence after a voice over the reply before it is called a backchannel or noise: a pause inside
# one utterance ("Stop, please.", "Okay, stop there.") must not cut it into pieces judged alone
# ("Okay." is a backchannel, the story resumes, and "stop there" stops it again: the listener hears
# a blip of the story, issue 47). Chosen on the dev clips fed through the streaming VAD and counted
# as the settle counts them (from the VAD's pause to the voice being back, ``python -m
# bench.fit.settle``): the longest such pause read as no turn is 340 ms at the dev voices'
# speed; at 85 % of it 400 ms splits 3 of 490 cut-in clips' pauses (360 ms: 8; 300 ms, the first
# choice, measured on the waveform: 16) and no backchannel. Every backchannel pays it before the
# story comes back. An interruption is still called at once.
SETTLE_MS = 400
# With a meaning reader (``core/cascade/words_meaning.py``) a glance's words take the floor at
# this probability. Chosen on dev (``python -m bench.fit.meaning_fit --sweep``, every clip held
# out by phrase and voice, all 1435 clips, glances decoded after ``asr.GLANCE_PROMPT``): with the
# written phrasings counted twice in the head's fit (issue 47, eighth stop), 0.5 takes 130 of 510
# backchannels and misses 39 of 925 floor-takers (0.6: 126 + 45; 0.7: 118 + 54); the head before
# it, 138 + 56 at 0.5.
MEANING_THRESHOLD = 0.5

# Built by bench/fit/overlap_fit.py from the dev set: the dev backchannels' written words and every
# word glances heard in a dev backchannel clip.
BACKCHANNEL_WORDS: frozenset[str] = frozenset({
    '1', '2', 'a', 'about', 'actually', 'ah', 'all', 'alright', 'and', 'art', 'be', 'both', 'c', 'close',
    'cool', 'cora', 'core', 'course', 'court', 'ek', 'eyes', 'floor', 'for', 'forward', 'further', 'g', 'go',
    'going', 'got', 'guarded', 'here', 'him', 'hmm', 'huh', 'i', "i'm", 'ice', 'image', 'in', 'interest',
    'interested', 'interesting', 'is', 'it', 'kill', 'killed', 'know', 'm', 'mm', 'mmmmmm', 'mother', 'nice',
    'no', 'not', 'now', 'of', 'oh', 'ok', 'okay', 'on', 'over', 'q', 'r', 'real', 'really', 'ria', 'right',
    'rough', 's', 'see', 'short', 'should', 'show', 'so', 'sure', 'thank', 'that', 'the', 'to', 'traffic',
    'u', 'uh', 'um', 'unreal', 'warriors', 'well', 'world', 'wow', 'yeah', 'yes', 'you', 'your',
})


# Words that take the floor whatever else is heard (issue 47: a listener who says "No" to a talking
# assistant must never be ignored). Not fitted: negations and the ways people ask a speaker to stop.
STOP_WORDS: frozenset[str] = frozenset({"no", "nope", "not", "never", "stop", "wait", "sorry", "pardon"})
STOP_PHRASES: tuple[tuple[str, str], ...] = (("hold", "on"), ("hang", "on"), ("excuse", "me"))


# A hum ("mm-hmm", "hmm", "mm") has no words for a meaning reader to read: Whisper spells it in
# m's and h's (dev glances: "Mm-mm-mm.", "M.", "M-M-", "Mmmmmmmmmmm"), which SmolLM2's reading can
# take for the start of something. Words made only of those letters never take the floor by
# themselves; a stop word after them still does ("Mm, no."). Only m and h: "Uh" and "Um" begin
# dev cut-ins ("Um, actually..."). On dev, every clip held out by phrase and voice: 3 fewer of 510
# backchannels taken (141 -> 138, the seventh stop's head: ``python -m bench.fit.meaning_fit --sweep
# --written-copies=1``), no more of 925 floor-takers missed; with u too, 132 taken but one cut-in
# missed (issue 47, eighth stop).
# Over the reply's echo the dev voices' "Mm-hmm." was read as a hum beside other words ("And M.",
# "MMs and.", issue 70): the hum still says nothing, but beside "And" the reader took the whole for
# the start of a turn (P 1.00, 0.93; "And" alone 0.05). So the reader reads the words less their
# hums (``without_hums``), a plural "s" included ("MMs", and "M's": dev-b00 read "And M's in.", P 0.98),
# and a hum spelt as letters ("M.M.": dev-b00 read "And M.M." over -10 dB echo, its story lost).
HUM = re.compile(r"[mh]+(?:'?s)?")


def _is_hum(token: str) -> bool:
    """A token whose every word is a hum: "Mm", "M's", "M.M." (a hum spelt as letters)."""
    words = words_of(token)
    return bool(words) and all(HUM.fullmatch(w) is not None for w in words)


def without_hums(text: str) -> str:
    """``text`` less its hums, as written otherwise: "And M." -> "And", "Hmm, what about X?" ->
    "what about X?". What a meaning reader reads."""
    return " ".join(t for t in re.split(r"[\s-]+", text.strip()) if t and not _is_hum(t))


def only_hums(text: str) -> bool:
    """``text`` has words and every one is a hum ("Mm-hmm", "M-M-", "Hmm")."""
    return bool(words_of(text)) and not words_of(without_hums(text))


def says_stop(text: str, said: str = "") -> bool:
    """``text`` holds a negation or asks the speaker to stop, in words of its own: not a stop word
    (or phrase) that the assistant just said (``said``), which is its echo."""
    words, theirs = words_of(text), words_of(said)
    pairs = set(zip(theirs, theirs[1:]))
    return (any(w in STOP_WORDS and w not in theirs for w in words)
            or any(pair in STOP_PHRASES and pair not in pairs for pair in zip(words, words[1:])))


def echoes(text: str, said: str) -> bool:
    """``text`` repeats ``said``, the assistant's words the listener heard lately: its echo."""
    return repeats(words_of(text), words_of(said))


def words_of(text: str) -> list[str]:
    """Lower-case words; "Mm-hmm" -> ["mm", "hmm"], "All right." -> ["all", "right"]."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))


def unexpected_letters(text: str, known: frozenset[str] = BACKCHANNEL_WORDS) -> int:
    """How many letters of ``text`` are in words no backchannel was heard as."""
    return sum(len(w) for w in words_of(text) if w not in known)


def takes_the_floor(words: str, interruption: float | None) -> bool:
    """The words read as an interruption: by their meaning's probability when there is one, else
    by letters outside ``BACKCHANNEL_WORDS`` (a backend without a meaning reader). A hum never does."""
    if not words_of(words) or only_hums(words):
        return False
    if interruption is not None:
        return interruption >= MEANING_THRESHOLD
    return unexpected_letters(words) >= MIN_LETTERS


def verdict_of(words: str, interruption: float | None = None, said: str = "") -> Verdict:
    """What a whole clip's words make of the voice; ``said``: the assistant's words heard lately."""
    if not words_of(words):
        return "noise"
    if says_stop(words, said):
        return "interruption"
    if echoes(words, said):
        return "noise"
    if takes_the_floor(words, interruption):
        return "interruption"
    return "backchannel"


def _p(interruption: float | None) -> str:
    return "" if interruption is None else f", P(interruption) {interruption:.2f}"


@dataclass(frozen=True, slots=True)
class Glance:
    """What a glance read: the words (None: no fast recogniser), when the backend reads meaning
    how likely they take the floor, and the assistant's words it was read against (``said``)."""

    words: str | None
    interruption: float | None = None
    said: str = ""


@dataclass(slots=True)
class Overlap:
    """A voice that began while the listener heard the assistant, until it is judged."""

    speech_item: str  # the user item it becomes if it is an interruption
    onset_ms: int  # input-stream offset of the voice's onset (the VAD's start)
    heard_item: str | None  # the assistant item being heard
    seen_at: float  # monotonic time the VAD reported the voice
    glances: int = 0  # made so far
    looking: bool = False  # a glance is running
    blind: bool = False  # the backend has no fast recogniser: the voice's length alone decides
    paused: bool = False  # the voice is in a pause (the VAD's) right now
    pauses: int = 0  # pauses so far (a judgement waiting out one is stale once another began)
    yielded: bool = False  # the reply stopped at the onset (``yield_at_onset``): speech_started was sent
    # Its onset came while the echo canceller was learning (``room.py``): it may be the echo's
    # residue, whose glances Whisper reads as words ("T clip.", "Take it."); only a stop word or
    # its length takes the floor then.
    unsure: bool = False
    ending: bool = False  # the VAD ended the voice before a verdict: its words are being read
    pause_reading: tuple[int, Awaitable[Any]] | None = None  # (pause, its glance): what the voice's end reads
    in_a_row: int = 0  # glances in a row that heard non-backchannel words
    words: str = ""  # the last glance's words
    verdict: Verdict | None = None
    decided_after_ms: int | None = None  # voice heard when the verdict came
    reasons: list[str] = field(default_factory=list)

    @property
    def next_glance_ms(self) -> int:
        return GLANCE_FIRST_MS + self.glances * GLANCE_EVERY_MS

    def glanced(self, words: str, voice_ms: int, interruption: float | None = None,
                said: str = "") -> Verdict | None:
        """A glance at the voice so far (``voice_ms`` of it), with the words' probability of taking
        the floor when the backend reads meaning (``Backend.interruption_probability``) and the
        assistant's words heard lately (``said``): the verdict when it settles one. An echo of
        ``said`` reads as no words."""
        self.words = words
        if says_stop(words, said):
            return self.decide("interruption", voice_ms, f"stop words {words!r}")
        floor = takes_the_floor(words, interruption) and not echoes(words, said) and not self.unsure
        self.in_a_row = self.in_a_row + 1 if floor else 0
        if self.in_a_row >= CONFIRM:
            return self.decide("interruption", voice_ms, f"words {words!r}{_p(interruption)}")
        return None

    def lasted(self, voice_ms: int) -> Verdict | None:
        """The voice has gone on ``voice_ms``: too long for a backchannel?"""
        if voice_ms >= LONGEST_BACKCHANNEL_MS:
            return self.decide("interruption", voice_ms, f"{voice_ms} ms of voice")
        return None

    def ended(self, words: str, voice_ms: int, interruption: float | None = None, said: str = "") -> Verdict:
        """The voice paused after ``voice_ms``; ``words``: the whole clip's."""
        self.words = words
        verdict = self.reading(words, interruption, said)
        return self.decide(verdict, voice_ms, self._why(verdict, words, interruption, said))

    def _why(self, verdict: Verdict, words: str, interruption: float | None, said: str) -> str:
        """What the log says a whole clip's reading was decided by."""
        if verdict != "noise":
            return f"words {words!r}{_p(interruption)}"
        if not words_of(words):
            return "no words"
        if echoes(words, said):
            return f"its own words heard back {words!r}"
        return f"words {words!r} over a learning canceller, no stop word"

    def reading(self, words: str, interruption: float | None = None, said: str = "") -> Verdict:
        """``verdict_of`` the words, for this voice (``unsure``: only a stop word takes the floor)."""
        verdict = verdict_of(words, interruption, said)
        if self.unsure and verdict == "interruption" and not says_stop(words, said):
            return "noise"
        return verdict

    def decide(self, verdict: Verdict, voice_ms: int, why: str) -> Verdict:
        if self.verdict is None:
            self.verdict, self.decided_after_ms = verdict, voice_ms
            self.reasons.append(why)
        return self.verdict
