"""What the room costs a session (issue 70): the worker's echo canceller and noise suppressor
(``core/conversation/room.py``), in % of one core per session, as ``python -m bench calls --parts room``.

The session's input path is run as the worker runs it, in 40 ms chunks at 16 kHz with their
arrival times, against a reply the listener plays (the pipeline's Piper voice, sent in 200 ms
pieces ahead of its play head): a microphone that hears the reply 10 dB down 120 ms later with a
listener's voice over it, and a clean one (a headset). The thread's CPU time over the audio's
length is the cost; each setting is timed side by side in every run (``--seconds`` of audio each),
and the median of ``--runs`` is reported with the spread. The 16 kHz resampling and the VAD are
the input path's with or without the room, and not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.stats import goal_mark, median_spread

RATE = 16000
CHUNK = RATE * 40 // 1000
T0 = 1000.0
GOAL_PCT = 3.0  # per session, echo cancellation and noise suppression together
SETTINGS = {  # name -> (echo cancellation, noise suppression)
    "echo_cancellation": (True, False),
    "noise_reduction": (False, True),
    "both": (True, True),
}
STORY = ("The lighthouse keeper climbed the long stairs every evening to light the lamp, and every morning he "
         "wrote about the ships he had seen. In winter the sea was grey and loud, and the gulls slept on the "
         "rocks below his window, while the boats stayed home in the harbour and the nets dried on the wall.")


def _voices() -> tuple[np.ndarray, np.ndarray]:
    from core.audio import resample
    from core.cascade.tts import PiperTts

    tts = PiperTts()
    reply24 = np.frombuffer(b"".join(tts.synthesize(STORY, deterministic=True)), "<i2").astype(np.float32) / 32768
    listener = np.frombuffer(b"".join(tts.synthesize("Wait, say that again please.", deterministic=True)),
                             "<i2").astype(np.float32) / 32768
    return reply24, resample(listener, 24000, RATE)


def _microphone(reply24: np.ndarray, listener: np.ndarray, seconds: float, echo: bool) -> np.ndarray:
    from core.audio import resample

    rng = np.random.default_rng(0)
    mic = (rng.standard_normal(int(seconds * RATE)) * 10 ** (-55 / 20)).astype(np.float32)
    if echo:
        reply16 = np.resize(resample(reply24, 24000, RATE), mic.size) * 10 ** (-10 / 20)
        d = RATE * 120 // 1000
        mic[d:] += reply16[: mic.size - d]
    for at in np.arange(2.0, seconds - 1.5, 4.0):  # the listener speaks every 4 s
        i = int(at * RATE)
        n = min(listener.size, mic.size - i)
        mic[i:i + n] += listener[:n] * 0.5
    return mic


def _cost(setting: tuple[bool, bool], reply24: np.ndarray, mic: np.ndarray) -> float:
    from core.conversation.played_audio import PlayedAudio
    from core.conversation.room import RoomFilter

    played = PlayedAudio()
    room = RoomFilter(played if setting[0] else None, setting[1])
    step = 24000 // 5
    reply = np.resize(reply24, int(mic.size / RATE * 24000))
    pieces = [(k * 0.2, (reply[i:i + step] * 32767).astype("<i2").tobytes())
              for k, i in enumerate(range(0, reply.size, step))]
    sent = 0
    cpu = 0.0
    for i in range(0, mic.size, CHUNK):
        now = T0 + (i + CHUNK) / RATE
        while sent < len(pieces) and T0 + pieces[sent][0] <= now + 1.0:  # the reply runs 1 s ahead
            played.add(pieces[sent][1], T0 + pieces[sent][0])
            sent += 1
        chunk = mic[i:i + CHUNK]
        t = time.thread_time()
        room.process(chunk, now)
        cpu += time.thread_time() - t
    return 100.0 * cpu / (mic.size / RATE)


def part_room(seconds: float, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    reply24, listener = _voices()
    mics = {"echo": _microphone(reply24, listener, seconds, True), "clean": _microphone(reply24, listener, seconds, False)}
    per_run: list[dict[str, float]] = []
    for run in range(runs):
        row = {f"{name}/{mic}": round(_cost(setting, reply24, audio), 3)
               for name, setting in SETTINGS.items() for mic, audio in mics.items()}
        per_run.append(row)
        log(f"room run {run + 1}: " + ", ".join(f"{k} {v:.2f} %" for k, v in row.items()))
    median = {k: median_spread([r[k] for r in per_run]) for k in per_run[0]}
    worst = max(median[f"both/{m}"]["median"] for m in mics)
    for k, v in median.items():
        log(f"room {k:28s} {v['text']} % of a core per session")
    return {"seconds": seconds, "runs": per_run, "median": median, "worst_pct": worst,
            "mark": goal_mark(worst, GOAL_PCT, f"echo cancellation + noise suppression <= {GOAL_PCT:g} % of a core")}
