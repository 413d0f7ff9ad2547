"""Fragments: what the overlap judge reads when a voice over the reply pauses before its first glance.

    python -m bench.fit.fragments    # ~3 min: every dev backchannel and cut-in in every dev voice

A voice over the reply is glanced at from ``overlap.GLANCE_FIRST_MS`` on (shorter audio is misheard
too often), but a pause inside a word or after a first word ("Got|cha.", "Oh, | I see.") used to
have its clip read at once, and a reading that took the floor cut the reply for good. Each dev
clip (espeak-ng, 16 kHz) goes through the streaming VAD in 20 ms pieces; at its first pause before
``GLANCE_FIRST_MS`` of voice the clip so far is glanced (the cascade's Whisper) and read (the
shipped meaning head, ``core/cascade/words_meaning.py``) as the judge reads it. Printed per kind:
the clips with such a pause, those whose fragment reads as taking the floor, and of those the
ones whose voice comes back (the judge now waits ``SETTLE_MS`` and reads the longer clip) and the
ones that stay short (now called ``SETTLE_MS`` later, with the same words). The head's examples
hold these phrases whole, not their fragments.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.sets.duplex import DEV_BACKCHANNELS, DEV_CUTINS, DEV_VOICES
from bench.sets.overlap_phrasings import DEV_MORE_BACKCHANNELS, DEV_MORE_CUTINS
from core.conversation import overlap as ov
from core.conversation.vad import RATE, SileroModel, StreamingVad, VadEvent
from devtools.espeak import espeak

PIECE = RATE // 50  # 20 ms, as clients send


def streamed(model: SileroModel, pcm: np.ndarray) -> tuple[np.ndarray, Iterator[tuple[VadEvent, int]]]:
    """A spoken clip (int16) as the bench's microphone sends it, 1 s of silence either side in 20 ms
    pieces, through a fresh streaming VAD: the padded audio and each event with the stream's time
    (ms) when it was reported."""
    audio = np.concatenate([np.zeros(RATE, np.float32), pcm.astype(np.float32) / 32768, np.zeros(RATE, np.float32)])
    vad = StreamingVad(model)

    def events() -> Iterator[tuple[VadEvent, int]]:
        for at in range(0, audio.size - PIECE + 1, PIECE):
            for ev in vad.process(audio[at:at + PIECE]):
                yield ev, (at + PIECE) * 1000 // RATE

    return audio, events()


def first_fragment(model: SileroModel, pcm: np.ndarray) -> tuple[int, np.ndarray, bool] | None:
    """The first pause before the first glance: (voice ms, the clip so far, whether the voice came
    back within ``SETTLE_MS``), or None."""
    audio, events = streamed(model, pcm)
    onset = found = None
    for ev, now in events:
        if ev.kind == "start":
            onset = ev.ms
        elif ev.kind == "pause" and onset is not None and found is None and ev.ms - onset < ov.GLANCE_FIRST_MS:
            found = (ev.ms - onset, audio[onset * RATE // 1000:now * RATE // 1000], ev.ms)
        elif ev.kind == "resume" and found is not None:
            return found[0], found[1], ev.ms - found[2] < ov.SETTLE_MS
        elif ev.kind == "end":
            return None if found is None else (found[0], found[1], False)
    return None


def main() -> None:
    from core.cascade.asr import WhisperAsr
    from core.cascade.llm import converted_model
    from core.cascade.words_meaning import WordsReader, overlap_head

    model, asr = SileroModel(), WhisperAsr()
    models = Path("data/models")
    head = overlap_head(WordsReader(converted_model()), models)
    kinds = {"backchannel": DEV_BACKCHANNELS + DEV_MORE_BACKCHANNELS, "cut-in": DEV_CUTINS + DEV_MORE_CUTINS}
    for kind, texts in kinds.items():
        clips = floor = back = short = 0
        seen = []
        for text in texts:
            for voice, speed, pitch in DEV_VOICES:
                got = first_fragment(model, espeak(text, voice, speed, pitch, rate=RATE))
                if got is None:
                    continue
                clips += 1
                ms, clip, came_back = got
                words = asr.glance(clip)
                p = head.probability(words) if ov.words_of(words) else None
                if ov.says_stop(words) or ov.verdict_of(words, p) != "interruption":
                    continue
                floor += 1
                back += came_back
                short += not came_back
                seen.append(f"{text!r} -> {words!r} ({p:.2f}) at {ms} ms{', came back' if came_back else ''}")
        print(f"{kind}: {clips} clips pause before {ov.GLANCE_FIRST_MS} ms of voice; the fragment (no stop word) "
              f"reads as taking the floor in {floor}: the voice comes back in {back}, stays short in {short}")
        for line in seen[:12]:
            print("   ", line)


if __name__ == "__main__":
    main()
