"""How many threads the cascade's model stages run on (issue 47)."""

from __future__ import annotations

import os


def live_stage_threads(live_threads: int | None, threads: int) -> int:
    """Threads for Whisper, and for SmolLM2 while a session listens: ``live_threads`` when set,
    else one on a machine of two CPUs or fewer, else ``threads``.

    On two cores the stages share them with each other, the meaning reader, the VAD and the
    server's loop, and a two-thread team waits at every operator for whichever of its threads was
    preempted: a turn's last words took SmolLM2 150-220 ms to prefill in a live dev run, against
    ~90 ms alone. With one thread each, semantic_vad answered the dev complete turns in 534 ms p50
    against 583 ms at two (3 runs each, ``python -m bench duplex --set dev --kinds complete --modes
    server_vad semantic_vad --runs 3``). Whisper is one model for sessions and REST
    transcriptions; at one thread an 11 s clip took no longer (0.36-0.45 s against 0.44-0.55 s).
    A REST chat completion keeps ``threads``: alone, a 1190-token prompt's first token came after
    ~2.8 s at two threads and ~5.2 s at one."""
    if live_threads is not None:
        return live_threads
    return 1 if available_cpus() <= 2 else threads


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
