"""Where a semantic_vad turn's compute goes, stage by stage, in process (issue 47, dev only).

    python -m bench.fit.turn_stages      # ~30 s after the models load

The cascade's own calls on the first dev complete turns of ``bench/sets/duplex.py`` (the first dev
voice, 100 ms of silence after each): Whisper's transcript of the turn, the language model's
end-of-message pass on its words, and Piper on a three-word first piece. Prints each turn and the
medians: the work between the voice's end and the first audio that semantic_vad cannot hide in a
hangover, as server_vad does.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from bench.sets.duplex import DEV_COMPLETE, DEV_VOICES
from core.processors.cascade import CascadeBackend
from devtools.espeak import espeak

FIRST_PIECES = ("The capital of", "Sure, here is", "A paper plane")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def main(turns: int = 8) -> None:
    backend = CascadeBackend()
    backend.load()
    voice, speed, pitch = DEV_VOICES[0]
    heard, scored = [], []
    for text in DEV_COMPLETE[:turns]:
        pcm = espeak(text, voice, speed, pitch, rate=16000).astype(np.float32) / 32768
        pcm = np.concatenate([pcm, np.zeros(1600, np.float32)])
        backend.asr.transcribe(pcm)  # the second call is timed: the first warms this length's window
        t0 = time.perf_counter()
        words = backend.asr.transcribe(pcm).text
        heard.append(_ms(t0))
        t0 = time.perf_counter()
        backend.end_of_message_probability(words)
        scored.append(_ms(t0))
        print(f"{pcm.size // 16} ms {words!r}: transcript {heard[-1]:.0f} ms, end of message {scored[-1]:.0f} ms")
    spoken = []
    for piece in FIRST_PIECES:
        for _ in range(3):
            t0 = time.perf_counter()
            for _pcm in backend.tts.synthesize(piece, 1.0):
                pass
            spoken.append(_ms(t0))
    backend.close()
    print(f"p50: transcript {statistics.median(heard):.0f} ms, end of message {statistics.median(scored):.0f} ms, "
          f"three-word first piece {statistics.median(spoken):.0f} ms")


if __name__ == "__main__":
    main()
