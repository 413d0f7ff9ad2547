"""The assistant's own words heard back: what the listener heard lately, and whether words repeat it.

A microphone that also hears the loudspeaker sends the reply back: the VAD hears a voice over the
reply and a glance reads the assistant's own words, and the echo of its own "no" or "stop" cuts
it (issue 70). The echo canceller (``room.py``) is the first guard; this is the second: the
overlap judge (``overlap.py``) takes words that repeat what the listener heard in the last moments
for echo, not a voice.

When a word was heard: a reply's audio comes in pieces whose text is known (``Segment``: the
cascade's chunker pieces, one TTS call each) and the play head (``PlaybackClock``) says how much
of the audio was heard; a piece's words are spread evenly over its audio, as truncation reads
them (``heard_text``). Text deltas are not placed by when they were sent: the cascade's LLM writes
seconds ahead of its voice, and an audio chunk does not say which piece it belongs to.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.audio import OUTPUT_RATE
from core.conversation.playback import PlaybackClock
from core.conversation.reply import Segment, heard_text

# How far before a clip its echo can have been played, beyond the clip itself: the play head
# calls audio heard when it is due to play, and the listener's player (its jitter buffer and
# output device), the room, the microphone's capture buffer and the way back delay its echo by a
# few hundred ms more; a word's place inside its piece is an even share of the piece's audio
# (a word or two off, ~0.3 s). Not fitted: a reasoned margin. With a clip of the voice so far
# the window is ~1.7 s at the first glance (500 ms of voice) and ~2.5 s at the length limit.
ECHO_DELAY_MS = 1000
# An echo repeats at least this many of the assistant's words, in its order: one word in common
# is what a listener repeating a word says ("Paris?"), and proves nothing.
MIN_MATCHED = 2

# Words too common for a match of them to mean a repeat ("I want to do that" against "you want
# to see that"), and fillers: only the other words are matched. Negations are not here: "would
# not stop" repeats "not" and "stop".
COMMON_WORDS: frozenset[str] = frozenset({
    "a", "an", "the", "and", "or", "but", "so", "if", "then", "to", "of", "in", "on", "at", "for", "with",
    "by", "from", "as", "is", "are", "was", "were", "be", "been", "am", "it", "its", "it's", "i", "i'm",
    "you", "we", "they", "he", "she", "me", "my", "your", "our", "their", "his", "her", "this", "that",
    "do", "did", "does", "have", "has", "had", "will", "would", "can", "could", "just",
    "uh", "um", "mm", "hmm", "oh", "ah",
})


def heard_lately(segments: list[Segment], full_text: str, heard: int, window: int) -> str:
    """The words of a reply heard in the ``window`` samples of its audio up to ``heard`` (24 kHz):
    a word whose share of its piece began before the window counts (the window reaches back)."""
    upto = heard_text(segments, heard, full_text).split()
    before = heard_text(segments, max(0, heard - window), full_text).split()
    return " ".join(upto[len(before):])


def in_order(words: Sequence[str], said: Sequence[str]) -> int:
    """How many of ``words`` are found in ``said`` in the same order (the longest common subsequence)."""
    row = [0] * (len(said) + 1)  # row[j]: matched between the words so far and said[:j]
    for w in words:
        diagonal = 0  # the previous row's row[j - 1]
        for j, s in enumerate(said, 1):
            above = row[j]
            row[j] = diagonal + 1 if w == s else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def repeats(words: Sequence[str], said: Sequence[str]) -> bool:
    """``words`` (normalised, a glance's) repeat ``said`` (the assistant's, heard lately): at least
    ``MIN_MATCHED`` of their uncommon words, and most of them, in the order said. Most, not all:
    Whisper mishears some of a faint echo and the words cut at the clip's edges."""
    mine = [w for w in words if w not in COMMON_WORDS]
    matched = in_order(mine, [w for w in said if w not in COMMON_WORDS])
    return matched >= MIN_MATCHED and 2 * matched > len(mine)


class EchoWords:
    """What the listener heard the assistant say lately, from the replies' pieces and the play head."""

    def __init__(self, clock: PlaybackClock, replies) -> None:
        self.clock = clock
        self.replies = replies  # ``Replies``: the pieces of the reply being heard

    def said_within(self, clip_ms: int) -> str:
        """The assistant's words heard in the last ``clip_ms + ECHO_DELAY_MS``: all that the echo
        in a clip that long can repeat. Only the item being heard: one that ended before it is
        not looked at ('' when nothing is known of it)."""
        item, heard = self.clock.item_id, self.clock.heard_samples()
        if item is None or heard is None:
            return ""
        pieces = self._pieces(item)
        if pieces is None:
            return ""
        window = (clip_ms + ECHO_DELAY_MS) * OUTPUT_RATE // 1000
        return heard_lately(*pieces, heard, window)

    def _pieces(self, item_id: str) -> tuple[list[Segment], str] | None:
        for resp in (self.replies.current, self.replies.last_spoken):
            if resp is not None and resp.item_id == item_id:
                return resp.segments, resp.text
        segments = self.replies.segments(item_id)
        return None if segments is None else (segments, "")
