"""How long the overlap judge waits out a pause in a voice over the reply before calling it a
backchannel or noise (``overlap.SETTLE_MS``), and whether words that trail off should wait longer.

    python -m bench.fit.settle    # ~25 min the first time (glances cached in data/settle_glances.json), then ~1 min

A voice over the reply that pauses for the settle is judged on its clip so far. A pause inside one
utterance that outlasts it splits the utterance: "Okay." alone reads as a backchannel, the story
resumes, and "stop there" stops it again (issue 47). ``python -m bench.fit.pauses`` measures the
pauses on the waveform (at most 290 ms at the dev voices' speed); the settle counts from the VAD's
pause report until the voice is loud again for ``LOUD_MS``, which is longer. Each dev clip
(espeak-ng at each dev voice's speed and at 85 % and 70 % of it) goes through the streaming VAD in
20 ms pieces as the bench's microphone sends it; at each VAD pause the clip so far is glanced (the
cascade's Whisper, the shipped glance prompt) and read (the shipped meaning head) as the judge
reads it. Printed per speed and kind, for each candidate rule (a settle, and a longer one when the
words trail off or do not end a sentence): the inner pauses read as no turn that outlast it (the
voice split), and the last pauses whose words would wait the longer settle (every backchannel waits
the settle before the story comes back; these wait longer).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.fit.fragments import streamed
from bench.sets.duplex import DEV_BACKCHANNELS, DEV_CUTINS, DEV_VOICES
from bench.sets.overlap_phrasings import DEV_MORE_BACKCHANNELS, DEV_MORE_CUTINS
from core.conversation import overlap as ov
from core.conversation.end_of_turn import trails_off
from core.conversation.vad import LOUD_MS, RATE, SileroModel
from devtools.espeak import espeak

CACHE = Path(__file__).resolve().parents[2] / "data" / "settle_glances.json"
SPEEDS = (1.0, 0.85, 0.7)


def pauses_in(model: SileroModel, pcm: np.ndarray) -> list[tuple[np.ndarray, int | None]]:
    """Each VAD pause of one spoken clip: (the clip from the onset to the pause's report, how long
    the silence lasted before the voice came back, as the judge's settle counts it; None at the
    last pause, after which the voice is over)."""
    audio, events = streamed(model, pcm)
    onset: int | None = None
    found: list[tuple[np.ndarray, int | None]] = []
    paused_at: int | None = None
    for ev, now in events:
        if ev.kind == "start" and onset is None:
            onset = ev.ms
        elif ev.kind == "pause" and onset is not None:
            paused_at = ev.ms
            found.append((audio[onset * RATE // 1000:now * RATE // 1000], None))
        elif ev.kind == "resume" and paused_at is not None:
            # the settle stops once the voice is loud again for LOUD_MS
            found[-1] = (found[-1][0], ev.ms + LOUD_MS - paused_at)
            paused_at = None
        elif ev.kind == "end":
            break
    return found


def ends_no_sentence(words: str) -> bool:
    return trails_off(words) or not words.strip().endswith((".", "!", "?"))


TRAILING = 'the words trail off ("...", ",", a dash)'
OPEN = 'the words end no sentence (no ".", "!", "?"; or "...")'
# (settle, the longer settle, when the longer one applies, its rule); None: one settle for all
RULES = [(300, 300, None, None), (340, 340, None, None), (360, 360, None, None), (400, 400, None, None),
         (300, 500, TRAILING, trails_off), (300, 600, TRAILING, trails_off),
         (300, 500, OPEN, ends_no_sentence), (300, 600, OPEN, ends_no_sentence),
         (360, 500, OPEN, ends_no_sentence), (360, 600, OPEN, ends_no_sentence)]


def main() -> None:
    from core.cascade.asr import WhisperAsr
    from core.cascade.llm import converted_model
    from core.cascade.words_meaning import WordsReader, overlap_head

    model, asr = SileroModel(), WhisperAsr()
    head = overlap_head(WordsReader(converted_model()), Path("data/models"))
    cache: dict[str, list] = json.loads(CACHE.read_text()) if CACHE.exists() else {}

    def readings(text: str, voice: str, speed: int, pitch: int) -> list:
        """Each pause's (words, P(interruption), silence) for one clip, glanced once across runs."""
        key = f"{text}|{voice}|{speed}|{pitch}"
        if key not in cache:
            found = []
            for clip, silence in pauses_in(model, espeak(text, voice, speed, pitch, rate=RATE)):
                words = asr.glance(clip)
                found.append((words, head.probability(words) if ov.words_of(words) else None, silence))
            cache[key] = found
        return cache[key]

    kinds = {"backchannel": DEV_BACKCHANNELS + DEV_MORE_BACKCHANNELS, "cut-in": DEV_CUTINS + DEV_MORE_CUTINS}
    for factor in SPEEDS:
        for kind, texts in kinds.items():
            inner: list[tuple[int, str, str]] = []  # (silence, words, clip) of inner pauses read as no turn
            last: list[str] = []  # the words of last pauses read as no turn (the wait a backchannel costs)
            for text in texts:
                for voice, speed, pitch in DEV_VOICES:
                    for words, p, silence in readings(text, voice, round(speed * factor), pitch):
                        if ov.verdict_of(words, p) == "interruption":
                            continue
                        if silence is None:
                            last.append(words)
                        else:
                            inner.append((silence, words, f"{text!r} ({voice})"))
            print(f"speed x{factor} {kind}: {len(texts) * len(DEV_VOICES)} clips; {len(inner)} inner pauses and "
                  f"{len(last)} last pauses read as no turn")
            for settle, longer, label, rule in RULES:
                longer_for = rule or (lambda words: False)
                split = sum(silence >= (longer if longer_for(words) else settle) for silence, words, _ in inner)
                waits = sum(longer_for(words) for words in last)
                when = f", {longer} ms when {label}" if label else ""
                print(f"    settle {settle} ms{when}: {split} inner pauses split the voice; {waits} last readings "
                      f"wait {longer} ms")
            for silence, words, clip in sorted(inner, reverse=True)[:6]:
                print(f"      {clip} -> {words!r} then {silence} ms")
    CACHE.parent.mkdir(exist_ok=True)
    CACHE.write_text(json.dumps(cache))


if __name__ == "__main__":
    main()
