"""What the parts of ``python -m bench duplex`` share: the clock of the microphone, the trials'
waits, the goals, the turn-detection modes, the published anchors and the relevance rule (the
package's docstring says what each trial measures)."""

from __future__ import annotations

import re
from typing import Any

from bench.duplex_set import RATE

CHUNK_MS = 20
CHUNK = RATE * CHUNK_MS // 1000
# The server's VAD reads 32 ms windows from the session's first sample, and where a voice's onset
# falls in a window moves when it is reported by up to ~100 ms (Silero's probability over a cut
# onset: the same dev clip at onsets 0 / 13 / 27 ms apart, 140 / 247 / 173 ms). 20 ms chunks and
# 32 ms windows line up again every 8 chunks: an overlap clip starts on chunk index ``n`` with
# ``n % GRID_CHUNKS`` fixed by its item, so a run measures every clip at the same place on the
# grid and the items spread over all of it (before, the place followed the reply's timing).
GRID_CHUNKS = 8
LEAD_S = 0.5  # silence before a complete or paused clip
WAIT_S = 10.0  # complete/paused: streamed silence to wait for an answer
LONG_TOKENS = 320  # the long-answer prompt's reply
LONG_INSTRUCTIONS = (
    "You are a friendly voice assistant. Your replies are read aloud, in plain words: no lists, no "
    "markdown, no emoji. This time answer at length: tell it in at least ten sentences.")
PLAYED_S = (1.5, 1.75, 2.0, 2.25, 2.5)  # assistant audio heard before the clip, by item index
REPLY_WAIT_S = 20.0  # the long reply must have played PLAYED_S within this
BACKCHANNEL_WINDOW_S = 3.0  # after the backchannel's last voiced sample
DETECT_WINDOW_S = 2.0  # interruption: speech_started up to this after the clip's last voiced sample
NEXT_WAIT_S = 12.0  # interruption: the next reply, after the clip's last voiced sample
NEXT_AUDIO_S = 6.0  # interruption: the next reply's audio judged for relevance
STORY_BACK_S = 1.0  # backchannel: a reply it stopped must sound again within this of the voice's end
GOAL_STORY_LOST = 0.10
GOAL_CUTIN = 1.0

GOAL_BACKCHANNEL = 0.10
GOAL_SEEN_MS = 250.0
GOAL_TAKEOVER = 0.10
GOAL_RATIO = 0.75
GOAL_P90_MS = 1000.0

_SEMANTIC = {"type": "semantic_vad", "eagerness": "auto", "create_response": True, "interrupt_response": True}
MODES: dict[str, dict[str, Any]] = {
    "server_vad": {"type": "server_vad", "silence_duration_ms": 500},
    "semantic_vad": _SEMANTIC,
    "no_backchannel_rule": {**_SEMANTIC, "ignore_backchannels": False},
    # Issue 47 made yielding at the onset the default (server_vad and semantic_vad above yield);
    # this is the judged mode before it: the reply plays on while the judge decides.
    "no_yield": {**_SEMANTIC, "yield_at_onset": False},
    # The same semantic_vad session over OpenAI's Live dialect (/v1/live/sessions, issue 48): the
    # worker's Live translation and real-time pacing, measured beside Realtime GA's semantic_vad.
    "live": _SEMANTIC,
}
OVERLAP_ONLY = {"no_backchannel_rule", "no_yield"}  # modes run on the trials over a long reply only
TURN_ONLY: set[str] = set()  # modes run on the complete and paused trials only
LIVE = "live"
LIVE_GAP_S = 0.3  # Live has no response ids: audio after this long a silence is a new reply
GOAL_LIVE_MS = 30.0  # Live's turn latency p50 within this of Realtime GA's (semantic_vad)

# Published Full-Duplex-Bench v1 figures (Lin et al., 2025): pause takeover rate, smooth turn-taking
# latency, user-interruption latency (s).
ANCHORS = [("Moshi", 0.985, 0.265, 0.257), ("Gemini Live", 0.255, 1.301, 1.183), ("Freeze-Omni", 0.642, 0.953, 1.409)]


def mentions(text: str, keywords: tuple[str, ...] | list[str]) -> bool:
    """Whether ``text`` has a word beginning with one of ``keywords`` (case-insensitive):
    "penguin" matches "Penguins", "colo" matches "colour" and "colors"."""
    low = text.lower()
    return any(re.search(r"\b" + re.escape(k.lower()), low) for k in keywords)
