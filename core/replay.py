"""Replays of a recorded session on the wall clock: what overlapped in the call overlaps here.

``merged_replay.wav`` is stereo 24 kHz, the user on the left and the assistant on the right.
User audio sits where it arrived. The assistant's audio is laid end to end from when its first
chunk was sent (the client plays it continuously, faster-than-real-time synthesis only fills
its buffer), and cut where the user barged in: at the position an item was truncated to
(``truncated``, ``conversation.item.truncated``: by the client or the server, what was heard) or,
without one, at the barge-in (the server's cut). A backchannel leaves the reply whole, and a
falsely interrupted reply resumed is a new item played after the cut. Omni
sessions (with camera frames) also get ``merged_replay.mp4``: the frames, the stereo audio and
the subtitles burned in. Blocking and CPU-bound: call from a thread.
"""

from __future__ import annotations

import io
import math
import wave
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from core.audio import resample
from core.files import atomic_write_bytes
from core.media import wav_bytes
from core.session_store import REPLAY_MP4, REPLAY_WAV

RATE = 24000
VIDEO_FPS = 2
VIDEO_SIZE = (640, 480)
SUBTITLE_HOLD_MS = 4000


def session_end_ms(events: list[dict[str, Any]]) -> float:
    """The session's wall-clock length: its end event, or the last thing recorded (cut off)."""
    for e in reversed(events):
        if e.get("type") == "session_end":
            return float(e["t"])
    return max((float(e["t"]) + float(e.get("duration_ms") or 0) for e in events), default=0.0)


def _read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0, rate


def render_tracks(session_dir: Path, recording: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(user, assistant) float32 tracks at 24 kHz, as long as the session."""
    events = sorted(recording.get("events", []), key=lambda e: float(e.get("t", 0)))
    total = int(math.ceil(session_end_ms(events) * RATE / 1000))
    user = np.zeros(total, dtype=np.float32)
    ai = np.zeros(total, dtype=np.float32)

    # Where each interrupted reply stops: absolute ms (server cancel) or played ms (a truncation;
    # recordings before the truncated event carried it on the client's barge_in).
    cut_abs: dict[str, float] = {}
    cut_played: dict[str, float] = {}
    for e in events:
        if e.get("type") in ("barge_in", "truncated") and e.get("item_id"):
            item = e["item_id"]
            if e.get("audio_end_ms") is not None:
                cut_played[item] = min(cut_played.get(item, math.inf), float(e["audio_end_ms"]))
            else:
                cut_abs[item] = min(cut_abs.get(item, math.inf), float(e["t"]))

    user_cursor = 0
    ai_cursor = 0
    item_start: dict[str, int] = {}
    for e in events:
        kind = e.get("type")
        if kind not in ("user_audio", "reply_audio"):
            continue
        path = session_dir / str(e.get("file", ""))
        if not path.is_file():
            continue  # cut off before the write landed
        pcm, rate = _read_wav(path)
        pcm = resample(pcm, rate, RATE)
        at = int(float(e["t"]) * RATE / 1000)
        if kind == "user_audio":
            start = max(at, user_cursor)
            user_cursor = _place(user, pcm, start)
            continue
        item = e.get("item_id") or ""
        start = max(at, ai_cursor)
        item_start.setdefault(item, start)
        stop = total
        if item in cut_abs:
            stop = min(stop, int(cut_abs[item] * RATE / 1000))
        if item in cut_played:
            stop = min(stop, item_start[item] + int(cut_played[item] * RATE / 1000))
        pcm = pcm[: max(0, stop - start)]
        ai_cursor = _place(ai, pcm, start)
    return user, ai


def _place(track: np.ndarray, pcm: np.ndarray, start: int) -> int:
    end = min(len(track), start + len(pcm))
    if end > start:
        track[start:end] += pcm[: end - start]
    return start + len(pcm)


def stereo_wav(user: np.ndarray, ai: np.ndarray) -> bytes:
    inter = np.empty(len(user) * 2, dtype="<i2")
    inter[0::2] = np.clip(user * 32768, -32768, 32767).astype("<i2")
    inter[1::2] = np.clip(ai * 32768, -32768, 32767).astype("<i2")
    return wav_bytes(inter, RATE, channels=2)


def subtitle_at(events: list[dict[str, Any]], t_ms: float) -> str:
    """The line on screen at ``t_ms``: the reply being spoken, or what the user just said."""
    line, line_t = "", -math.inf
    reply: dict[str, str] = {}
    for e in events:
        t = float(e.get("t", 0))
        if t > t_ms:
            break
        kind = e.get("type")
        if kind == "reply_text":
            rid = str(e.get("response_id"))
            reply[rid] = reply.get(rid, "") + str(e.get("delta", ""))
            line, line_t = reply[rid], t
        elif kind in ("user_transcript", "user_text"):
            line, line_t = "You: " + str(e.get("text", "")), t
    return line if t_ms - line_t <= SUBTITLE_HOLD_MS else ""


def build_mp4(session_dir: Path, recording: dict[str, Any], user: np.ndarray, ai: np.ndarray) -> bytes | None:
    import av
    import cv2

    events = sorted(recording.get("events", []), key=lambda e: float(e.get("t", 0)))
    frames = [e for e in events if e.get("type") == "user_frame" and (session_dir / e["file"]).is_file()]
    if not frames:
        return None
    w, h = VIDEO_SIZE
    duration_ms = len(user) * 1000 / RATE
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        vs = out.add_stream("libx264", rate=VIDEO_FPS)
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        vs.options = {"preset": "veryfast", "crf": "28"}
        aus = out.add_stream("aac", rate=RATE, layout="stereo")
        current, fi, cache = None, 0, {}
        for n in range(max(1, int(duration_ms / 1000 * VIDEO_FPS))):
            t = n * 1000 / VIDEO_FPS
            while fi < len(frames) and float(frames[fi]["t"]) <= t:
                current, fi = frames[fi], fi + 1
            img = _frame_image(session_dir, current or frames[0], cache, (w, h))
            _burn_subtitle(img, subtitle_at(events, t))
            vf = av.VideoFrame.from_ndarray(cv2.cvtColor(img, cv2.COLOR_BGR2RGB), format="rgb24")
            vf.pts = n
            vf.time_base = Fraction(1, VIDEO_FPS)
            for packet in vs.encode(vf):
                out.mux(packet)
        for packet in vs.encode():
            out.mux(packet)
        pcm = np.stack([user, ai])
        block = 1024
        for i in range(0, pcm.shape[1], block):
            chunk = np.ascontiguousarray(pcm[:, i:i + block], dtype=np.float32)
            af = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="stereo")
            af.sample_rate = RATE
            af.pts = i
            af.time_base = Fraction(1, RATE)
            for packet in aus.encode(af):
                out.mux(packet)
        for packet in aus.encode():
            out.mux(packet)
    return buf.getvalue()


def _frame_image(session_dir: Path, event: dict[str, Any], cache: dict[str, np.ndarray],
                 size: tuple[int, int]) -> np.ndarray:
    import cv2

    name = event["file"]
    if name not in cache:
        cache.clear()  # frames arrive in order: keep only the current one
        img = cv2.imread(str(session_dir / name))
        if img is None:
            img = np.zeros((size[1], size[0], 3), dtype=np.uint8)
        cache[name] = _letterbox(img, size)
    return cache[name].copy()


def _letterbox(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    import cv2

    w, h = size
    scale = min(w / img.shape[1], h / img.shape[0])
    nw, nh = max(1, int(img.shape[1] * scale)), max(1, int(img.shape[0] * scale))
    out = np.zeros((h, w, 3), dtype=np.uint8)
    x, y = (w - nw) // 2, (h - nh) // 2
    out[y:y + nh, x:x + nw] = cv2.resize(img, (nw, nh))
    return out


def _burn_subtitle(img: np.ndarray, text: str) -> None:
    import cv2

    if not text:
        return
    font, scale, thick = cv2.FONT_HERSHEY_SIMPLEX, 0.6, 1
    words, lines, line = text[-200:].split(), [], ""
    for word in words:
        trial = f"{line} {word}".strip()
        if cv2.getTextSize(trial, font, scale, thick)[0][0] > img.shape[1] - 40 and line:
            lines.append(line)
            line = word
        else:
            line = trial
    lines = (lines + [line])[-3:]
    step = 24
    top = img.shape[0] - 16 - step * len(lines)
    overlay = img.copy()
    cv2.rectangle(overlay, (10, top - 8), (img.shape[1] - 10, img.shape[0] - 8), (0, 0, 0), -1)
    cv2.addWeighted(overlay, 0.6, img, 0.4, 0, dst=img)
    for i, ln in enumerate(lines):
        cv2.putText(img, ln.encode("ascii", "replace").decode(), (20, top + 16 + i * step), font, scale,
                    (255, 255, 255), thick, cv2.LINE_AA)


def build_replays(session_dir: Path, recording: dict[str, Any]) -> dict[str, Any]:
    """Write merged_replay.wav (and .mp4 when there are frames); returns what was built."""
    user, ai = render_tracks(session_dir, recording)
    atomic_write_bytes(session_dir / REPLAY_WAV, stereo_wav(user, ai))
    built: dict[str, Any] = {"wav": REPLAY_WAV, "duration_s": round(len(user) / RATE, 3)}
    mp4 = build_mp4(session_dir, recording, user, ai)
    if mp4 is not None:
        atomic_write_bytes(session_dir / REPLAY_MP4, mp4)
        built["mp4"] = REPLAY_MP4
    return built
