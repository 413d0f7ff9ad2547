"""``python -m bench duplex --room``: the duplex trials in a room (issue 70), a microphone that also
hears the loudspeaker (echo) and room noise (``bench/duplex/room.py``), measured on the client
from the audio it actually played.

    python -m bench duplex --room --set dev --runs 1                       # the whole plan, ~12 min a run
    python -m bench duplex --room --set dev --limit 1 --runs 1             # a smoke run: one trial a condition
    python -m bench duplex --room --set dev --echo-cancellation off        # the baseline: no server canceller
    python -m bench duplex --room --set dev --conditions echo cutin --noise-reduction near_field

The figures are read by ``room_figures.py``. One GA WebSocket session per trial (``bench/turns.py open_session``, as the other trials), with
the server's DEFAULT turn detection (no ``turn_detection`` sent) and, from the options,
``session.audio.input.echo_cancellation`` (``--echo-cancellation off`` sends null; ``server``, the
default, sends nothing: the server's default is on) and ``noise_reduction`` (``near_field`` /
``far_field``; ``none``, the default, sends nothing). Each trial asks for a long story (the part's
long-answer prompt as a text item, ``response.create`` with the long instructions and
``STORY_TOKENS``, enough for more than 20 s of audio) and measures from the story's first audio:

- **story** (no user voice; echo or noise only), a 20 s window (``WINDOW_S``). A
  self-interruption is the story stopped while the user said nothing (``RoomTrial.stops``):
  ``speech_started`` while the assistant's audio was playing or due (the client clears and
  truncates), or a response cancelled, or one still playing or due when a new response was
  created, that the client had not cut (one stop per response). One that came back: a resumed response
  (``response.resumed``) sounded within 1 s of the server's end of that voice (the next
  ``speech_stopped``). Story played: the seconds of the story's audio (the story's response and
  its resumptions) the player played in the window, clears applied; its share of the window less
  the stalls (a gap free of stops that more of the tale follows, or the window's last gap when
  nothing ever halted it and it had not finished: the server had not produced audio yet; reported apart as
  underrun seconds) and less any time after a story that completed, unstopped, before the
  window's end (``story_figures``). Stops
  are counted from the request: one before the story's first audio (the window then starts at the
  first audio of its resumption, or at that stop when none came) is a self-interruption too.
- **cut-in** over echo or noise: a dev cut-in clip spoken 4-7 s into the story (from its first
  audio, wall clock). Taken on a verdict (``trials.decide_voice``: a turn committed after the onset
  or the next reply's audio began, no backchannel event or resumption after the onset). Onset ->
  last audio played: from the clip's onset to the end of the last audio the player played of any
  response begun before the onset or resuming one (clears applied). A cut-in spoken when nothing
  was playing (the story had stopped of itself) has no such figure, and counts for the goal as not
  taken: there was nothing to cut.
- **backchannel** over echo and without it, side by side in one run: a dev backchannel clip at
  the same point; story lost as the clean overlap trial defines it (``trials.story_outcome``), for
  the response playing at the onset; a story already gone before the voice counts as lost.

The plan (``plan``; ``--conditions`` picks groups, ``--limit N`` caps each condition at N):
``echo``: stories at -10 dB (5) and -6 dB (5), delays cycling 40-300 ms, and -20 dB (2);
``cutin``: 10 cut-ins, half at -10, half at -6 dB; ``backchannel``: 10 over echo at -10 dB and
the same 10 without echo; ``noise``: at 10 dB SNR one story and one cut-in per noise type, at
20 dB one story per type; ``spoken``: 3 stories and 3 cut-ins at -6 dB whose story is asked aloud
(the part's prompt spoken by its voices, ``duplex_set.spoken_prompts``, after 0.2 s of silence;
the session's instructions and token limit set to the story's, and the server's turn detection
makes the response): the answer then follows the user's own voice, as in a real conversation (a
text request hid that the first answer took its own echo for the user). Trials interleave the conditions. ``--runs`` (default 3) repeats the
plan on one stack; ``room_report.py`` gives each figure per run and as the median of the runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.duplex.client import Player, Trial
from bench.duplex.common import BACKCHANNEL_WINDOW_S, CHUNK, DETECT_WINDOW_S, LONG_INSTRUCTIONS, REPLY_WAIT_S
from bench.duplex import room_figures as figures
from bench.duplex.room_figures import WINDOW_S
from bench.duplex.room import (DELAYS_MS, NOISES, RT60S_S, Echo, RoomMic, at_snr, dbfs, loudspeaker, noise, rms,
                               voice_level)
from bench.duplex.room_report import goals, median_conditions, summarise
from bench.duplex.trials import decide_voice, next_reply, story_outcome
from bench.duplex_set import RATE, Clip, items, prompts, spoken_prompts, synthesize
from bench.launch import cascade_realtime_url, raise_fd_limit
from bench.turns import Refused, open_session

# The story's max_output_tokens. A spoken reply ends at the first sentence end after 20 words per
# 160 tokens (core/cascade/voice_prompt.py): the clean trials' LONG_TOKENS (320) ends it after 40
# words, about 14 s of audio; 1024 lets it run to 128 words, about 35 s, past the window.
STORY_TOKENS = 1024
CLIP_AT_S = (4.0, 4.75, 5.5, 6.25, 7.0)  # a cut-in or backchannel this far into the story, by trial
GROUPS = ("echo", "cutin", "backchannel", "noise", "spoken")
SNRS_DB = (10.0, 20.0)


@dataclass(frozen=True)
class Spec:
    """One trial of the plan."""

    condition: str  # what the report groups by, e.g. "story, echo -10 dB"
    kind: str  # "story", "cutin" or "backchannel"
    prompt: str
    echo_db: float | None = None  # None: no echo
    delay_ms: int = 0
    rt60_s: float = 0.2
    noise: str | None = None
    snr_db: float | None = None
    clip: Clip | None = None
    at_s: float = 0.0  # the clip's onset into the story
    seed: int = 0
    ask: Clip | None = None  # the prompt spoken (the story asked aloud), else sent as text


def echo_label(db: float | None) -> str:
    return "no echo" if db is None else f"echo {db:g} dB"


def plan(part: str, groups: tuple[str, ...] | list[str], limit: int | None, cutins: list[Clip],
         backchannels: list[Clip], spoken: list[Clip] | None = None) -> list[Spec]:
    """The trials of ``groups`` (``GROUPS``), at most ``limit`` per condition, conditions interleaved."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise SystemExit(f"unknown conditions {unknown}; use some of {list(GROUPS)}")
    asks = prompts(part)
    conditions: list[list[dict[str, Any]]] = []

    def add(n: int, make) -> None:
        conditions.append([make(i) for i in range(n if limit is None else min(n, limit))])

    def echoed(i: int, db: float) -> dict[str, Any]:
        return {"echo_db": db, "delay_ms": DELAYS_MS[i % len(DELAYS_MS)], "rt60_s": RT60S_S[i % len(RT60S_S)]}

    if "echo" in groups:
        for db, n in ((-10.0, 5), (-6.0, 5), (-20.0, 2)):
            add(n, lambda i, db=db: {"condition": f"story, {echo_label(db)}", "kind": "story", **echoed(i, db)})
    if "cutin" in groups:
        for k, db in enumerate((-10.0, -6.0)):
            mine = cutins[k::2][:5]
            add(len(mine), lambda i, db=db, mine=mine: {
                "condition": f"cut-in, {echo_label(db)}", "kind": "cutin", "clip": mine[i], **echoed(i, db)})
    if "backchannel" in groups:
        mine = backchannels[:10]
        add(len(mine), lambda i: {"condition": "backchannel, echo -10 dB", "kind": "backchannel", "clip": mine[i],
                                  **echoed(i, -10.0)})
        add(len(mine), lambda i: {"condition": "backchannel, no echo", "kind": "backchannel", "clip": mine[i]})
    if "noise" in groups:
        for snr in SNRS_DB:
            for j, kind in enumerate(NOISES):
                add(1, lambda i, snr=snr, j=j, kind=kind: {"condition": f"story, {kind} {snr:g} dB SNR",
                                                           "kind": "story", "noise": kind, "snr_db": snr, "n": j})
        for j, kind in enumerate(NOISES):
            add(1, lambda i, j=j, kind=kind: {"condition": f"cut-in, {kind} 10 dB SNR", "kind": "cutin", "n": j,
                                              "noise": kind, "snr_db": 10.0, "clip": cutins[(j + 3) % len(cutins)]})
    if "spoken" in groups:
        if not spoken:
            raise SystemExit("the spoken conditions need the part's prompts spoken (spoken_prompts)")

        def aloud(i: int, kind: str) -> dict[str, Any]:
            ask = spoken[(i + (kind == "cutin")) % len(spoken)]
            return {"condition": f"{'story' if kind == 'story' else 'cut-in'} asked aloud, echo -6 dB", "kind": kind,
                    "ask": ask, "prompt": ask.item.text,
                    **echoed(i + 1 + (kind == "cutin"), -6.0)}

        add(3, lambda i: aloud(i, "story"))
        add(3, lambda i: {**aloud(i, "cutin"), "clip": cutins[(2 * i + 1) % len(cutins)]})
    out: list[Spec] = []
    for i in range(max((len(c) for c in conditions), default=0)):
        for c in conditions:
            if i < len(c):
                spec = dict(c[i])
                k = spec.pop("n", i)  # the trial's place in its condition: its prompt and its clip's time
                at = CLIP_AT_S[k % len(CLIP_AT_S)] if spec["kind"] != "story" else 0.0
                prompt = spec.pop("prompt", asks[k % len(asks)])
                out.append(Spec(prompt=prompt, at_s=at, seed=len(out), **spec))
    return out


def session_fields(echo_cancellation: str = "server", noise_reduction: str = "none") -> dict[str, Any]:
    """The ``session.audio.input`` fields sent beside the server's default turn detection: nothing
    for the server's defaults (echo cancellation on, no noise reduction)."""
    out: dict[str, Any] = {}
    if echo_cancellation == "off":
        out["echo_cancellation"] = None
    elif echo_cancellation != "server":
        raise SystemExit(f"--echo-cancellation {echo_cancellation!r}: server or off")
    if noise_reduction in ("near_field", "far_field"):
        out["noise_reduction"] = {"type": noise_reduction}
    elif noise_reduction != "none":
        raise SystemExit(f"--noise-reduction {noise_reduction!r}: none, near_field or far_field")
    return out


class RoomTrial(Trial):
    """``Trial`` that also notes, as each event comes, whether it stopped the assistant (``stops``):
    ``speech_started`` while a response was on (its audio playing or due, or none of it come yet);
    a response cancelled, or one on when a new response was created, that no stop had taken
    already (the client had not cut it)."""

    def __init__(self, ws, mic, player: Player) -> None:
        super().__init__(ws, mic, player=player)
        self.stops: list[dict[str, Any]] = []  # {"at", "why", "response"} (+ "new": the new response)
        self._stopped: set[str] = set()  # responses a stop took

    def on(self, now: float) -> str | None:
        """The response the listener is on at ``now``: the player's (``Player.playing``), or else one
        created whose audio has not come yet and that is neither done nor cut."""
        finished = self.done.keys() | self.cut
        heard = self.player.playing(now, finished)
        if heard is not None:
            return heard[1]
        return next((r for r in reversed(self.order) if r not in finished and r not in self.first_audio), None)

    def _handle(self, ev: dict[str, Any], now: float) -> None:
        kind = ev.get("type")
        if kind in ("input_audio_buffer.speech_started", "response.created"):
            rid = self.on(now)
            if rid is not None and (kind == "input_audio_buffer.speech_started" or rid not in self._stopped):
                stop = {"at": now, "why": "speech_started", "response": rid}
                if kind == "response.created":  # a resumption is told only after its creation: see real_stops
                    stop.update(why="new_response", new=ev["response"]["id"])
                self.stops.append(stop)
                self._stopped.add(rid)
        elif kind == "response.done":
            r = ev["response"]
            if r.get("status") == "cancelled" and r["id"] not in self.cut and r["id"] not in self._stopped:
                self.stops.append({"at": now, "why": "cancelled", "response": r["id"]})
                self._stopped.add(r["id"])
        super()._handle(ev, now)

    def real_stops(self) -> list[dict[str, Any]]:
        """``stops`` less the new responses that turned out to resume one (``response.resumed``)."""
        return [s for s in self.stops if s.get("new") not in self.resumed]


async def room_trial(url: str, spec: Spec, fields: dict[str, Any], voice_rms: float,
                     noises: dict[str, np.ndarray], window_s: float = WINDOW_S) -> dict[str, Any]:
    """One trial of the plan: a story in the room of ``spec``, with its clip if it has one; a story
    alone is heard for ``window_s`` (the tests' are shorter than the bench's)."""
    clip = spec.clip
    r: dict[str, Any] = {"condition": spec.condition, "kind": spec.kind, "prompt": spec.prompt,
                         "echo_db": spec.echo_db, "delay_ms": spec.delay_ms if spec.echo_db is not None else None,
                         "rt60_s": spec.rt60_s if spec.echo_db is not None else None, "noise": spec.noise,
                         "snr_db": spec.snr_db, "item": clip.item.id if clip else None,
                         "text": clip.item.text if clip else None, "at_s": spec.at_s if clip else None}
    ws = await open_session(url, **fields)
    if spec.ask is None:
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": spec.prompt}]}}))
        await ws.send(json.dumps({"type": "response.create", "response": {
            "instructions": LONG_INSTRUCTIONS, "max_output_tokens": STORY_TOKENS}}))
    else:  # asked aloud: the turn's end makes the response, with the session's settings
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "instructions": LONG_INSTRUCTIONS, "max_output_tokens": STORY_TOKENS}}))
    player = Player(keep=True)
    echo = Echo(spec.echo_db, spec.delay_ms, spec.rt60_s, spec.seed) if spec.echo_db is not None else None
    loop = None
    if spec.noise is not None:
        loop = at_snr(noises[spec.noise], voice_rms, spec.snr_db).astype(np.float64)
    rng = np.random.default_rng(spec.seed)
    mic = RoomMic(ws, player, echo, loop, int(rng.integers(0, loop.size)) if loop is not None else 0).start()
    tr = RoomTrial(ws, mic, player)
    if spec.ask is not None:
        r["asked"] = spec.ask.item.text
        mic.say(np.concatenate([np.zeros(CHUNK * 10, np.int16), spec.ask.pcm]), {})  # after 0.2 s of silence
    asked = time.monotonic()
    story: str | None = None
    said_at: float | None = None
    on_at_onset: str | None = None
    r["status"] = "ok"
    try:
        while True:
            await tr.pump()
            now = time.monotonic()
            if story is None and tr.order:
                story = tr.order[0]
            first = figures.story_start(tr, story)
            if first is None:
                if now - asked > REPLY_WAIT_S:
                    break
                continue
            if clip is None:
                if now >= first + window_s + 0.2:
                    break
                continue
            if said_at is None:
                if now >= first + spec.at_s:
                    on_at_onset = tr.on(now)
                    mic.say(clip.pcm, {"onset": 0, "last_voiced": clip.last_voiced})
                    said_at = now
                continue
            lv, onset = mic.marks.get("last_voiced"), mic.marks.get("onset")
            if lv is None:
                continue
            if spec.kind == "backchannel":
                if now > lv + BACKCHANNEL_WINDOW_S:
                    break
                continue
            nxt = next_reply(tr, story, onset)
            back = any(tr.created.get(rid, -1) >= onset for rid in tr.resumed)
            if nxt is not None and nxt in tr.first_audio:
                if figures.answer_heard(tr, nxt, now):
                    break
            elif back or now > lv + DETECT_WINDOW_S + 1.0:
                break
        settle = time.monotonic() + 0.3
        while time.monotonic() < settle:
            await tr.pump(0.05)
    finally:
        await tr.close()
    r.update(user=tr.user, errors=tr.errors, events=tr.timeline(), backchannels=[w for _, w in tr.backchannels],
             resumed=len(tr.resumed), story_text=tr.text.get(story, "") if story else "",
             echo_heard_db=echo.heard_db() if echo else None, clipped_samples=mic.clipped,
             voice_dbfs=dbfs(voice_rms), noise_dbfs=dbfs(rms(loop)) if loop is not None else None)
    first, stops = figures.story_start(tr, story), tr.real_stops()
    if first is None:  # none of the story sounded
        if clip is not None or not stops:
            r["status"] = "stopped before it sounded" if stops else "no reply"
            return r
        first = stops[0]["at"]  # a story stopped before it began: its window runs from that stop
    mine = {story} | tr.resumed  # the story's audio as the server sent it, its resumptions too
    r["story_audio_s"] = round(sum(p.size for p, seg in zip(player.pcm, player.segments) if seg[1] in mine) / RATE, 2)
    r["story_played_dbfs"] = figures.played_level(player, first, window_s)
    if clip is None:
        r.update(figures.stop_figures(tr, stops, asked, first + window_s, origin=first))
        r.update(figures.story_figures(tr, stops, story, first, window_s))
        return r
    onset, lv = mic.marks.get("onset"), mic.marks.get("last_voiced")
    if onset is None or lv is None:
        r["status"] = "not said"
        return r
    before = figures.stop_figures(tr, stops, asked, onset, origin=first)
    r.update(stops_before=before["stops"], self_interruptions_before=before["self_interruptions"],
             playing_at_onset=on_at_onset is not None)
    if spec.kind == "cutin":
        until = lv + DETECT_WINDOW_S + 1.0
        nxt = next_reply(tr, story, onset)
        resumed = any(tr.created.get(rid, -1) >= onset for rid in tr.resumed)
        r.update(decide_voice(tr.first_audio.get(nxt) if nxt is not None else None, tr.committed,
                              [t for t, _ in tr.backchannels], resumed, onset, until))
        r["taken"] = r["verdict"] == "interruption"
        end = figures.heard_until(tr, onset)  # None when nothing was playing at the onset: nothing to cut
        r["last_played_ms"] = round(max(0.0, end - onset) * 1000, 1) if end is not None and on_at_onset else None
        r.update(figures.answer_figures(tr, stops, nxt) if r["taken"] and nxt in tr.first_audio else
                 {"answer_stops": None, "answer_played_s": None})
        return r
    window = lv + BACKCHANNEL_WINDOW_S
    if on_at_onset is None:  # the story had stopped before the voice, and not come back
        r.update(why=["gone before the voice"], paused=False, false_interruption=False, story_lost=True,
                 story_back_ms=None)
        return r
    reply = on_at_onset
    seen = any(onset <= t <= window for t in tr.speech_started)
    done_t, status, _ = tr.done.get(reply, (None, None, None))
    cancelled = status == "cancelled" and done_t is not None and done_t >= onset
    new = [rid for rid in tr.order if rid != reply and onset <= tr.created[rid] <= window]
    answered = any(rid not in tr.resumed for rid in new)
    back = [tr.first_audio[rid] for rid in new if rid in tr.resumed and rid in tr.first_audio]
    r.update(story_outcome(seen, cancelled, answered, min(back) if back else None, lv))
    r["story_back_ms"] = round((min(back) - lv) * 1000, 1) if back else None
    return r


async def run_plan(url: str, specs: list[Spec], fields: dict[str, Any], voice_rms: float,
                   noises: dict[str, np.ndarray], log) -> list[dict[str, Any]]:
    try:  # warm-up: the first ASR / LLM / TTS calls
        await room_trial(url, Spec("warm-up", "cutin", specs[0].prompt, clip=_first_clip(specs), at_s=2.0),
                         fields, voice_rms, noises)
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed warm-up shows again in the real trials
        log(f"warm-up failed: {exc!r}")
    rows = []
    for spec in specs:
        try:
            row = await room_trial(url, spec, fields, voice_rms, noises)
        except Refused:
            raise
        except Exception as exc:  # noqa: BLE001 - counted, not fatal
            row = {"condition": spec.condition, "kind": spec.kind, "error": repr(exc)}
        rows.append(row)
        log(row_line(row))
    return rows


def _first_clip(specs: list[Spec]) -> Clip | None:
    return next((s.clip for s in specs if s.clip is not None), None)


def row_line(r: dict[str, Any]) -> str:
    head = f"{r['condition']:28s} {r.get('item') or '':8s}"
    if "error" in r:
        return f"{head} error {r['error']}"
    if r.get("status") != "ok":
        return f"{head} {r.get('status')}"
    if r["kind"] == "story":
        stops = " ".join(f"{s['at_ms']}:{s['why']}{'+back' if s['came_back'] else ''}" for s in r["stops"])
        return (f"{head} self-interruptions={r['self_interruptions']} (back {r['came_back']}) played="
                f"{r['played_s']:.1f}s share={r['share']} underrun={r['underrun_s']:.1f}s "
                f"audio={r['story_audio_s']}s [{stops}] heard {r['user']}")
    if r["kind"] == "cutin":
        return (f"{head} taken={r['taken']} verdict={r['verdict']} last_played={r['last_played_ms']} "
                f"before={r['self_interruptions_before']} answer_stops={r.get('answer_stops')} "
                f"{r.get('answer_stops_at_ms', '')} {r['text']!r} heard {r['user']}")
    return (f"{head} lost={r['story_lost']} {r['why']} back={r['story_back_ms']} before="
            f"{r['self_interruptions_before']} {r['text']!r} heard {r['user']}, as backchannel {r['backchannels']}")


def run_cli(args) -> dict[str, Any]:
    raise_fd_limit()
    part = getattr(args, "set", None) or "dev"
    if part == "eval":
        raise SystemExit("--room runs on a dev part (--set dev, dev2 or fresh): its trials tune the room's handling")
    groups = tuple(getattr(args, "conditions", None) or GROUPS)
    ec = getattr(args, "echo_cancellation", None) or "server"
    nr = getattr(args, "noise_reduction", None) or "none"
    fields = session_fields(ec, nr)
    cutins = [synthesize(it) for it in items(part, "cutin")]
    backchannels = [synthesize(it) for it in items(part, "backchannel")]
    asks = spoken_prompts(part) if "spoken" in groups else None
    specs = plan(part, groups, getattr(args, "limit", None), cutins, backchannels, asks)
    if not specs:
        raise SystemExit(f"no trial in conditions {list(groups)}")
    voice = voice_level([synthesize(it).pcm for it in items(part, "complete")])
    noises = {kind: noise(kind) for kind in sorted({s.noise for s in specs if s.noise})}

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    runs = max(1, getattr(args, "runs", None) or 3)
    out: list[dict[str, Any]] = []
    with cascade_realtime_url() as url:
        url += "&extensions=all"
        for k in range(runs):
            log(f"run {k + 1} (room: {len(specs)} trials, echo_cancellation={ec}, noise_reduction={nr})")
            t0, load = time.monotonic(), os.getloadavg()
            try:
                rows = asyncio.run(run_plan(url, specs, fields, voice, noises, log))
            except Refused as exc:
                raise SystemExit(f"the server refused the session's fields {fields}: {exc}") from exc
            out.append({"conditions": summarise(rows), "wall_s": round(time.monotonic() - t0, 1),
                        "loadavg_start": [round(x, 2) for x in load],
                        "loadavg_end": [round(x, 2) for x in os.getloadavg()], "rows": rows})
    median = median_conditions([run["conditions"] for run in out])
    counts: dict[str, int] = {}
    for s in specs:
        counts[s.condition] = counts.get(s.condition, 0) + 1
    return {"room": True, "transport": "websocket", "set": part, "echo_cancellation": ec, "noise_reduction": nr,
            "session_fields": fields, "voice_dbfs": dbfs(voice), "window_s": WINDOW_S, "conditions": counts,
            "runs": out, "median": median, "goals": goals(median)}
