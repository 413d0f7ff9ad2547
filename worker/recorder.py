"""Session recorder: a wall-clock timeline of everything said, shown and heard in one session.

The conversation must never wait for the disk, so every call from the event loop is an append
to a list plus, now and then, a job for a 4-thread pool (base64 decoding, WAV/JPEG writes,
``recording.json`` snapshots). Audio is grouped into segments of about a second so a session
is a few hundred files, not tens of thousands. ``recording.json`` is rewritten atomically at
least every second while anything happens, so a worker killed mid-reply leaves a readable
recording up to that moment. ``finish`` runs on a separate finaliser thread (it waits for the
session's pending writes, which a pool thread must never do) and builds the merged replay.

Times (``t``) are milliseconds since the session started, measured on the worker when the
event was received from, or handed to, the client's socket.

Turn-taking over a reply becomes its own timeline events (``docs/recording.schema.json``): one
``barge_in`` per interruption (``source: "server"`` when the server cut the reply: a cancel for
``turn_detected``, or a truncation of its own or, on a WebRTC call, the gateway's; ``"client"``
when the client truncated a reply the server had not cut), dated at the ``speech_started`` that
decided it; every truncation as ``truncated`` (the replay's cut); a backchannel the server let
pass (``input_audio_buffer.backchannel``) as ``backchannel``; a falsely interrupted reply played
on (``response.resumed``) as ``resumed``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures as cf
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.files import atomic_write_bytes, atomic_write_json, read_json
from core.media import write_wav
from core.replay import build_replays
from core.session_store import META, RECORDING

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
OUTPUT_RATE = 24000
SEGMENT_S = 1.0  # audio grouped per ~second
USER_GAP_MS = 300  # a pause in arrivals this long starts a new user segment (keeps placement true)
SNAPSHOT_EVERY_S = 1.0
CRITICAL_MAX_S = 3.0  # longest the flushes wait for a reply's first audio
BARGE_WINDOW_MS = 5000.0  # a cut this soon after speech_started was decided by that speech
GATEWAY_EVENT_PREFIX = "gw_"  # event ids of the truncates a WebRTC call's gateway sends (gateway/realtime/webrtc/playback.py)

AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
TOOL_ITEMS = ("function_call", "mcp_call", "mcp_approval_request")
TEXT_DELTAS = (
    "response.output_audio_transcript.delta", "response.audio_transcript.delta", "response.output_text.delta",
    "response.text.delta",
)


class RecorderPool:
    """One per worker process: the writer pool and the finaliser, shared by its sessions."""

    def __init__(self, data_dir: str | Path, threads: int = 4) -> None:
        self.root = Path(data_dir) / "sessions"
        self.writers = cf.ThreadPoolExecutor(threads, thread_name_prefix="recorder", initializer=_lower_priority)
        self.finisher = cf.ThreadPoolExecutor(1, thread_name_prefix="recorder-finish", initializer=_lower_priority)
        self.active: set[SessionRecorder] = set()

    def open(self, session_id: str, meta: dict[str, Any]) -> SessionRecorder:
        rec = SessionRecorder(self, self.root / session_id, session_id, meta)
        self.active.add(rec)
        return rec

    def finish_all(self, reason: str = "worker_shutdown") -> None:
        """Worker shutdown is an end path too (call on the event loop)."""
        for rec in list(self.active):
            rec.finish(reason, 1001)

    def shutdown(self) -> None:
        """Wait for every pending write and replay (blocking: call in a thread)."""
        self.finisher.shutdown(wait=True)
        self.writers.shutdown(wait=True)


class _Segment:
    __slots__ = ("t", "chunks", "nbytes", "rate", "last", "item_id", "response_id")

    def __init__(self, t: float, rate: int, item_id: str | None = None, response_id: str | None = None) -> None:
        self.t = t
        self.chunks: list[str | bytes] = []  # base64 (decoded in the pool) or PCM
        self.nbytes = 0
        self.rate = rate
        self.last = t
        self.item_id = item_id
        self.response_id = response_id

    def add(self, chunk: str | bytes) -> None:
        """A piece of audio: base64 (an event's) or PCM (a call's binary frame)."""
        self.chunks.append(chunk)
        self.nbytes += len(chunk) if isinstance(chunk, bytes) else len(chunk) * 3 // 4


class SessionRecorder:
    def __init__(self, pool: RecorderPool, path: Path, session_id: str, meta: dict[str, Any]) -> None:
        self.pool = pool
        self.path = path
        self.session_id = session_id
        self.t0 = time.monotonic()
        self.started_epoch = time.time()
        self.events: list[dict[str, Any]] = []
        self.meta = {
            "id": session_id, "status": "live", "started_at_epoch": round(self.started_epoch, 3),
            "started_at": _iso(self.started_epoch), **meta,
        }
        self.counts = {"user_audio": 0, "user_frames": 0, "user_images": 0, "ai_audio": 0}
        self._user: _Segment | None = None
        self._ai: _Segment | None = None
        self._pending: list[cf.Future] = []
        self._snapshot_lock = threading.Lock()
        self._snapshot_version = 0
        self._written_version = 0
        self._last_snapshot = 0.0
        self._finished = False
        # (file name, document) to leave beside the recording when it ends, or None (worker/app.py)
        self.keep_at_end: Callable[[], tuple[str, dict] | None] | None = None
        self._dirty = False
        # Between the end of the user's turn and the reply's first audio every millisecond is
        # voice-to-voice latency: the once-a-second flushes wait until that window closes.
        self._critical = False
        self._critical_since = 0.0
        # Barge-ins: the last speech_started not yet taken by a cut (its t), the items already
        # marked as cut (one barge_in per interruption), and the client's truncates waiting for
        # their conversation.item.truncated (item id -> "client" or "server" for the gateway's).
        self._speech_t: float | None = None
        self._barged: set[str | None] = set()
        self._truncates: dict[str, str] = {}
        self._list_failed: set[str] = set()  # mcp_list_tools items whose listing failed
        self._submit(self._write_meta, dict(self.meta))
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # used from plain code (tests): snapshots only on events
            self._loop = None
        self._tick_handle = self._loop.call_later(SNAPSHOT_EVERY_S, self._tick) if self._loop else None

    # ------------------------------------------------------------------ helpers

    def _now(self) -> float:
        return round((time.monotonic() - self.t0) * 1000, 1)

    def _submit(self, fn, *args) -> None:
        fut = self.pool.writers.submit(fn, *args)
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(fut)

    def _add(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._dirty = True
        if not self._critical and time.monotonic() - self._last_snapshot >= SNAPSHOT_EVERY_S:
            self._snapshot()

    def _tick(self) -> None:
        """Every second: open audio segments and the timeline reach the disk even when quiet."""
        if self._finished:
            return
        if self._critical and time.monotonic() - self._critical_since > CRITICAL_MAX_S:
            self._critical = False  # no reply came (the user went on talking): stop waiting
        if not self._critical:
            self._flush_user()
            self._flush_ai()
            if self._dirty:
                self._snapshot()
        self._tick_handle = self._loop.call_later(SNAPSHOT_EVERY_S, self._tick)

    def _snapshot(self, final: bool = False) -> None:
        self._last_snapshot = time.monotonic()
        self._dirty = False
        self._snapshot_version += 1
        doc = {
            "version": SCHEMA_VERSION, "session_id": self.session_id, "started_at": self.meta["started_at"],
            "sample_rate": OUTPUT_RATE, "complete": final, "events": list(self.events),
        }
        self._submit(self._write_snapshot, self._snapshot_version, doc)

    def _write_snapshot(self, version: int, doc: dict[str, Any]) -> None:
        with self._snapshot_lock:  # an older snapshot must never overwrite a newer one
            if version <= self._written_version:
                return
            atomic_write_json(self.path / RECORDING, doc)
            self._written_version = version

    def _write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write_json(self.path / META, meta)

    # ------------------------------------------------------------------ client -> worker

    def user_audio(self, audio: str | bytes, rate: int) -> None:
        """The user's audio: base64 (an append event) or PCM16 (a binary microphone frame)."""
        if self._finished:
            return
        t = self._now()
        seg = self._user
        if seg is not None and (t - seg.last > USER_GAP_MS or seg.rate != rate):
            self._flush_user()
            seg = None
        if seg is None:
            seg = self._user = _Segment(t, rate)
        seg.add(audio)
        seg.last = t
        if seg.nbytes >= seg.rate * 2 * SEGMENT_S and not self._critical:
            self._flush_user()

    def _flush_user(self) -> None:
        seg, self._user = self._user, None
        if seg is None or not seg.chunks:
            return
        self.counts["user_audio"] += 1
        name = f"user_audio/{self.counts['user_audio']:06d}.wav"
        duration = round(seg.nbytes / 2 / seg.rate * 1000, 1)
        self._add({"t": seg.t, "type": "user_audio", "file": name, "rate": seg.rate, "duration_ms": duration})
        self._submit(self._write_wav, name, seg.chunks, seg.rate)

    def frame(self, b64: str) -> None:
        if self._finished:
            return
        self.counts["user_frames"] += 1
        name = f"user_frames/{self.counts['user_frames']:06d}.jpg"
        self._add({"t": self._now(), "type": "user_frame", "file": name})
        self._submit(self._write_image, name, b64)

    def image(self, b64: str) -> None:
        if self._finished:
            return
        self.counts["user_images"] += 1
        ext = "png" if b64.startswith("iVBOR") else "jpg"  # base64 of the PNG / JPEG magic bytes
        name = f"user_images/{self.counts['user_images']:06d}.{ext}"
        self._add({"t": self._now(), "type": "user_image", "file": name})
        self._submit(self._write_image, name, b64)

    def user_text(self, text: str) -> None:
        if not self._finished:
            self._add({"t": self._now(), "type": "user_text", "text": text})

    def client_event(self, ev: dict[str, Any], input_rate: int) -> None:
        """A client event the session accepted (called after it was handled without error)."""
        kind = ev.get("type")
        if kind == "input_audio_buffer.append":
            self.user_audio(ev.get("audio") or "", input_rate)
        elif kind == "input_image_buffer.append":
            self.frame(ev.get("image") or "")
        elif kind == "conversation.item.create":
            item = ev.get("item") or {}
            if item.get("type") == "mcp_approval_response":
                self._add({"t": self._now(), "type": "tool_approval", "approval_request_id": item.get("approval_request_id"),
                           "approve": item.get("approve"), "reason": item.get("reason")})
                return
            if item.get("role", "user") != "user":
                return
            for part in item.get("content") or []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") in ("input_text", "text") and isinstance(part.get("text"), str):
                    self.user_text(part["text"])
                elif part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
                    self.image(part["image_url"].split(",", 1)[-1])
                elif part.get("type") == "input_audio" and isinstance(part.get("audio"), str):
                    self._flush_user()
                    self.user_audio(part["audio"], 24000)
                    self._flush_user()
        elif kind in ("input_audio_buffer.commit", "input_audio_buffer.clear"):
            self._flush_user()
        elif kind == "conversation.item.truncate" and isinstance(ev.get("item_id"), str):
            # Handled before its conversation.item.truncated is written: that one is the client's.
            by_gateway = str(ev.get("event_id") or "").startswith(GATEWAY_EVENT_PREFIX)
            self._truncates[ev["item_id"]] = "server" if by_gateway else "client"

    # ------------------------------------------------------------------ worker -> client

    def server_event(self, ev: dict[str, Any]) -> None:
        """Every event as it is written to the client's socket."""
        if self._finished:
            return
        kind = ev.get("type")
        if kind in AUDIO_DELTAS:
            self._critical = False
            self._ai_audio(ev)
            return
        t = self._now()
        if kind in TEXT_DELTAS:
            self._add({"t": t, "type": "reply_text", "response_id": ev.get("response_id"),
                       "item_id": ev.get("item_id"), "delta": ev.get("delta", "")})
        elif kind == "conversation.item.input_audio_transcription.completed":
            self._add({"t": t, "type": "user_transcript", "item_id": ev.get("item_id"),
                       "text": ev.get("transcript") or ""})
        elif kind == "input_audio_buffer.speech_started":
            self._flush_user()
            self._speech_t = t
            self._add({"t": t, "type": "speech_started", "item_id": ev.get("item_id")})
        elif kind == "input_audio_buffer.speech_stopped":
            self._critical, self._critical_since = True, time.monotonic()
            self._add({"t": t, "type": "speech_stopped", "item_id": ev.get("item_id")})
        elif kind == "input_audio_buffer.backchannel":
            self._add({"t": t, "type": "backchannel", "item_id": ev.get("item_id"),
                       "transcript": ev.get("transcript") or "", "audio_start_ms": _ms(ev.get("audio_start_ms")),
                       "audio_end_ms": _ms(ev.get("audio_end_ms"))})
        elif kind == "response.created":
            self._speech_t = None  # speech before a reply started did not interrupt it
            self._add({"t": t, "type": "response_started", "response_id": (ev.get("response") or {}).get("id")})
        elif kind == "response.resumed":
            self._add({"t": t, "type": "resumed", "response_id": ev.get("response_id"), "item_id": ev.get("item_id"),
                       "resumed_item_id": ev.get("resumed_item_id"), "audio_start_ms": _ms(ev.get("audio_start_ms"))})
        elif kind == "response.output_item.done":
            item = ev.get("item") or {}
            if item.get("type") in TOOL_ITEMS:  # each call, with its result once the server ran it
                self._add({"t": t, "type": "tool_call", "kind": item["type"], "response_id": ev.get("response_id"),
                           "item_id": item.get("id"), "server_label": item.get("server_label"),
                           "name": item.get("name"), "arguments": item.get("arguments"),
                           "output": item.get("output"), "error": item.get("error")})
        elif kind == "mcp_list_tools.failed":
            self._list_failed.add(ev.get("item_id"))
        elif kind == "conversation.item.done" and (ev.get("item") or {}).get("type") == "mcp_list_tools":
            item = ev["item"]
            self._add({"t": t, "type": "tool_list", "item_id": item.get("id"), "server_label": item.get("server_label"),
                       "tools": [x.get("name") for x in item.get("tools") or [] if isinstance(x, dict)],
                       "failed": item.get("id") in self._list_failed})
        elif kind == "response.done":
            self._critical = False
            self._flush_ai()
            r = ev.get("response") or {}
            message = next((o for o in r.get("output") or [] if o.get("type", "message") == "message"), {})
            content = message.get("content") or [{}]
            text = content[0].get("transcript") or content[0].get("text") or "" if content else ""
            item = message.get("id")
            self._add({"t": t, "type": "response_done", "response_id": r.get("id"), "status": r.get("status"),
                       "item_id": item, "text": text})
            if r.get("status") == "cancelled" and (r.get("status_details") or {}).get("reason") == "turn_detected":
                self._barge_in(t, item, "server")
        elif kind == "conversation.item.truncated":
            item = ev.get("item_id")
            source = self._truncates.pop(item, "server") if isinstance(item, str) else "server"
            end = _ms(ev.get("audio_end_ms"))
            self._add({"t": t, "type": "truncated", "item_id": item, "audio_end_ms": end, "source": source})
            self._barge_in(t, item, source, end)
        elif kind == "session.metrics":
            self._add({"t": t, "type": "turn_metrics", "metrics": ev.get("metrics") or {}})
        elif kind == "error":
            err = ev.get("error") or {}
            self._add({"t": t, "type": "error", "code": err.get("code"), "message": err.get("message")})

    def _barge_in(self, t: float, item: str | None, source: str, audio_end_ms: float | None = None) -> None:
        """One ``barge_in`` per interrupted item, at the speech_started that decided it (if recent)."""
        if item in self._barged:
            return
        self._barged.add(item)
        if self._speech_t is not None and t - self._speech_t <= BARGE_WINDOW_MS:
            t = self._speech_t
        self._speech_t = None
        event = {"t": t, "type": "barge_in", "item_id": item, "source": source}
        if audio_end_ms is not None:
            event["audio_end_ms"] = audio_end_ms
        self._add(event)

    def _ai_audio(self, ev: dict[str, Any]) -> None:
        t = self._now()
        seg = self._ai
        item = ev.get("item_id")
        if seg is not None and seg.item_id != item:
            self._flush_ai()
            seg = None
        if seg is None:
            seg = self._ai = _Segment(t, OUTPUT_RATE, item, ev.get("response_id"))
        seg.add(ev.get("delta") or "")  # base64, or the PCM itself (a call's session)
        if seg.nbytes >= OUTPUT_RATE * 2 * SEGMENT_S:
            self._flush_ai()

    def _flush_ai(self) -> None:
        seg, self._ai = self._ai, None
        if seg is None or not seg.chunks:
            return
        self.counts["ai_audio"] += 1
        name = f"ai_audio/{self.counts['ai_audio']:06d}.wav"
        self._add({"t": seg.t, "type": "reply_audio", "file": name, "item_id": seg.item_id,
                   "response_id": seg.response_id, "duration_ms": round(seg.nbytes / 2 / OUTPUT_RATE * 1000, 1)})
        self._submit(self._write_wav, name, seg.chunks, OUTPUT_RATE)

    # ------------------------------------------------------------------ pool jobs

    def _write_wav(self, name: str, chunks: list[str | bytes], rate: int) -> None:
        write_wav(self.path / name, b"".join(c if isinstance(c, bytes) else _b64(c) for c in chunks), rate)  # atomic; an odd byte dropped

    def _write_image(self, name: str, b64: str) -> None:
        data = _b64(b64)
        if data:
            atomic_write_bytes(self.path / name, data)

    # ------------------------------------------------------------------ end

    def finish(self, reason: str, code: int | None = None) -> cf.Future | None:
        """Idempotent; every end path calls it. Returns the finaliser's future. What
        ``keep_at_end`` gives (a stored session's history) is written beside the recording before
        the meta says finished."""
        if self._finished:
            return None
        keep = None
        if self.keep_at_end is not None:
            try:
                keep = self.keep_at_end()
            except Exception:  # the recording must still finish
                log.exception("session %s: what it keeps at the end was not made", self.session_id)
        self._flush_user()
        self._flush_ai()
        self.events.append({"t": self._now(), "type": "session_end", "reason": reason, "code": code})
        self._snapshot(final=True)
        self._finished = True
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self.pool.active.discard(self)
        ended = time.time()
        meta = {**self.meta, "status": "finished", "ended_at_epoch": round(ended, 3), "ended_at": _iso(ended),
                "duration_s": round(ended - self.started_epoch, 3), "end_reason": reason, "close_code": code,
                "counts": dict(self.counts)}
        pending = list(self._pending)
        return self.pool.finisher.submit(self._finalise, pending, meta, keep)

    def _finalise(self, pending: list[cf.Future], meta: dict[str, Any], keep: tuple[str, dict] | None = None) -> None:
        cf.wait(pending)
        if keep is not None:
            atomic_write_json(self.path / keep[0], keep[1])
        try:
            meta["replays"] = build_replays(self.path, read_json(self.path / RECORDING))
        except Exception as exc:  # noqa: BLE001 - a replay failure must not lose the recording
            log.exception("session %s: replay not built", self.session_id)
            meta["replay_error"] = str(exc)
        self._write_meta(meta)


def _lower_priority() -> None:
    """Recorder threads yield the CPU to the model threads (Linux applies nice per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


def _ms(value: Any) -> float | None:
    """A millisecond field as a number (None when absent or not a number)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return b""  # the session already told the client; nothing to record


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1000):03d}Z"
