"""``bench duplex --room``'s figures read from one trial (``room_trials.py`` says what each means):
the stops and what the listener heard of the story, of a cut-in's answer, and until when."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.duplex.client import Player, Trial
from bench.duplex.common import STORY_BACK_S
from bench.duplex.room import dbfs, loudspeaker, rms
from bench.duplex_set import RATE

WINDOW_S = 20.0  # a story's window, from its first audio
EDGE_S = 0.02  # a stop this close before a gap began made it
# A cut-in taken is followed into its answer: the answer is heard this long from its first audio
# (or to its end, played out), and any stop in it is a self-interruption (the user said nothing
# more). An answer that heard its own first words as a turn stopped itself here (issue 70's SDK drive).
ANSWER_WINDOW_S = 6.0


def stop_figures(tr: Trial, stops: list[dict[str, Any]], start: float, end: float,
                 origin: float | None = None) -> dict[str, Any]:
    """The stops in [start, end), timed from ``origin`` (default ``start``): each with whether it
    came back (a resumed response created after it first sounded within ``STORY_BACK_S`` of the
    next ``speech_stopped``, or of the stop where none came)."""
    stopped_at = sorted(t for t, k in tr.events if k == "input_audio_buffer.speech_stopped")
    out = []
    for s in stops:
        if not start <= s["at"] < end:
            continue
        voice_end = next((t for t in stopped_at if t >= s["at"]), s["at"])
        back = [tr.first_audio[rid] for rid in tr.resumed
                if rid in tr.first_audio and tr.created.get(rid, -1) >= s["at"]]
        came_back = bool(back) and min(back) <= voice_end + STORY_BACK_S
        out.append({"at_ms": round((s["at"] - (start if origin is None else origin)) * 1000), "why": s["why"],
                    "came_back": came_back})
    return {"stops": out, "self_interruptions": len(out), "came_back": sum(s["came_back"] for s in out)}


def story_figures(tr: Trial, stops: list[dict[str, Any]], story: str, start: float,
                  window_s: float = WINDOW_S) -> dict[str, Any]:
    """What the listener heard of the story in [start, start + window_s) from the player (clears
    applied): the story is its response and the responses resuming one. ``played_s``; the gaps,
    each split at its first stop (``RoomTrial.real_stops``): before it a stall (``underrun_s``: the
    server had not produced audio yet), from it on ``stopped_s``. A gap with no stop in it is a stall
    when the story plays again after it; the gap that ends the window is ``stopped_s`` when a stop
    came before it (the story never came back, or came back short), ``ended_s`` when the story had
    completed and played out, else a stall. ``share`` = played over the window less stalls and the
    end."""
    end = start + window_s
    mine = {story} | set(tr.resumed)
    spans = sorted((max(s, start), min(e, end)) for _, r, s, e in tr.player.segments
                   if r in mine and min(e, end) > max(s, start))
    merged: list[list[float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    played = sum(e - s for s, e in merged)
    gaps, at = [], start
    for s, e in merged:
        if s > at:
            gaps.append((at, s))
        at = e
    if at < end:
        gaps.append((at, end))
    stop_times = sorted(s["at"] for s in stops)
    last = max(mine & set(tr.created), key=lambda r: tr.created[r], default=story)
    completed = last in tr.done and tr.done[last][1] == "completed"
    heard_until = max((e for _, r, s, e in tr.player.segments if r in mine and e > s), default=start)
    underrun = stopped = ended = 0.0
    for a, b in gaps:
        first = next((t for t in stop_times if a - EDGE_S <= t < b), None)
        if first is not None:
            underrun += max(0.0, first - a)
            stopped += b - max(first, a)
        elif b < end:
            underrun += b - a  # the story went on after it: the server was late
        elif any(t < a for t in stop_times):
            stopped += b - a  # the story never came back (or came back short) after an earlier stop
        elif completed and a >= heard_until - 1e-9:
            ended += b - a  # it ended of itself
        else:
            underrun += b - a  # never stopped, not finished: the server was late
    denominator = window_s - underrun - ended
    return {"window_s": window_s, "played_s": round(played, 3), "underrun_s": round(underrun, 3),
            "stopped_s": round(stopped, 3), "ended_s": round(ended, 3),
            "share": round(played / denominator, 4) if denominator > 0 else None, "ended_in_window": ended > 0}


def story_start(tr: Trial, story: str | None) -> float | None:
    """When the story first sounded: its response's first audio, or that of a response resuming it
    (the server yielded to a noise before any of it played)."""
    heard = [tr.first_audio[r] for r in {story} | tr.resumed if r in tr.first_audio] if story else []
    return min(heard) if heard else None


def answer_heard(tr: Trial, answer: str, now: float) -> bool:
    """Whether a cut-in's answer has been heard enough: ``ANSWER_WINDOW_S`` from its first audio,
    or played out to its end (done, and the player idle)."""
    if now >= tr.first_audio[answer] + ANSWER_WINDOW_S:
        return True
    return tr.order[-1] in tr.done and now > tr.player.end


def answer_figures(tr: Trial, stops: list[dict[str, Any]], answer: str) -> dict[str, Any]:
    """The stops from a cut-in's answer's first audio on (the user said nothing more: each is the
    answer interrupting itself) and the seconds of answer the player played."""
    start = tr.first_audio[answer]
    mine = [s for s in stops if s["at"] >= start]
    later = {r for r in tr.order if tr.created[r] >= tr.created[answer]}  # the answer, and any reply after it
    played = sum(max(0.0, e - s) for _, r, s, e in tr.player.segments if r in later)
    return {"answer_stops": len(mine), "answer_stops_at_ms": [round((s["at"] - start) * 1000) for s in mine],
            "answer_played_s": round(played, 2)}


def heard_until(tr: Trial, onset: float) -> float | None:
    """The end of the last audio the player played of a response begun before ``onset`` or resuming
    one (clears applied), or None when none sounded."""
    rids = {r for r in tr.order if tr.created[r] < onset} | set(tr.resumed)
    ends = [e for _, r, s, e in tr.player.segments if r in rids and e > s]
    return max(ends) if ends else None


def played_level(player: Player, start: float, seconds: float) -> float | None:
    """The RMS (dBFS) of what the loudspeaker played in the window, over the samples that sounded."""
    x = loudspeaker(player, start, int(seconds * RATE))
    voiced = x[np.abs(x) > 0]
    return dbfs(rms(voiced)) if voiced.size else None
