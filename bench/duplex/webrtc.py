"""The trials over a long reply (backchannel, interruption, cut-in) over a WebRTC call, measured
on the track (issue 69):

    python -m bench duplex --transport webrtc --set dev --kinds interruption backchannel cutin --limit 2 --runs 1

The same gateway + cascade worker as the WebSocket trials (``bench/launch.py``), one fresh call per
trial from the bench's ``aiortc`` client (``bench/calls/client.py``), ``?extensions=all`` so the
data channel carries ``input_audio_buffer.backchannel`` and ``response.resumed`` as the WebSocket
does. Per trial: the mode's turn detection by ``session.update`` on the ``oai-events`` data channel
(as ``bench/turns.py open_session``), the long prompt and ``response.create`` with the long
instructions and token budget (``common.py``) on it too; the microphone track sends 20 ms frames of
silence all along. Once ``played_s`` of the reply has come out of the track (decoded reply frames,
told from the gateway's idle frames exactly by their payload), the clip goes on the microphone
track: its onset is the time the frame holding its first sample was handed to aiortc, its
``last_voiced`` the same for its last voiced sample. The client does nothing else: on a call the
server plays the reply in real time and stops it itself (it knows the play-head; a WebRTC client
sends no truncate).

Which response a reply frame belongs to: the gateway's outbound track says
``output_audio_buffer.started`` (with the response id) on the data channel as it takes a
response's first frame, just before that frame's packet leaves; the frame comes out of the
client's jitter buffer some 80 ms after its packet. So each decoded reply frame belongs to the
response of the last ``started`` that arrived before it (``label_frames``). Responses' frames do
not interleave on the track (one FIFO queue, emptied on a cut). Not by a gap: a reply that runs dry
on a loaded machine has gaps of its own (``reply_gaps_s``), and a gap says nothing of whose audio
follows it. The one thing the rule could get wrong, the cut reply's last frames still in the jitter
buffer when the next response's ``started`` arrives, needs that response to begin within ~80 ms of
the cut; a resumed reply waits for the backchannel verdict and a next reply for a whole turn.

From the labelled frames (``track_figures``; every time is the frame's arrival, ``end`` = arrival +
20 ms, when it has played):

- ``silence_ms`` = end of the last frame of the cut reply (the reply playing at the onset) minus
  the onset: when the listener stopped hearing it (0 when it had stopped before the onset, as
  ``trials.py`` has it). Frames of a resumed reply (``response.resumed``) or of the next reply are
  other responses and do not count; a server that kept sending the cut reply makes it grow (to the
  trial's end). None when none of its frames came. ``last_audio_ms``: the arrival of its last frame
  after the onset.
- ``story_back_ms`` (backchannel) = the first frame of a resumed reply minus the voice's last voiced
  sample (negative: it came back before the voice ended).
- ``answer_ms`` (interruption) = the first frame of the next reply (the first response created
  after the onset that is neither the cut reply nor a resumption) minus the last voiced sample.

Verdicts from the data channel's events (``outcome``, ``verdict_of_voice``: the rule ``trials.py``
applies to the WebSocket's rows), in the window of the kind (backchannel: up to
``BACKCHANNEL_WINDOW_S`` after the last voiced sample; cut-in and interruption: up to
``DETECT_WINDOW_S`` + 1 s after it): ``verdict`` "interruption" is the user's turn committed
(``input_audio_buffer.committed`` after the onset) with no backchannel verdict, or the next reply's
audio on the track (it wins); "backchannel" is ``input_audio_buffer.backchannel`` or
``response.resumed``; None (``undecided``): neither. A cut-in is ``taken`` on an "interruption"
verdict (``speech_started`` alone is none: semantic_vad yields at every voice's onset).
``detected``/``seen_ms`` (``speech_started`` within the detection window), backchannels'
``false_interruption``/``why``/``paused``/``story_lost`` and interruptions' ``relevant`` mean what
they mean in ``trials.py``; an interruption's ``stop_ms`` is its ``silence_ms`` when detected (the
stop as the listener hears it). Rows have ``overlap_trial``'s keys (``truncates`` empty: the
server truncates) plus ``transport: "webrtc"``. Only the overlap kinds, and no ``live`` mode (a call speaks
Realtime).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from bench.calls.client import BenchCall, make_tracks
from bench.calls.common import FRAME_S
from bench.duplex.client import rel_ms
from bench.duplex.common import (BACKCHANNEL_WINDOW_S, DETECT_WINDOW_S, LIVE, LONG_INSTRUCTIONS, LONG_TOKENS, MODES,
                                 NEXT_AUDIO_S, NEXT_WAIT_S, PLAYED_S, REPLY_WAIT_S, mentions)
from bench.duplex_set import OVERLAP_KINDS, Clip, items, prompts, synthesize
from bench.duplex.runner import measure
from bench.duplex.trials import decide_voice, modes_for, story_outcome
from bench.launch import raise_fd_limit
from bench.turns import MAX_TOKENS, Refused

SETTLE_S = 0.4  # after a trial: the last frames through the client's jitter buffer, late events
CUTIN_WAIT_S = DETECT_WINDOW_S + 1.0  # cut-in and interruption verdicts: up to this after the last voiced sample

Frame = tuple[float, bool]  # (arrival, reply audio) of each decoded frame, as BenchCall keeps them
Event = tuple[float, dict[str, Any]]


# ---------------------------------------------------------------------------- the pure part


def label_frames(frames: list[Frame], starts: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """The reply frames with their response id: that of the last ``output_audio_buffer.started``
    (``starts``: (arrival, response id), in order) that arrived before the frame; idle frames, and
    reply frames before any ``started``, are left out."""
    out: list[tuple[float, str]] = []
    j, current = 0, None
    for t, reply in frames:
        while j < len(starts) and starts[j][0] <= t:
            current = starts[j][1]
            j += 1
        if reply and current is not None:
            out.append((t, current))
    return out


def track_figures(frames: list[tuple[float, str]], cut: str | None, resumed: set[str] | frozenset[str],
                  nxt: str | None, onset: float, last_voiced: float) -> dict[str, Any]:
    """What the listener heard on the track, from the labelled reply frames ((arrival, response id))
    and the clip's marks: ``silence_ms``, ``story_back_ms``, ``answer_ms`` (the module's docstring),
    and ``cut_end`` (when the cut reply's last frame heard after the onset ended; None if none)."""
    mine = [t for t, rid in frames if rid == cut]
    cut_end = max(mine[-1] + FRAME_S, onset) if mine else None
    after = [t for t in mine if t >= onset]
    back = [t for t, rid in frames if rid in resumed]
    first_next = next((t for t, rid in frames if nxt is not None and rid == nxt), None)
    return {"silence_ms": rel_ms(cut_end, onset), "cut_end": cut_end,
            "last_audio_ms": rel_ms(after[-1], onset) if after else None,
            "story_back_ms": rel_ms(min(back), last_voiced) if back else None, "back_t": min(back) if back else None,
            "answer_ms": rel_ms(first_next, last_voiced), "next_t": first_next}


def verdict_of_voice(s: dict[str, Any], next_audio: float | None, onset: float, until: float) -> dict[str, Any]:
    """What the server decided about the voice over the reply by ``until``, as ``trials.py``
    decides it for the WebSocket: "interruption" (a user turn committed after the onset, or the
    next reply's audio began on the track), "backchannel" (``input_audio_buffer.backchannel`` or a
    resume), or None (undecided); an answer that sounded wins over an earlier backchannel call."""
    return decide_voice(next_audio, s["committed"], [t for t, _ in s["backchannels"]], bool(s["resumed"]),
                        onset, until)


def _session(events: list[Event]) -> dict[str, Any]:
    """The data channel's events as the trial reads them."""
    s: dict[str, Any] = {"created": {}, "order": [], "resumed": {}, "done": {}, "speech_started": [], "committed": [],
                         "backchannels": [], "text": {}, "started": [], "stopped": {}, "cleared": {}, "user": [],
                         "errors": []}
    for t, ev in events:
        kind = ev.get("type")
        rid = ev.get("response_id", "")
        if kind == "response.created":
            rid = (ev.get("response") or {}).get("id", "")
            s["created"][rid] = t
            s["order"].append(rid)
        elif kind == "response.done":
            r = ev.get("response") or {}
            s["done"][r.get("id", "")] = (t, r.get("status", "?"), (r.get("status_details") or {}).get("reason"))
        elif kind == "response.resumed":
            s["resumed"].setdefault(rid, t)
        elif kind == "input_audio_buffer.speech_started":
            s["speech_started"].append(t)
        elif kind == "input_audio_buffer.committed":
            s["committed"].append(t)
        elif kind == "input_audio_buffer.backchannel":
            s["backchannels"].append((t, ev.get("transcript") or ""))
        elif kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            s["text"][rid] = s["text"].get(rid, "") + ev.get("delta", "")
        elif kind in ("response.output_audio_transcript.done", "response.output_text.done"):
            final = ev.get("transcript", ev.get("text"))
            if final:
                s["text"][rid] = final
        elif kind == "output_audio_buffer.started":
            s["started"].append((t, rid))
        elif kind == "output_audio_buffer.stopped":
            s["stopped"].setdefault(rid, t)
        elif kind == "output_audio_buffer.cleared":
            s["cleared"].setdefault(rid, t)
        elif kind == "conversation.item.input_audio_transcription.completed":
            s["user"].append(ev.get("transcript", ""))
        elif kind == "error":
            s["errors"].append((ev.get("error") or {}).get("message", ""))
    return s


def next_reply(s: dict[str, Any], reply: str | None, onset: float) -> str | None:
    """The first response created after the onset that is neither the long reply nor a resumption."""
    return next((rid for rid in s["order"] if rid != reply and rid not in s["resumed"] and s["created"][rid] >= onset),
                None)


def outcome(kind: str, events: list[Event], frames: list[Frame], reply: str, onset: float, last_voiced: float,
            expect: tuple[str, ...] = ()) -> dict[str, Any]:
    """A trial's figures from the data channel's events and the track's frames (both timed in
    monotonic seconds) and the clip's marks: the keys ``overlap_trial`` gives the kind, plus
    ``silence_ms`` and ``undecided``."""
    s = _session(events)
    labelled = label_frames(frames, s["started"])
    resumed = {rid for rid, t in s["resumed"].items() if t >= onset}
    nxt = next_reply(s, reply, onset)
    fig = track_figures(labelled, reply, resumed, nxt, onset, last_voiced)
    lv = last_voiced
    mine = [t for t, rid in labelled if rid == reply]
    until = min(mine[-1] if mine else onset, onset)  # the reply's frames before the onset: its gaps
    dry = sum(1 for t, r in frames if not r and mine and mine[0] <= t <= until) if mine else 0
    r: dict[str, Any] = {"transport": "webrtc", "silence_ms": fig["silence_ms"], "last_audio_ms": fig["last_audio_ms"],
                         "reply_gaps_s": round(dry * FRAME_S, 2),
                         "reply_audio_s": round(len(mine) * FRAME_S, 2), "truncates": [],
                         "backchannels": [w for _, w in s["backchannels"]], "resumed": len(s["resumed"]),
                         "reply_text": s["text"].get(reply, ""), "user": s["user"], "errors": s["errors"]}
    done_t, status, reason = s["done"].get(reply, (None, None, None))
    r.update(reply_status=status, reply_reason=reason)
    window = lv + (BACKCHANNEL_WINDOW_S if kind == "backchannel" else CUTIN_WAIT_S)
    r.update(verdict_of_voice(s, fig["next_t"], onset, window))
    starts = [t for t in s["speech_started"] if onset <= t]
    if kind == "backchannel":
        seen = [t for t in starts if t <= window]
        new = [rid for rid in s["order"] if rid != reply and onset <= s["created"][rid] <= window]
        cancelled = status == "cancelled" and done_t is not None and done_t >= onset
        back = fig["back_t"]
        answer = [rid for rid in new if rid not in s["resumed"]]
        r.update(story_outcome(bool(seen), cancelled, bool(answer), back, lv))
        r["story_back_ms"] = fig["story_back_ms"]
        ended = reply in s["stopped"] and reply not in s["cleared"] and mine and mine[-1] + FRAME_S < lv
        r["status"] = "ended" if ended and not r["false_interruption"] else "ok"
        r["backchannel_ms"] = rel_ms(s["backchannels"][0][0], onset) if s["backchannels"] else None
        return r
    seen = [t for t in starts if t <= lv + DETECT_WINDOW_S]
    r["status"] = "ok"
    r["detected"] = bool(seen)
    r["seen_ms"] = rel_ms(seen[0], onset) if seen else None
    if kind == "cutin":
        r["taken"] = r["verdict"] == "interruption"
        return r
    r["stop_ms"] = fig["silence_ms"] if seen else None
    text = s["text"].get(nxt, "") if nxt else ""
    r["next_text"] = text
    r["relevant"] = bool(nxt) and mentions(text, expect)
    r["answer_ms"] = fig["answer_ms"]
    return r


# ---------------------------------------------------------------------------- the call


def make_mic():
    """A ``SpeechMic`` (20 ms frames on the microphone's clock, silence unless a clip is queued)
    that marks the time each named sample's frame was handed to aiortc."""
    SpeechMic, _ = make_tracks()

    class MarkedMic(SpeechMic):
        def __init__(self) -> None:
            super().__init__()
            self.wanted: dict[str, int] = {}
            self.marks: dict[str, float] = {}
            self._total = 0  # bytes of the clip
            self._taken = 0  # samples of it handed over

        def say_marked(self, pcm: np.ndarray, marks: dict[str, int]) -> None:
            data = pcm.astype("<i2").tobytes()
            self.wanted, self.marks, self._total, self._taken = dict(marks), {}, len(data), 0
            self.say(data)

        async def recv(self):
            frame = await super().recv()  # a clip queued while it waited is in this frame
            taken = (self._total - len(self._pcm)) // 2
            if taken > self._taken:
                now = time.monotonic()
                for name, at in self.wanted.items():
                    if name not in self.marks and self._taken <= at < taken:
                        self.marks[name] = now
                self._taken = taken
            return frame

    return MarkedMic()


def call_address(url: str) -> tuple[str, str]:
    """The gateway's base URL and the call's query from a realtime WebSocket URL."""
    parts = urlsplit(url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return f"{scheme}://{parts.netloc}", f"?{parts.query}" if parts.query else ""


async def open_call(url: str, mode: str) -> tuple[BenchCall, Any]:
    """A call with the mode's turn detection, or ``Refused`` (an ``error`` answering the update)."""
    base, query = call_address(url)
    mic = make_mic()
    call = BenchCall(base, mic, query)
    try:
        await call.connect(timeout=120)
        await call.until("session.created", timeout=600)
        t = time.monotonic()
        call.send({"type": "session.update", "session": {
            "type": "realtime", "max_output_tokens": MAX_TOKENS, "audio": {"input": {"turn_detection": MODES[mode]}}}})
        deadline = t + 30
        while True:
            err = next((e for tt, e in call.events if tt >= t and e["type"] == "error"), None)
            if err is not None:
                raise Refused(err["error"].get("message") or str(err["error"]))
            if call.first("session.updated", t) is not None:
                return call, mic
            if time.monotonic() > deadline:
                raise TimeoutError("no session.updated within 30 s")
            await asyncio.sleep(0.02)
    except BaseException:
        await call.hangup()
        await call.close()
        raise


async def overlap_call(url: str, mode: str, clip: Clip, prompt: str, played_s: float) -> dict[str, Any]:
    """``overlap_trial`` over a call: after ``played_s`` of the long reply came out of the track,
    the clip on the microphone track; the figures from the track and the data channel."""
    it = clip.item
    r: dict[str, Any] = {"mode": mode, "item": it.id, "kind": it.kind, "text": it.text, "voice": it.voice,
                         "prompt": prompt, "played_before_s": played_s, "transport": "webrtc"}
    call, mic = await open_call(url, mode)
    t0 = time.monotonic()
    call.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}})
    call.send({"type": "response.create", "response": {"instructions": LONG_INSTRUCTIONS,
                                                        "max_output_tokens": LONG_TOKENS}})
    reply: str | None = None
    said = False
    r["status"] = "ok"
    seen_frames = seen_events = 0
    starts: list[tuple[float, str]] = []
    heard = 0  # reply frames of the long reply
    current: str | None = None
    try:
        while True:
            await asyncio.sleep(0.02)
            now = time.monotonic()
            for t, ev in call.events[seen_events:]:
                if ev["type"] == "response.created" and reply is None:
                    reply = (ev.get("response") or {}).get("id")
                elif ev["type"] == "output_audio_buffer.started":
                    starts.append((t, ev.get("response_id", "")))
            seen_events = len(call.events)
            for t, is_reply in call.frames[seen_frames:]:  # label as they come (label_frames's rule)
                while starts and starts[0][0] <= t:
                    current = starts.pop(0)[1]
                heard += bool(is_reply and reply is not None and current == reply)
            seen_frames = len(call.frames)
            if not said:
                if reply is not None and heard * FRAME_S >= played_s:
                    mic.say_marked(clip.pcm, {"onset": 0, "last_voiced": clip.last_voiced})
                    said = True
                elif reply is not None and call.first("output_audio_buffer.stopped", t0) is not None \
                        or now - t0 > REPLY_WAIT_S:
                    r["status"] = "short" if heard else "no reply"
                    break
                continue
            lv, onset = mic.marks.get("last_voiced"), mic.marks.get("onset")
            if lv is None:
                continue
            if it.kind == "backchannel":
                if now > lv + BACKCHANNEL_WINDOW_S:
                    break
                continue
            s = _session(call.events)
            nxt = next_reply(s, reply, onset)
            first = None
            if nxt is not None and any(rid == nxt for _, rid in s["started"]):
                first = next((t for t, rid in label_frames(call.frames, s["started"]) if rid == nxt), None)
            if it.kind == "cutin":
                if first is not None or s["resumed"] or now > lv + CUTIN_WAIT_S:
                    break
                continue
            if nxt in s["done"] or first is not None and (mentions(s["text"].get(nxt, ""), it.expect)
                                                          or now > first + NEXT_AUDIO_S):
                break
            if now > lv + NEXT_WAIT_S:
                break
        if said:
            await asyncio.sleep(SETTLE_S)
    finally:
        with contextlib.suppress(Exception):
            call.send({"type": "response.cancel"})
        await call.hangup()
        await call.close()
    events = list(call.events)
    r["events"] = [(round((t - t0) * 1000), e["type"]) for t, e in events
                   if not e["type"].startswith(("response.output_audio_transcript.", "response.output_text."))]
    s = _session(events)
    r.update(user=s["user"], errors=s["errors"], reply_text=s["text"].get(reply, "") if reply else "")
    if not said or reply is None:
        labelled = label_frames(call.frames, s["started"])
        r["reply_audio_s"] = round(sum(rid == reply for _, rid in labelled) * FRAME_S, 2)
        return r
    onset, lv = mic.marks["onset"], mic.marks["last_voiced"]
    r.update(outcome(it.kind, events, list(call.frames), reply, onset, lv, it.expect))
    return r


async def run_all(url: str, part: str, modes: list[str], clips: list[Clip], log) -> tuple[list[dict], dict[str, str]]:
    """``trials.run_all`` for calls: a warm-up, then every clip in every mode, the order rotating."""
    refused: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    long_prompts = prompts(part)
    try:  # warm-up: the first ASR / LLM / TTS calls, and aiortc's
        await overlap_call(url, modes[0], clips[0], long_prompts[0], PLAYED_S[0])
    except Exception as exc:  # noqa: BLE001 - a failed warm-up shows again in the real trials
        log(f"warm-up failed: {exc!r}")
    counters: dict[str, int] = {}
    for clip in clips:
        kind = clip.item.kind
        n = counters[kind] = counters.get(kind, -1) + 1
        mine = modes_for(kind, modes)
        for mode in mine[n % len(mine):] + mine[:n % len(mine)] if mine else []:
            if mode in refused:
                continue
            try:
                row = await overlap_call(url, mode, clip, long_prompts[n % len(long_prompts)],
                                         PLAYED_S[n % len(PLAYED_S)])
            except Refused as exc:
                refused[mode] = str(exc)
                log(f"{mode}: refused: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                row = {"mode": mode, "item": clip.item.id, "kind": kind, "transport": "webrtc", "error": repr(exc)}
            rows.append(row)
            log(row_line(row))
    return rows, refused


def row_line(r: dict[str, Any]) -> str:
    head = f"{r['mode']:19s} {r['item']:8s} webrtc"
    if "error" in r:
        return f"{head} error {r['error']}"
    if r.get("status") != "ok":
        return f"{head} {r.get('status')} (reply {r.get('reply_audio_s')} s) {r.get('reply_text', '')[:60]!r}"
    tail = f"silence={r['silence_ms']} undecided={r['undecided']}"
    if r["kind"] == "backchannel":
        return (f"{head} false={r['false_interruption']} {r['why']} lost={r['story_lost']} back={r['story_back_ms']} "
                f"{tail} {r['text']!r} heard {r['user']}, as backchannel {r['backchannels']}")
    if r["kind"] == "cutin":
        return f"{head} taken={r['taken']} seen={r['seen_ms']} {tail} {r['text']!r} heard {r['user']}"
    return (f"{head} detected={r['detected']} seen={r['seen_ms']} stop={r['stop_ms']} answer={r['answer_ms']} "
            f"relevant={r['relevant']} {tail} heard {r['user']} -> {r['next_text'][:80]!r}")


def run_cli(args) -> dict[str, Any]:
    """``python -m bench duplex --transport webrtc``: the overlap kinds, the modes a call can run."""
    raise_fd_limit()
    modes = list(getattr(args, "modes", None) or [m for m in MODES if m != LIVE])
    bad = [m for m in modes if m not in MODES or m == LIVE]
    if bad:
        raise SystemExit(f"modes {bad} do not run over a call; use some of {[m for m in MODES if m != LIVE]}")
    kinds = list(getattr(args, "kinds", None) or OVERLAP_KINDS)
    bad = [k for k in kinds if k not in OVERLAP_KINDS]
    if bad:
        raise SystemExit(f"kinds {bad} do not run over a call; use some of {list(OVERLAP_KINDS)}")
    part = getattr(args, "set", None) or "eval"
    if part == "eval":  # the held-out part: every run is on record (issue 69), as over the WebSocket
        from bench.eval_log import log_eval_run

        log_eval_run("duplex eval (webrtc)", getattr(args, "purpose", None) or "figure")
    clips = [synthesize(it) for kind in kinds for it in items(part, kind, getattr(args, "limit", None))]
    return measure("webrtc", part, modes, kinds, clips, getattr(args, "runs", None) or 3, run_all)
