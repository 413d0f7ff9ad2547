"""Full duplex as people talk (issue 34): a Full-Duplex-Bench-style table through the real realtime API.

    python -m bench duplex                                   # eval part, all kinds and modes, 3 runs
    python -m bench duplex --set dev --limit 2 --runs 1      # a smoke run (~3 min)
    python -m bench duplex --kinds backchannel interruption --modes semantic_vad no_backchannel_rule
    python -m bench duplex --json --out bench/results

A real gateway + one cascade worker (``bench/launch.py``); one fresh GA WebSocket session per
trial, ``?extensions=all``. The microphone never stops: 20 ms chunks of PCM16 24 kHz on a
wall-clock schedule, silence between the clips. The listener's playback is simulated as the
OpenAI clients do it: the assistant's audio plays in real time from its first
``response.output_audio.delta``; ``input_audio_buffer.speech_started`` clears the play-out buffer
(later audio of the cut response is not played) and sends ``conversation.item.truncate`` with the
milliseconds played (as the Agents SDK does). The set is ``bench/sets/duplex.py`` (``--set dev`` or
``eval``), spoken by ``bench/duplex_set.py``.

Trials, per mode:

- complete: the clip after 0.5 s of silence. Turn latency = first audio delta minus the send time
  of the chunk holding the last voiced sample; no audio within 10 s is "no answer".
- paused: a takeover is a response created, or audio arriving, inside the pause (before the chunk
  where the speech resumes was sent).
- backchannel: a long-answer prompt as text (``conversation.item.create`` + ``response.create``
  with instructions to answer at length); once 1.5-2.5 s of its audio has been played (fixed per
  item), the clip is streamed. A false interruption is ``speech_started`` from the clip's onset to
  3 s after it, the reply's ``response.done`` cancelled, or a new ``response.created`` in that
  window. A reply whose audio ended before the clip was due is not a trial ("short"), and neither
  is one that had finished playing before the clip's last voiced sample ("ended"): both are counted
  apart.
- interruption: the same, with the interruption clip. Detected: ``speech_started`` from its onset
  to 2 s after its last voiced sample. Seen = that ``speech_started`` minus the onset (the send
  time of the clip's first voiced chunk). Stop = the later of the cut reply's last audio delta and
  its ``response.done`` minus the onset, when the reply was still being sent at the onset (else
  nothing was left to stop but the client's buffer: stop = seen); none when the reply never ended. Answer = first audio of the next
  reply minus the clip's last voiced sample (the quantity Full-Duplex-Bench calls interruption
  latency). Relevance: the next reply's transcript contains one of the item's ``expect`` keywords
  (lower case, a word beginning with it), judged on the reply's first words (up to its end, the
  keyword, or 6 s of its audio).

Modes: ``server_vad`` (silence_duration_ms 500), ``semantic_vad`` (eagerness auto), and for the
backchannel and interruption trials ``no_backchannel_rule`` (semantic_vad with
``"ignore_backchannels": false``: every voice over the reply is a barge-in). Trials interleave
modes per item (the order rotating). Each figure is reported per run and as the median of
``--runs`` (default 3) with the spread; the goals are judged on the median.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
import time
from typing import Any

import numpy as np
import websockets

from bench.duplex_set import KINDS, RATE, Clip, items, prompts, synthesize
from bench.launch import cascade_realtime_url, raise_fd_limit
from bench.stats import goal_mark, median_by_mode, summary
from bench.turns import MAX_TOKENS, Refused, open_session  # one GA session setup for both turn benches

CHUNK_MS = 20
CHUNK = RATE * CHUNK_MS // 1000
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
}
OVERLAP_ONLY = {"no_backchannel_rule"}  # modes run on backchannel and interruption trials only

# Published Full-Duplex-Bench v1 figures (Lin et al., 2025): pause takeover rate, smooth turn-taking
# latency, user-interruption latency (s).
ANCHORS = [("Moshi", 0.985, 0.265, 0.257), ("Gemini Live", 0.255, 1.301, 1.183), ("Freeze-Omni", 0.642, 0.953, 1.409)]


def mentions(text: str, keywords: tuple[str, ...] | list[str]) -> bool:
    """Whether ``text`` has a word beginning with one of ``keywords`` (case-insensitive):
    "penguin" matches "Penguins", "colo" matches "colour" and "colors"."""
    low = text.lower()
    return any(re.search(r"\b" + re.escape(k.lower()), low) for k in keywords)


class Mic:
    """A microphone that never stops: 20 ms chunks on a wall-clock schedule, silence unless a clip
    is queued. ``say`` queues a clip; ``marks`` gets the send time of the chunk holding each
    marked sample (named offsets into the clip)."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.queue = np.zeros(0, np.int16)
        self.sent = 0  # samples sent
        self.wanted: dict[str, int] = {}
        self.marks: dict[str, float] = {}
        self.task: asyncio.Task | None = None

    def start(self) -> Mic:
        self.task = asyncio.create_task(self._run())
        return self

    def say(self, pcm: np.ndarray, marks: dict[str, int]) -> None:
        at = self.sent + self.queue.size
        self.wanted.update({name: at + offset for name, offset in marks.items()})
        self.queue = np.concatenate([self.queue, pcm.astype(np.int16)])

    @property
    def speaking(self) -> bool:
        return self.queue.size > 0

    async def _run(self) -> None:
        t0 = time.monotonic()
        n = 0
        while True:
            await asyncio.sleep(max(0.0, t0 + n * CHUNK_MS / 1000 - time.monotonic()))
            chunk = self.queue[:CHUNK]
            self.queue = self.queue[CHUNK:]
            if chunk.size < CHUNK:
                chunk = np.concatenate([chunk, np.zeros(CHUNK - chunk.size, np.int16)])
            now = time.monotonic()
            for name, at in self.wanted.items():
                if name not in self.marks and self.sent <= at < self.sent + CHUNK:
                    self.marks[name] = now
            await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                           "audio": base64.b64encode(chunk.astype("<i2").tobytes()).decode()}))
            self.sent += CHUNK
            n += 1

    def check(self) -> None:
        if self.task is not None and self.task.done() and not self.task.cancelled() and self.task.exception():
            raise self.task.exception()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


class Player:
    """The listener's play-out buffer: each delta plays after the ones before it, in real time."""

    def __init__(self) -> None:
        self.segments: list[list[Any]] = []  # [item_id, response_id, start, end]
        self.end = 0.0
        self.gaps_s = 0.0  # silences inside an item: its audio came slower than real time

    def add(self, now: float, item_id: str, response_id: str, seconds: float) -> None:
        if self.segments and self.segments[-1][0] == item_id and now > self.end:
            self.gaps_s += now - self.end
        start = max(now, self.end)
        self.end = start + seconds
        self.segments.append([item_id, response_id, start, self.end])

    def played_s(self, item_id: str, now: float) -> float:
        return sum(max(0.0, min(now, e) - s) for i, _, s, e in self.segments if i == item_id)

    def playing(self, now: float, finished: set[str] | frozenset[str] = frozenset()) -> tuple[str, str] | None:
        """(item, response) being heard at ``now``: audio is playing, or the buffer ran dry but the
        response (not in ``finished``) has more to come; None when nothing is."""
        for i, r, s, e in reversed(self.segments):
            if s <= now:
                return (i, r) if now < e or r not in finished else None
        return None

    def clear(self, now: float) -> None:
        for seg in self.segments:
            seg[3] = min(seg[3], max(seg[2], now))
        self.end = min(self.end, now)


class Trial:
    """One session's events, timed; the listener's playback and truncates."""

    def __init__(self, ws, mic: Mic) -> None:
        self.ws, self.mic = ws, mic
        self.t0 = time.monotonic()
        self.player = Player()
        self.created: dict[str, float] = {}
        self.order: list[str] = []
        self.first_audio: dict[str, float] = {}
        self.last_audio: dict[str, float] = {}
        self.done: dict[str, tuple[float, str, str | None]] = {}  # id -> (time, status, reason)
        self.items: dict[str, str] = {}  # response id -> its audio item
        self.text: dict[str, str] = {}  # response id -> transcript so far (or the final one)
        self.cut: set[str] = set()  # responses whose audio the listener cleared
        self.resumed: set[str] = set()
        self.speech_started: list[float] = []
        self.truncates: list[dict[str, Any]] = []
        self.backchannels: list[tuple[float, str]] = []  # (time, the words the server heard)
        self.user: list[str] = []
        self.errors: list[str] = []
        self.events: list[tuple[float, str]] = []

    async def pump(self, timeout: float = 0.01) -> bool:
        """Handle the events that came within ``timeout``; False when none did."""
        self.mic.check()
        try:
            ev = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        except asyncio.TimeoutError:
            return False
        self.handle(ev, time.monotonic())
        while True:  # everything already queued, without waiting
            try:
                ev = json.loads(await asyncio.wait_for(self.ws.recv(), 0.0005))
            except asyncio.TimeoutError:
                return True
            self.handle(ev, time.monotonic())

    def handle(self, ev: dict[str, Any], now: float) -> None:
        kind = ev["type"]
        if kind == "response.output_audio.delta":
            rid = ev.get("response_id", "?")
            self.last_audio[rid] = now
            if rid not in self.first_audio:
                self.first_audio[rid] = now
                self.events.append((now, "first_audio"))
            self.items.setdefault(rid, ev.get("item_id", "?"))
            if rid not in self.cut:
                seconds = len(base64.b64decode(ev.get("delta", ""))) / 2 / RATE
                self.player.add(now, ev.get("item_id", "?"), rid, seconds)
            return
        if kind in ("response.output_audio_transcript.delta", "response.output_text.delta"):
            rid = ev.get("response_id", "?")
            self.text[rid] = self.text.get(rid, "") + ev.get("delta", "")
            return
        if kind in ("response.output_audio_transcript.done", "response.output_text.done"):
            final = ev.get("transcript", ev.get("text"))
            if final:
                self.text[ev.get("response_id", "?")] = final
            return
        if kind == "input_audio_buffer.append":
            return
        self.events.append((now, kind))
        if kind == "response.created":
            rid = ev["response"]["id"]
            self.created[rid] = now
            self.order.append(rid)
        elif kind == "response.done":
            r = ev["response"]
            self.done[r["id"]] = (now, r.get("status", "?"), (r.get("status_details") or {}).get("reason"))
        elif kind == "input_audio_buffer.speech_started":
            self.speech_started.append(now)
            heard = self.player.playing(now, self.done.keys() | self.cut)
            if heard is not None:  # the client stops playing and says how much was heard
                item_id, rid = heard
                played_ms = int(self.player.played_s(item_id, now) * 1000)
                self.player.clear(now)
                self.cut.add(rid)
                self.truncates.append({"item_id": item_id, "audio_end_ms": played_ms, "at": now})
                asyncio.ensure_future(self.ws.send(json.dumps({
                    "type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                    "audio_end_ms": played_ms})))
        elif kind == "input_audio_buffer.backchannel":
            self.backchannels.append((now, ev.get("transcript") or ""))
        elif kind == "response.resumed":
            self.resumed.add(ev.get("response_id", "?"))
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.user.append(ev.get("transcript", ""))
        elif kind == "error":
            self.errors.append(ev["error"].get("message", ""))

    def rel_ms(self, t: float | None, origin: float | None) -> float | None:
        return None if t is None or origin is None else round((t - origin) * 1000, 1)

    def timeline(self) -> list[tuple[int, str]]:
        return [(round((t - self.t0) * 1000), k) for t, k in self.events]

    async def close(self) -> None:
        self.mic.stop()
        try:
            await self.ws.send(json.dumps({"type": "response.cancel"}))
        except websockets.ConnectionClosed:
            pass
        await self.ws.close()


async def turn_trial(url: str, mode: str, clip: Clip) -> dict[str, Any]:
    """A complete or paused clip after LEAD_S of silence: latency, or a takeover in the pause."""
    it = clip.item
    r: dict[str, Any] = {"mode": mode, "item": it.id, "kind": it.kind, "text": it.text, "voice": it.voice}
    ws = await open_session(url, MODES[mode])
    mic = Mic(ws).start()
    tr = Trial(ws, mic)
    marks = {"last_voiced": clip.last_voiced}
    if clip.pause_start is not None:
        marks.update(pause_start=clip.pause_start, resume=clip.resume)
    mic.say(np.concatenate([np.zeros(int(LEAD_S * RATE), np.int16), clip.pcm]),
            {k: v + int(LEAD_S * RATE) for k, v in marks.items()})
    try:
        while True:
            await tr.pump()
            now = time.monotonic()
            lv = mic.marks.get("last_voiced")
            if lv is not None and now > lv + WAIT_S:
                break
            if lv is not None and any(t >= lv for t in tr.first_audio.values()):
                if it.kind == "complete":
                    break
                resume = mic.marks.get("resume")
                if any(tr.created.get(rid, 0) >= resume for rid in tr.first_audio):
                    break
        settle = time.monotonic() + 0.5  # the turn's transcript may still be on its way
        while not tr.user and time.monotonic() < settle:
            await tr.pump(0.05)
    finally:
        await tr.close()
    lv = mic.marks.get("last_voiced")
    after = [t for t in tr.first_audio.values() if lv is not None and t >= lv]
    r.update(user=tr.user, errors=tr.errors, events=tr.timeline())
    if it.kind == "complete":
        r["latency_ms"] = tr.rel_ms(min(after), lv) if after else None
        r["answered"] = bool(after)
        r["early_audio"] = any(lv is None or t < lv for t in tr.first_audio.values())
    else:
        pause, resume = mic.marks.get("pause_start"), mic.marks.get("resume")
        in_pause = [t for t in list(tr.created.values()) + list(tr.first_audio.values())
                    if pause is not None and pause <= t < (resume or float("inf"))]
        r["takeover"] = bool(in_pause)
        r["takeover_ms_after_pause"] = tr.rel_ms(min(in_pause), pause) if in_pause else None
        full = [t for rid, t in tr.first_audio.items() if resume is not None and tr.created.get(rid, 0) >= resume]
        r["answered"] = bool(full)
        r["latency_ms"] = tr.rel_ms(min(full), lv) if full else None
    return r


async def overlap_trial(url: str, mode: str, clip: Clip, prompt: str, played_s: float) -> dict[str, Any]:
    """A long reply plays; after ``played_s`` of it has been heard, the clip (a backchannel or an
    interruption) is streamed over it."""
    it = clip.item
    r: dict[str, Any] = {"mode": mode, "item": it.id, "kind": it.kind, "text": it.text, "voice": it.voice,
                         "prompt": prompt, "played_before_s": played_s}
    ws = await open_session(url, MODES[mode])
    mic = Mic(ws).start()
    tr = Trial(ws, mic)
    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}}))
    await ws.send(json.dumps({"type": "response.create", "response": {
        "instructions": LONG_INSTRUCTIONS, "max_output_tokens": LONG_TOKENS}}))
    asked = time.monotonic()
    reply: str | None = None  # the long reply's response id
    said = False
    r["status"] = "ok"
    try:
        while True:
            await tr.pump()
            now = time.monotonic()
            if reply is None and tr.order:
                reply = tr.order[0]
            if not said:
                item = tr.items.get(reply) if reply else None
                if item is not None and tr.player.played_s(item, now) >= played_s:
                    mic.say(clip.pcm, {"onset": 0, "last_voiced": clip.last_voiced})
                    said = True
                elif reply in tr.done and tr.player.end <= now or now - asked > REPLY_WAIT_S:
                    r["status"] = "short" if reply in tr.first_audio else "no reply"
                    break
                continue
            lv, onset = mic.marks.get("last_voiced"), mic.marks.get("onset")
            if lv is None:
                continue
            if it.kind == "backchannel":
                if now > lv + BACKCHANNEL_WINDOW_S:
                    break
                continue
            nxt = _next_reply(tr, reply, onset)
            first = tr.first_audio.get(nxt) if nxt is not None else None
            if nxt in tr.done or first is not None and (mentions(tr.text.get(nxt, ""), it.expect)
                                                        or now > first + NEXT_AUDIO_S):
                break
            if now > lv + NEXT_WAIT_S:
                break
        if said:
            settle = time.monotonic() + 0.3
            while time.monotonic() < settle:
                await tr.pump(0.05)
    finally:
        await tr.close()
    r.update(user=tr.user, errors=tr.errors, events=tr.timeline(), truncates=[
        {"item_id": t["item_id"], "audio_end_ms": t["audio_end_ms"], "at_ms": round((t["at"] - tr.t0) * 1000)}
        for t in tr.truncates], backchannels=[w for _, w in tr.backchannels], resumed=len(tr.resumed),
        reply_text=tr.text.get(reply, "") if reply else "")
    if not said:
        return r
    onset, lv = mic.marks.get("onset"), mic.marks.get("last_voiced")
    reply_end = tr.player.end if reply not in tr.cut else None  # when the uncut reply stops playing
    r["reply_gaps_s"] = round(tr.player.gaps_s, 2)
    r["reply_audio_s"] = round(sum(e - s for i, _, s, e in tr.player.segments if i == tr.items.get(reply)), 2)
    starts = [t for t in tr.speech_started if onset <= t]
    done_t, status, reason = tr.done.get(reply, (None, None, None))
    r.update(reply_status=status, reply_reason=reason)
    if it.kind == "backchannel":
        window = lv + BACKCHANNEL_WINDOW_S
        seen = [t for t in starts if t <= window]
        new = [rid for rid in tr.order if rid != reply and onset <= tr.created[rid] <= window]
        cancelled = status == "cancelled" and done_t is not None and done_t >= onset
        r["why"] = [w for w, yes in (("speech_started", bool(seen)), ("cancelled", cancelled),
                                     ("new_response", bool(new))) if yes]
        r["false_interruption"] = bool(r["why"])
        if reply_end is not None and reply_end < lv and not r["false_interruption"]:
            r["status"] = "ended"  # the reply had stopped playing before the backchannel did
        r["backchannel_ms"] = tr.rel_ms(tr.backchannels[0][0], onset) if tr.backchannels else None
        return r
    seen = [t for t in starts if t <= lv + DETECT_WINDOW_S]
    r["detected"] = bool(seen)
    r["seen_ms"] = tr.rel_ms(seen[0], onset) if seen else None
    r["stop_ms"] = None  # not seen, or the reply never ended within the trial
    if seen and done_t is not None:
        stop_t = max(tr.last_audio.get(reply, seen[0]), done_t) if done_t >= onset else seen[0]
        r["stop_ms"] = tr.rel_ms(stop_t, onset)
    nxt = _next_reply(tr, reply, onset)
    text = tr.text.get(nxt, "") if nxt else ""
    r["next_text"] = text
    r["relevant"] = bool(nxt) and mentions(text, it.expect)
    first = tr.first_audio.get(nxt) if nxt else None
    r["answer_ms"] = tr.rel_ms(first, lv) if first is not None else None
    return r


def _next_reply(tr: Trial, reply: str | None, onset: float | None) -> str | None:
    """The first response created after the onset that is neither the long reply nor its resumption."""
    if onset is None:
        return None
    return next((rid for rid in tr.order if rid != reply and rid not in tr.resumed and tr.created[rid] >= onset),
                None)


def modes_for(kind: str, modes: list[str]) -> list[str]:
    return [m for m in modes if kind in ("backchannel", "interruption") or m not in OVERLAP_ONLY]


async def run_all(url: str, part: str, modes: list[str], clips: list[Clip], log) -> tuple[list[dict], dict[str, str]]:
    refused: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    long_prompts = prompts(part)
    try:  # warm-up: the first ASR / LLM / TTS calls
        turn = next((c for c in clips if c.item.kind in ("complete", "paused")), None)
        if turn is not None:
            await turn_trial(url, "server_vad", turn)
        else:
            await overlap_trial(url, "server_vad", clips[0], long_prompts[0], PLAYED_S[0])
    except Exception as exc:  # noqa: BLE001 - a failed warm-up shows again in the real trials
        log(f"warm-up failed: {exc!r}")
    counters: dict[str, int] = {}
    for clip in clips:
        kind = clip.item.kind
        n = counters[kind] = counters.get(kind, -1) + 1
        mine = modes_for(kind, modes)
        if not mine:
            continue
        for mode in mine[n % len(mine):] + mine[:n % len(mine)]:
            if mode in refused:
                continue
            try:
                if kind in ("complete", "paused"):
                    row = await turn_trial(url, mode, clip)
                else:
                    row = await overlap_trial(url, mode, clip, long_prompts[n % len(long_prompts)],
                                              PLAYED_S[n % len(PLAYED_S)])
            except Refused as exc:
                refused[mode] = str(exc)
                log(f"{mode}: refused: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - counted, not fatal
                row = {"mode": mode, "item": clip.item.id, "kind": kind, "error": repr(exc)}
            rows.append(row)
            log(_row_line(row))
    return rows, refused


def _row_line(r: dict[str, Any]) -> str:
    head = f"{r['mode']:19s} {r['item']:8s}"
    if "error" in r:
        return f"{head} error {r['error']}"
    kind = r["kind"]
    if kind == "complete":
        return f"{head} latency={r['latency_ms']} {r['user']}"
    if kind == "paused":
        return f"{head} takeover={r['takeover']} latency={r['latency_ms']} {r['user']}"
    if r.get("status") != "ok":
        return f"{head} {r.get('status')} (reply {r.get('reply_audio_s')} s) {r.get('reply_text', '')[:60]!r}"
    if kind == "backchannel":
        return (f"{head} false={r['false_interruption']} {r['why']} {r['text']!r} heard {r['user']}, "
                f"as backchannel {r['backchannels']}")
    return (f"{head} detected={r['detected']} seen={r['seen_ms']} stop={r['stop_ms']} answer={r['answer_ms']} "
            f"relevant={r['relevant']} heard {r['user']} -> {r['next_text'][:80]!r}")


def _nan_none(v: float) -> float | None:
    return None if isinstance(v, float) and np.isnan(v) else v


def _share(k: int, n: int) -> float | None:
    return round(k / n, 3) if n else None


def summarise(rows: list[dict[str, Any]], modes: list[str], refused: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        if mode in refused:
            out[mode] = {"refused": refused[mode]}
            continue
        mine = [r for r in rows if r["mode"] == mode and "error" not in r]
        comp = [r for r in mine if r["kind"] == "complete"]
        paused = [r for r in mine if r["kind"] == "paused"]
        bc_all = [r for r in mine if r["kind"] == "backchannel"]
        bc = [r for r in bc_all if r.get("status") == "ok"]
        ints_all = [r for r in mine if r["kind"] == "interruption"]
        ints = [r for r in ints_all if r.get("status") == "ok"]
        lat = summary([r["latency_ms"] for r in comp if r["latency_ms"] is not None])
        seen = summary([r["seen_ms"] for r in ints if r["seen_ms"] is not None])
        stop = summary([r["stop_ms"] for r in ints if r["stop_ms"] is not None])
        answer = summary([r["answer_ms"] for r in ints if r["answer_ms"] is not None])
        takeovers = sum(r["takeover"] for r in paused)
        false = sum(r["false_interruption"] for r in bc)
        detected = sum(r["detected"] for r in ints)
        relevant = sum(r["relevant"] for r in ints)
        out[mode] = {
            "complete": len(comp), "turn_p50_ms": _nan_none(lat["p50"]), "turn_p90_ms": _nan_none(lat["p90"]),
            "no_answer": sum(not r["answered"] for r in comp),
            "paused": len(paused), "takeovers": takeovers, "pause_takeover": _share(takeovers, len(paused)),
            "backchannels": len(bc), "bc_not_trials": len(bc_all) - len(bc), "bc_false": false,
            "bc_false_rate": _share(false, len(bc)),
            "interruptions": len(ints), "int_not_trials": len(ints_all) - len(ints), "detected": detected,
            "detected_share": _share(detected, len(ints)), "seen_p50_ms": _nan_none(seen["p50"]),
            "seen_p90_ms": _nan_none(seen["p90"]), "stop_p50_ms": _nan_none(stop["p50"]),
            "answer_p50_ms": _nan_none(answer["p50"]), "relevant": relevant, "relevance": _share(relevant, len(ints)),
            "errors": sum("error" in r for r in rows if r["mode"] == mode),
            # long replies whose audio came slower than real time (the listener heard a gap): a loaded machine
            "reply_gaps": sum(r.get("reply_gaps_s", 0) > 0.1 for r in bc + ints),
        }
    base = out.get("server_vad", {}).get("turn_p50_ms")
    for s in out.values():
        if "refused" not in s:
            ok = base and s["turn_p50_ms"] is not None and s["complete"]
            s["ratio_to_server_vad"] = round(s["turn_p50_ms"] / base, 3) if ok else None
    return out


MEDIAN_KEYS = ("pause_takeover", "takeovers", "turn_p50_ms", "turn_p90_ms", "ratio_to_server_vad", "no_answer",
               "detected_share", "seen_p50_ms", "seen_p90_ms", "stop_p50_ms", "answer_p50_ms", "relevance",
               "bc_false_rate", "bc_false", "errors")
COUNT_KEYS = ("complete", "paused", "backchannels", "interruptions", "bc_not_trials", "int_not_trials")


def median_modes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode, each figure's median over the runs with its spread (a refused mode stays refused)."""
    return median_by_mode(runs, MEDIAN_KEYS, COUNT_KEYS)


def goals(median: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 34's goals, judged on the median of the runs: each {"goal", "value", "mark"}."""
    def value(mode: str, key: str) -> float | None:
        s = median.get(mode)
        return None if not s or "refused" in s or s[key]["median"] is None else s[key]["median"]

    out = []
    for mode in ("server_vad", "semantic_vad"):
        if mode not in median:
            continue
        if median[mode].get("backchannels"):
            v = value(mode, "bc_false_rate")
            out.append({"goal": f"{mode}: backchannels taken as interruptions <= {GOAL_BACKCHANNEL:.0%}", "value": v,
                        "mark": goal_mark(v, GOAL_BACKCHANNEL), "shown": None if v is None else f"{v:.0%}"})
        if median[mode].get("interruptions"):
            v = value(mode, "seen_p50_ms")
            out.append({"goal": f"{mode}: interruption seen p50 <= {GOAL_SEEN_MS:.0f} ms after the onset", "value": v,
                        "mark": goal_mark(v, GOAL_SEEN_MS), "shown": None if v is None else f"{v:.0f} ms"})
    if median.get("semantic_vad", {}).get("paused"):
        v = value("semantic_vad", "pause_takeover")
        out.append({"goal": f"semantic_vad: pause takeover <= {GOAL_TAKEOVER}", "value": v,
                    "mark": goal_mark(v, GOAL_TAKEOVER), "shown": None if v is None else f"{v:.2f}"})
    if median.get("semantic_vad", {}).get("complete"):
        sem, base = value("semantic_vad", "turn_p50_ms"), value("server_vad", "turn_p50_ms")
        ratio = round(sem / base, 3) if sem is not None and base else None
        out.append({"goal": f"semantic_vad: turn latency p50 <= {GOAL_RATIO}x server_vad's", "value": ratio,
                    "mark": goal_mark(ratio, GOAL_RATIO), "shown": None if ratio is None else f"{ratio:.2f}x"})
        v = value("semantic_vad", "turn_p90_ms")
        out.append({"goal": f"semantic_vad: turn latency p90 <= {GOAL_P90_MS:.0f} ms", "value": v,
                    "mark": goal_mark(v, GOAL_P90_MS), "shown": None if v is None else f"{v:.0f} ms"})
    return out


def run_cli(args) -> dict[str, Any]:
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
    clips = [synthesize(it) for kind in kinds for it in items(part, kind, limit)]
    if not any(modes_for(c.item.kind, modes) for c in clips):
        raise SystemExit(f"no trial: modes {modes} run none of the kinds {kinds}")

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    runs: list[dict[str, Any]] = []
    with cascade_realtime_url() as url:
        url += "&extensions=all"
        for k in range(max(1, getattr(args, "runs", None) or 3)):
            log(f"run {k + 1}")
            t0, load = time.monotonic(), os.getloadavg()
            rows, refused = asyncio.run(run_all(url, part, modes, clips, log))
            runs.append({"modes": summarise(rows, modes, refused), "wall_s": round(time.monotonic() - t0, 1),
                         "loadavg_start": [round(x, 2) for x in load],
                         "loadavg_end": [round(x, 2) for x in os.getloadavg()], "rows": rows})
    median = median_modes([run["modes"] for run in runs])
    counts = {kind: sum(c.item.kind == kind for c in clips) for kind in kinds}
    return {"set": part, "kinds": kinds, "items": counts, "modes": modes, "runs": runs, "median": median,
            "goals": goals(median)}


def _pct(s: dict[str, Any]) -> str:
    """A median_spread of a share as percentages: "8 % (5-10 %)"."""
    if s["median"] is None:
        return "-"
    lo, hi = round(s["min"] * 100), round(s["max"] * 100)
    return f"{s['median'] * 100:.0f} %" + (f" ({lo}-{hi} %)" if lo != hi else "")


def _ms(s: dict[str, Any], fmt: str = ".0f") -> str:
    if s["median"] is None:
        return "-"
    lo, hi = format(s["min"], fmt), format(s["max"], fmt)
    return format(s["median"], fmt) + (f" ({lo}-{hi})" if lo != hi else "")


def _cell(s: dict[str, Any], key: str, n_key: str, text) -> str:
    return "n/a" if not s[n_key] else text(s[key])


def report(r: dict[str, Any]) -> str:
    n = r["items"]
    lines = [f"Full duplex, {r['set']} set: " + ", ".join(f"{v} {k}" for k, v in n.items())
             + f"; {len(r['runs'])} run(s) (" + ", ".join(
                 f"{run['wall_s']:.0f} s, load {run.get('loadavg_start', [0])[0]:.1f}" for run in r["runs"])
             + f" on {os.cpu_count()} CPUs)",
             "", "Median of the runs (min-max):", "",
             "| mode | pause takeover | turn latency p50 / p90 ms | x server_vad | interruption detected "
             "| seen p50 / p90 ms | stop p50 ms | answer p50 ms | relevance | backchannel false interruptions |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, s in r["median"].items():
        if "refused" in s:
            lines.append(f"| {mode} | refused: {s['refused']} | | | | | | | | |")
            continue
        turn = "n/a" if not s["complete"] else f"{_ms(s['turn_p50_ms'])} / {_ms(s['turn_p90_ms'])}"
        if s["complete"] and s["no_answer"]["median"]:
            turn += f" ({s['no_answer']['text']} no answer)"
        ratio = _ms(s["ratio_to_server_vad"], ".2f")
        seen = "n/a" if not s["interruptions"] else f"{_ms(s['seen_p50_ms'])} / {_ms(s['seen_p90_ms'])}"
        errors = f" ({s['errors']['text']} errors)" if s["errors"]["median"] else ""
        lines.append(
            f"| {mode}{errors} | {_cell(s, 'pause_takeover', 'paused', _pct)} | {turn} | {ratio} | "
            f"{_cell(s, 'detected_share', 'interruptions', _pct)} | {seen} | "
            f"{_cell(s, 'stop_p50_ms', 'interruptions', _ms)} | {_cell(s, 'answer_p50_ms', 'interruptions', _ms)} | "
            f"{_cell(s, 'relevance', 'interruptions', _pct)} | {_cell(s, 'bc_false_rate', 'backchannels', _pct)} |")
    skipped = [f"{mode}: {s['bc_not_trials']} backchannel, {s['int_not_trials']} interruption"
               for mode, s in r["median"].items() if "refused" not in s and (s["bc_not_trials"] or s["int_not_trials"])]
    if skipped:
        lines += ["", "Not trials in the first run (the long reply ended before the clip): " + "; ".join(skipped)]
    gaps = [f"{mode}: {s['reply_gaps']} of {s['backchannels'] + s['interruptions']}"
            for mode, s in r["runs"][0]["modes"].items() if "refused" not in s and s.get("reply_gaps")]
    if gaps:
        lines += ["", "Long replies that ran dry while playing (audio slower than real time) in the first run: "
                  + "; ".join(gaps)]
    if len(r["runs"]) > 1:
        lines += ["", "Per run: turn latency p50 ms, pause takeover, seen p50 ms, relevance, backchannel false "
                      "interruptions:", ""]
        for mode in r["modes"]:
            per = []
            for run in r["runs"]:
                s = run["modes"].get(mode, {})
                if "refused" in s or not s:
                    per.append("refused")
                    continue
                per.append(" / ".join("-" if s[k] is None else f"{s[k]:.0f}" if k.endswith("ms") else f"{s[k]:.2f}"
                                      for k in ("turn_p50_ms", "pause_takeover", "seen_p50_ms", "relevance",
                                                "bc_false_rate")))
            lines.append(f"- {mode}: " + "; ".join(per))
    lines += ["", "Goals (median of the runs):", ""]
    lines += [f"- {g['goal']}: {g['mark']}" + ("" if g["shown"] is None else f" ({g['shown']})") for g in r["goals"]]
    if not r["goals"]:
        lines.append("- none measured (needs server_vad and semantic_vad)")
    lines += ["", "Full-Duplex-Bench v1, published (pause takeover rate / turn-taking latency / user-interruption "
                  "latency): " + "; ".join(f"{name} {a} / {b} s / {c} s" for name, a, b, c in ANCHORS)
              + ". Their interruption latency runs from the end of the user's interruption to the model's reply "
                "(our 'answer' column), not from its onset (our 'seen')."]
    return "\n".join(lines)
