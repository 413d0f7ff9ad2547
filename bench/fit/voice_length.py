"""How long the overlap judge thinks a voice over the reply lasted when it checks the length rule
(``overlap.LONGEST_BACKCHANNEL_MS``), against the voice itself: does the VAD's lag at the end of a
backchannel count as voice?

    python -m bench.fit.voice_length    # ~1 min: every dev backchannel and cut-in in every dev voice

Each clip (espeak-ng, 16 kHz) is fed to the streaming VAD in 20 ms pieces after a second of
silence, then 1 s of silence; after each piece, until the VAD's first pause, the judge's two
measures are taken: the stream's time since the onset (what it used before issue 47's fourth stop)
and the end of the voice the VAD has seen (``StreamingVad.last_voiced_end_samples``). Printed per
kind: the clips each measure calls too long for a backchannel, and the voice's own length.
"""

from __future__ import annotations

import numpy as np

from bench.sets.duplex import DEV_BACKCHANNELS, DEV_CUTINS, DEV_VOICES
from bench.sets.overlap_phrasings import DEV_MORE_BACKCHANNELS, DEV_MORE_CUTINS
from core.conversation.overlap import LONGEST_BACKCHANNEL_MS
from core.conversation.vad import RATE, SileroModel, StreamingVad
from devtools.espeak import espeak

PIECE = RATE // 50  # 20 ms, as clients send


def longest_seen(model: SileroModel, pcm: np.ndarray) -> tuple[int, int]:
    """The largest (stream time - onset) and (voiced end - onset) before the first pause, in ms."""
    audio = np.concatenate([np.zeros(RATE, np.float32), pcm.astype(np.float32) / 32768, np.zeros(RATE, np.float32)])
    vad = StreamingVad(model)
    onset = None
    by_stream = by_voice = 0
    for at in range(0, audio.size - PIECE + 1, PIECE):
        for ev in vad.process(audio[at:at + PIECE]):
            if ev.kind == "start":
                onset = ev.ms
            elif ev.kind in ("pause", "end") and onset is not None:
                return by_stream, by_voice
        if onset is not None:
            now = (at + PIECE) * 1000 // RATE
            by_stream = max(by_stream, now - onset)
            by_voice = max(by_voice, vad.last_voiced_end_samples * 1000 // RATE - onset)
    return by_stream, by_voice


def main() -> None:
    model = SileroModel()
    kinds = {"backchannel": DEV_BACKCHANNELS + DEV_MORE_BACKCHANNELS, "cut-in": DEV_CUTINS + DEV_MORE_CUTINS}
    for kind, texts in kinds.items():
        rows = []
        for text in texts:
            for voice, speed, pitch in DEV_VOICES:
                pcm = espeak(text, voice, speed, pitch, rate=RATE)
                rows.append((*longest_seen(model, pcm), pcm.size * 1000 // RATE, text))
        over_stream = [r for r in rows if r[0] >= LONGEST_BACKCHANNEL_MS]
        over_voice = [r for r in rows if r[1] >= LONGEST_BACKCHANNEL_MS]
        lag = [r[0] - r[1] for r in rows]
        print(f"{kind}: {len(rows)} clips; over {LONGEST_BACKCHANNEL_MS} ms before the first pause: "
              f"by stream time {len(over_stream)}, by the voiced end {len(over_voice)}; "
              f"stream minus voiced end p50 {np.percentile(lag, 50):.0f} ms, p90 {np.percentile(lag, 90):.0f} ms; "
              f"voice at the first pause p50 {np.percentile([r[1] for r in rows], 50):.0f} ms, "
              f"longest {max(r[1] for r in rows)} ms")
        for s, v, n, text in sorted(over_stream, reverse=True)[:12]:
            print(f"    {text!r}: stream {s} ms, voiced end {v} ms, clip {n} ms")


if __name__ == "__main__":
    main()
