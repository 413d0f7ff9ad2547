"""Full duplex as people talk (issue 34): a Full-Duplex-Bench-style table through the real realtime API.

    python -m bench duplex                                   # eval part, all kinds and modes, 3 runs
    python -m bench duplex --set dev --limit 2 --runs 1      # a smoke run (~3 min)
    python -m bench duplex --kinds backchannel interruption --modes semantic_vad no_backchannel_rule
    python -m bench duplex --json --out bench/results
    python -m bench duplex --transport webrtc --kinds backchannel interruption cutin   # over a call (webrtc.py)
    python -m bench duplex --room --set dev --runs 1         # in a room: echo and noise at the mic (room_trials.py)

A real gateway + one cascade worker (``bench/launch.py``); one fresh GA WebSocket session per
trial, ``?extensions=all``. The microphone never stops: 20 ms chunks of PCM16 24 kHz on a
wall-clock schedule, silence between the clips. The listener's playback is simulated as the
OpenAI clients do it: the assistant's audio plays in real time from its first
``response.output_audio.delta``; ``input_audio_buffer.speech_started`` clears the play-out buffer
(later audio of the cut response is not played) and sends ``conversation.item.truncate`` with the
milliseconds played (as the Agents SDK does). The set is ``bench/sets/duplex.py`` (``--set dev``,
``dev2``, ``fresh`` or the held-out ``eval``, each run of which is logged in ``docs/eval-runs.md``),
spoken by ``bench/duplex_set.py``.

Trials, per mode:

- complete: the clip after 0.5 s of silence. Turn latency = first audio delta minus the send time
  of the chunk holding the last voiced sample; no audio within 10 s is "no answer". Split in two:
  ``speech_stopped`` after that sample (the turn decided) and the first audio after ``speech_stopped``
  (0 when the held reply was ready).
- paused: a takeover is a response created, or audio arriving, inside the pause (before the chunk
  where the speech resumes was sent) or over the rest of the turn (before its last voiced sample:
  a turn ended at a pause in the second half; since issue 47's fifteenth stop). The pause alone,
  Full-Duplex-Bench's rate, is reported beside it. A complete turn whose reply began before its
  last voiced sample is reported as talked over.
- backchannel: a long-answer prompt as text (``conversation.item.create`` + ``response.create``
  with instructions to answer at length); once 1.5-2.5 s of its audio has been played (fixed per
  item), the clip is streamed. A false interruption is ``speech_started`` from the clip's onset to
  3 s after it, the reply's ``response.done`` cancelled, or a new ``response.created`` in that
  window. A reply whose audio ended before the clip was due is not a trial ("short"), and neither
  is one that had finished playing before the clip's last voiced sample ("ended"): both are counted
  apart. What the listener notices (issue 47): the story is lost when the backchannel got an answer
  of its own, or stopped the reply and no resumed reply (``response.resumed``) sounded within 1 s of
  the voice's last voiced sample.
- cutin: a short "No." or "Wait." over the reply, the same way: taken as a turn only on a
  verdict (issue 69): the user's turn committed after the onset, or the answer's audio began, and
  no backchannel event or resume. No verdict either way is "undecided", counted apart for every
  kind (``trials.verdict_of_voice``).
- interruption: the same, with the interruption clip. Detected: ``speech_started`` from its onset
  to 2 s after its last voiced sample. Seen = that ``speech_started`` minus the onset (the send
  time of the clip's first voiced chunk). **Silence after the onset** (issue 69: what the listener
  heard, not an event): the end of the cut reply's audio as the client received and played it
  (the player clears at ``speech_started`` and plays any of the reply's audio that comes after),
  minus the onset; beside it the last of its audio received after the onset. Stop = the later of the cut reply's last audio delta and
  its ``response.done`` minus the onset, when the reply was still being sent at the onset (else
  nothing was left to stop but the client's buffer: stop = seen); none when the reply never ended. Answer = first audio of the next
  reply minus the clip's last voiced sample (the quantity Full-Duplex-Bench calls interruption
  latency). Relevance: the next reply's transcript contains one of the item's ``expect`` keywords
  (lower case, a word beginning with it), judged on the reply's first words (up to its end, the
  keyword, or 6 s of its audio).

In a room (``--room``, issue 70; ``room.py``, ``room_trials.py``, ``room_report.py``): the
microphone also hears the loudspeaker (the client's played audio, delayed, through a synthetic
room, at -6/-10/-20 dB) and made noise (babble, music, keyboard, fan at 10/20 dB SNR); stories
count self-interruptions and how much of the story was played, cut-ins and backchannels are
spoken over them. ``--echo-cancellation off`` measures without the server's canceller.

Modes: ``server_vad`` (silence_duration_ms 500), ``semantic_vad`` (eagerness auto), both with the
server's defaults for speech over a reply (since issue 47 the reply stops at the voice's onset and
a backchannel resumes it), and for the trials over a reply ``no_backchannel_rule`` (semantic_vad
with ``"ignore_backchannels": false``: every voice over the reply is a barge-in) and ``no_yield``
(semantic_vad with ``"yield_at_onset": false``: the reply plays on while the judge decides). Trials interleave
modes per item (the order rotating). Each figure is reported per run and as the median of
``--runs`` (default 3) with the spread; the goals are judged on the median.
"""

from __future__ import annotations

from typing import Any

from bench.duplex.client import Mic, Player, Trial
from bench.duplex.common import MODES, mentions
from bench.duplex.report import goals, median_modes, summarise
from bench.duplex.report import report as clean_report
from bench.duplex.runner import measure
from bench.duplex.trials import modes_for, overlap_trial, run_all, turn_trial
from bench.duplex_set import KINDS, items, synthesize
from bench.eval_log import log_eval_run
from bench.launch import raise_fd_limit

__all__ = ["MODES", "Mic", "Player", "Trial", "goals", "median_modes", "mentions", "modes_for", "overlap_trial",
           "measure", "report", "run_all", "run_cli", "summarise", "turn_trial"]


def report(r: dict[str, Any]) -> str:
    """The tables of a run: the clean trials' (``report.py``) or the room's (``room_report.py``)."""
    if r.get("room"):
        from bench.duplex.room_report import report as room_report

        return room_report(r)
    return clean_report(r)


def run_cli(args) -> dict[str, Any]:
    if getattr(args, "room", False):  # the room's trials: echo and noise at the microphone (room_trials.py)
        from bench.duplex.room_trials import run_cli as run_room

        return run_room(args)
    if (getattr(args, "transport", None) or "websocket") == "webrtc":  # the overlap trials over a call
        from bench.duplex.webrtc import run_cli as run_calls

        return run_calls(args)
    raise_fd_limit()
    modes = list(getattr(args, "modes", None) or MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown modes {unknown}; use some of {list(MODES)}")
    kinds = list(getattr(args, "kinds", None) or KINDS)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise SystemExit(f"unknown kinds {bad}; use some of {list(KINDS)}")
    part = getattr(args, "set", None) or "eval"
    limit = getattr(args, "limit", None)
    if part == "eval":  # the held-out part: every run is on record (issue 69)
        log_eval_run("duplex eval", getattr(args, "purpose", None) or "figure")
    clips = [synthesize(it) for kind in kinds for it in items(part, kind, limit)]
    return measure("websocket", part, modes, kinds, clips, getattr(args, "runs", None) or 3, run_all)

