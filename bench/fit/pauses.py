"""The longest pause inside one utterance in the dev clips, on the waveform: how long the overlap
judge waits after a voice over the reply before calling it a backchannel or noise
(``overlap.SETTLE_MS`` was first chosen from it).

    python -m bench.fit.pauses      # ~20 s: every dev backchannel, cut-in and interruption in every dev voice

Each clip is spoken by espeak-ng; its 10 ms frames below 5 % of its loudest frame's level are
quiet, and the runs of 40 ms or more of quiet between its first and last loud frame are its
pauses (shorter ones the VAD does not report). Printed per kind: p50, p90 and the longest. The
settle counts longer pauses than the waveform shows (from the VAD's report until the voice is
back): ``python -m bench.fit.settle`` chose it (issue 47, thirteenth stop).
"""

from __future__ import annotations

import numpy as np

from bench.sets.duplex import DEV_BACKCHANNELS, DEV_CUTINS, DEV_INTERRUPTIONS, DEV_VOICES
from devtools.espeak import espeak

FRAME = 160  # 10 ms at 16 kHz
SHORTEST_MS = 40  # the VAD's earliest pause (``vad.QUIET_MS``)


def pauses_ms(pcm: np.ndarray) -> list[int]:
    frames = pcm[: pcm.size // FRAME * FRAME].reshape(-1, FRAME).astype(np.float32)
    level = np.sqrt((frames ** 2).mean(1))
    loud = np.nonzero(level > 0.05 * level.max())[0]
    if not loud.size:
        return []
    gaps = np.diff(loud) - 1  # quiet frames between loud ones
    return [int(g) * 10 for g in gaps if g * 10 >= SHORTEST_MS]


def main() -> None:
    kinds = {"backchannel": DEV_BACKCHANNELS, "cutin": DEV_CUTINS, "interruption": [t for t, _ in DEV_INTERRUPTIONS]}
    for kind, texts in kinds.items():
        found = sorted((ms, text) for text in texts for voice, speed, pitch in DEV_VOICES
                       for ms in pauses_ms(espeak(text, voice, speed, pitch, rate=16000)))
        ms = [m for m, _ in found]
        print(f"{kind}: {len(ms)} pauses; p50 {np.percentile(ms, 50):.0f} ms, p90 {np.percentile(ms, 90):.0f} ms, "
              f"longest {ms[-1]} ms ({found[-1][1]!r})")


if __name__ == "__main__":
    main()
