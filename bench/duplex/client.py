"""The listener's side of one trial: a microphone that never stops (``Mic``), the simulated
play-out buffer (``Player``) and one session's events, timed, with the truncates a client sends
on barge-in (``Trial``). ``bench/duplex/room.py`` gives the microphone a room: it hears what the
player played (a ``Player(keep=True)`` keeps the samples) and noise, through ``Mic.hear``."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import numpy as np
import websockets

from bench.duplex.common import CHUNK, CHUNK_MS, GRID_CHUNKS, LIVE_GAP_S
from bench.duplex_set import RATE


class Mic:
    """A microphone that never stops: 20 ms chunks on a wall-clock schedule, silence unless a clip
    is queued. ``say`` queues a clip; ``marks`` gets the send time of the chunk holding each
    marked sample (named offsets into the clip)."""

    def __init__(self, ws, append: str = "input_audio_buffer.append") -> None:
        self.ws = ws
        self.append = append  # the event that carries a chunk (Live: session.input_audio.append)
        self.queue = np.zeros(0, np.int16)
        self.sent = 0  # samples sent
        self.wanted: dict[str, int] = {}
        self.marks: dict[str, float] = {}
        self.task: asyncio.Task | None = None

    def start(self) -> Mic:
        self.task = asyncio.create_task(self._run())
        return self

    def say(self, pcm: np.ndarray, marks: dict[str, int], grid_place: int | None = None) -> None:
        """Queue ``pcm``; ``grid_place``: after whole chunks of silence, so that it starts on a chunk
        whose index is that modulo ``GRID_CHUNKS`` (its place on the server VAD's window grid)."""
        if grid_place is not None:
            index = (self.sent + self.queue.size) // CHUNK
            pad = (grid_place - index) % GRID_CHUNKS * CHUNK
            pcm = np.concatenate([np.zeros(pad, np.int16), pcm])
            marks = {name: offset + pad for name, offset in marks.items()}
        at = self.sent + self.queue.size
        self.wanted.update({name: at + offset for name, offset in marks.items()})
        self.queue = np.concatenate([self.queue, pcm.astype(np.int16)])

    @property
    def speaking(self) -> bool:
        return self.queue.size > 0

    def hear(self, voice: np.ndarray, end: float) -> np.ndarray:
        """The chunk the microphone sends: the queued voice (int16) alone here; a room adds what else
        it hears over the chunk's span, which ends at ``end`` (monotonic seconds)."""
        return voice

    async def _run(self) -> None:
        t0 = time.monotonic()
        n = 0
        while True:
            due = t0 + n * CHUNK_MS / 1000
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            chunk = self.queue[:CHUNK]
            self.queue = self.queue[CHUNK:]
            if chunk.size < CHUNK:
                chunk = np.concatenate([chunk, np.zeros(CHUNK - chunk.size, np.int16)])
            now = time.monotonic()
            for name, at in self.wanted.items():
                if name not in self.marks and self.sent <= at < self.sent + CHUNK:
                    self.marks[name] = now
            chunk = self.hear(chunk, due)
            await self.ws.send(json.dumps({"type": self.append,
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
    """The listener's play-out buffer: each delta plays after the ones before it, in real time.
    With ``keep``, each segment's samples too (``pcm``, int16 at ``RATE``, from the segment's start;
    a clear cuts where the segment stops sounding, not its samples): what the loudspeaker played."""

    def __init__(self, keep: bool = False) -> None:
        self.segments: list[list[Any]] = []  # [item_id, response_id, start, end]
        self.keep = keep
        self.pcm: list[np.ndarray] = []  # with keep: the samples of each segment
        self.end = 0.0
        self.gaps_s = 0.0  # silences inside an item: its audio came slower than real time
        self._cleared = False  # the last thing that happened was a clear

    def add(self, now: float, item_id: str, response_id: str, seconds: float, pcm: np.ndarray | None = None) -> None:
        if self.segments and self.segments[-1][0] == item_id and now > self.end and not self._cleared:
            self.gaps_s += now - self.end  # (after a clear the silence is the client's, not a slow reply)
        self._cleared = False
        start = max(now, self.end)
        self.end = start + seconds
        self.segments.append([item_id, response_id, start, self.end])
        if self.keep:
            self.pcm.append(pcm if pcm is not None else np.zeros(round(seconds * RATE), np.int16))

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
        self._cleared = True

    def heard_end(self, response_id: str) -> float | None:
        """When the listener last heard the response: the end of its last segment that sounded
        (clears applied; audio that came after a clear plays too, as a client plays what it gets)."""
        ends = [e for _, r, s, e in self.segments if r == response_id and e > s]
        return max(ends) if ends else None


def rel_ms(t: float | None, origin: float | None) -> float | None:
    """Milliseconds from ``origin`` to ``t`` (monotonic seconds), or None where either is missing."""
    return None if t is None or origin is None else round((t - origin) * 1000, 1)


class Trial:
    """One session's events, timed; the listener's playback and truncates."""

    def __init__(self, ws, mic: Mic, live: bool = False, player: Player | None = None) -> None:
        self.ws, self.mic = ws, mic
        self.live = live  # the Live dialect: no response ids, replies told apart by silences
        self._live_reply = 0
        self._live_resumes = False
        self._live_text = ""  # transcript that came while no audio played: the next reply's first words
        self.t0 = time.monotonic()
        self.player = player or Player()
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
        self.committed: list[float] = []  # a user turn committed: the voice was taken as a turn
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
        if self.live:
            ev = self._as_realtime(ev, now)
            if ev is None:
                return
        self._handle(ev, now)

    def _handle(self, ev: dict[str, Any], now: float) -> None:
        kind = ev["type"]
        if kind == "response.output_audio.delta":
            rid = ev.get("response_id", "?")
            self.last_audio[rid] = now
            if rid not in self.first_audio:
                self.first_audio[rid] = now
                self.events.append((now, "first_audio"))
            self.items.setdefault(rid, ev.get("item_id", "?"))
            # Audio of a reply the client cleared still plays when it comes after the clear: what
            # the listener hears is what the server sends (issue 69), not what speech_started says.
            raw = base64.b64decode(ev.get("delta", ""))
            pcm = np.frombuffer(raw[:len(raw) // 2 * 2], "<i2") if self.player.keep else None
            self.player.add(now, ev.get("item_id", "?"), rid, len(raw) / 2 / RATE, pcm)
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
                self.truncates.append({"item_id": item_id, "response_id": rid, "audio_end_ms": played_ms, "at": now})
                asyncio.ensure_future(self.ws.send(json.dumps({
                    "type": "conversation.item.truncate", "item_id": item_id, "content_index": 0,
                    "audio_end_ms": played_ms})))
        elif kind == "input_audio_buffer.committed":
            self.committed.append(now)
        elif kind == "input_audio_buffer.backchannel":
            self.backchannels.append((now, ev.get("transcript") or ""))
        elif kind == "response.resumed":
            self.resumed.add(ev.get("response_id", "?"))
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.user.append(ev.get("transcript", ""))
        elif kind == "error":
            self.errors.append(ev["error"].get("message", ""))

    def _as_realtime(self, ev: dict[str, Any], now: float) -> dict[str, Any] | None:
        """A Live event as the Realtime event the trial reads: audio and transcripts of the reply
        heard now (a new one after ``LIVE_GAP_S`` of silence, its first audio its creation), the
        user's transcript, errors."""
        kind = ev["type"]
        if kind in ("session.output_audio.delta", "session.output_transcript.delta"):
            idle = not self.player.segments or now > self.player.end + LIVE_GAP_S
            if kind == "session.output_transcript.delta" and idle:
                # The next reply's first words come before its audio: they are its text.
                self._live_text += ev.get("delta", "")
                return None
            if kind == "session.output_audio.delta" and idle:
                self._live_reply += 1
                rid = f"live_{self._live_reply}"
                self._handle({"type": "response.created", "response": {"id": rid}}, now)
                if self._live_resumes:  # our extension event said the reply that comes next resumes one
                    self._live_resumes = False
                    self.resumed.add(rid)
                if self._live_text:
                    self._handle({"type": "response.output_audio_transcript.delta", "response_id": rid,
                                  "item_id": rid, "delta": self._live_text}, now)
                    self._live_text = ""
            rid = f"live_{self._live_reply}"
            realtime = ("response.output_audio.delta" if kind == "session.output_audio.delta"
                        else "response.output_audio_transcript.delta")
            return {"type": realtime, "response_id": rid, "item_id": rid, "delta": ev.get("delta", "")}
        if kind == "session.usage.updated" and self._live_reply:  # after each response.done
            return {"type": "response.done", "response": {"id": f"live_{self._live_reply}", "status": "completed"}}
        if kind == "response.resumed":
            self._live_resumes = True
            return None
        if kind == "input_audio_buffer.backchannel":
            return ev
        if kind == "session.input_transcript.delta":  # Live: the user's words, a turn taken
            self.committed.append(now)
            return {"type": "conversation.item.input_audio_transcription.completed",
                    "transcript": ev.get("delta", "").strip()}
        if kind == "error":
            return ev
        return None

    def ran_dry_after(self, t0: float) -> float | None:
        """Live: when the listener's player first ran dry after ``t0`` (its audio stopped, none
        within ``LIVE_GAP_S``): a Live client hears the reply stop there, it has no speech_started."""
        end = None
        for s, e in sorted((s, e) for _, _, s, e in self.player.segments):
            if end is not None and end >= t0 and s - end > LIVE_GAP_S:
                return end
            end = e if end is None else max(end, e)
        return end if end is not None and end >= t0 else None

    def rel_ms(self, t: float | None, origin: float | None) -> float | None:
        return rel_ms(t, origin)

    def timeline(self) -> list[tuple[int, str]]:
        return [(round((t - self.t0) * 1000), k) for t, k in self.events]

    async def close(self) -> None:
        self.mic.stop()
        try:
            if not self.live:
                await self.ws.send(json.dumps({"type": "response.cancel"}))
        except websockets.ConnectionClosed:
            pass
        await self.ws.close()
