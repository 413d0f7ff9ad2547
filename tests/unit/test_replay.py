"""Replays built from a synthetic recording: placement on the wall clock, barge-in cuts, MP4."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from core.media import write_wav
from core.replay import RATE, build_replays, render_tracks, subtitle_at


def _wav(path: Path, seconds: float, rate: int = RATE, freq: float = 440.0) -> None:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2")
    write_wav(path, pcm, rate)  # makes the folder


def _active(track: np.ndarray) -> tuple[float, float]:
    idx = np.flatnonzero(np.abs(track) > 0.01)
    return idx[0] / RATE, (idx[-1] + 1) / RATE


def test_reply_sits_where_it_was_sent_and_stops_where_the_user_cut_it(tmp_path):
    _wav(tmp_path / "user_audio/000001.wav", 1.0, rate=16000)
    _wav(tmp_path / "user_audio/000002.wav", 1.0, rate=16000)
    _wav(tmp_path / "ai_audio/000001.wav", 1.0)
    _wav(tmp_path / "ai_audio/000002.wav", 1.0)
    events = [
        {"t": 500, "type": "user_audio", "file": "user_audio/000001.wav", "rate": 16000, "duration_ms": 1000},
        # a segment that arrived early (client sent faster than real time) goes after the first
        {"t": 900, "type": "user_audio", "file": "user_audio/000002.wav", "rate": 16000, "duration_ms": 1000},
        {"t": 4500, "type": "reply_audio", "file": "ai_audio/000001.wav", "item_id": "a", "duration_ms": 1000},
        {"t": 4550, "type": "reply_audio", "file": "ai_audio/000002.wav", "item_id": "a", "duration_ms": 1000},
        {"t": 5400, "type": "barge_in", "item_id": "a", "source": "client", "audio_end_ms": 1250},
        {"t": 8000, "type": "session_end", "reason": "client_closed", "code": 1000},
    ]
    user, ai = render_tracks(tmp_path, {"events": events})
    assert len(user) == len(ai) == 8 * RATE
    u0, u1 = _active(user)
    assert abs(u0 - 0.5) < 0.01 and abs(u1 - 2.5) < 0.01  # back to back, not overlapping
    a0, a1 = _active(ai)
    assert abs(a0 - 4.5) < 0.01  # the reply starts 2 s after the user stopped, as in the call
    assert abs(a1 - 5.75) < 0.01  # 1250 ms played, then flushed


def test_server_cancel_without_client_report_cuts_at_the_cancel(tmp_path):
    _wav(tmp_path / "ai_audio/000001.wav", 3.0)
    events = [
        {"t": 1000, "type": "reply_audio", "file": "ai_audio/000001.wav", "item_id": "b", "duration_ms": 3000},
        {"t": 2000, "type": "barge_in", "item_id": "b", "source": "server"},
        {"t": 5000, "type": "session_end", "reason": "client_closed", "code": 1000},
    ]
    _, ai = render_tracks(tmp_path, {"events": events})
    a0, a1 = _active(ai)
    assert abs(a0 - 1.0) < 0.01 and abs(a1 - 2.0) < 0.01


def test_cut_off_session_uses_what_was_recorded(tmp_path):
    _wav(tmp_path / "user_audio/000001.wav", 1.0)
    events = [
        {"t": 2000, "type": "user_audio", "file": "user_audio/000001.wav", "rate": RATE, "duration_ms": 1000},
        {"t": 2500, "type": "reply_audio", "file": "ai_audio/missing.wav", "item_id": "x", "duration_ms": 100},
    ]
    user, _ = render_tracks(tmp_path, {"events": events})
    assert len(user) == 3 * RATE  # no session_end: up to the last thing recorded


def test_omni_session_gets_an_mp4_with_frames_audio_and_subtitles(tmp_path):
    import av
    import cv2

    _wav(tmp_path / "user_audio/000001.wav", 1.0)
    (tmp_path / "user_frames").mkdir()
    for i in (1, 2):
        img = np.full((240, 320, 3), (0, 120 * i, 0), dtype=np.uint8)
        cv2.imwrite(str(tmp_path / f"user_frames/00000{i}.jpg"), img)
    events = [
        {"t": 0, "type": "user_frame", "file": "user_frames/000001.jpg"},
        {"t": 100, "type": "user_audio", "file": "user_audio/000001.wav", "rate": RATE, "duration_ms": 1000},
        {"t": 1200, "type": "user_transcript", "item_id": "u", "text": "What do you see?"},
        {"t": 1500, "type": "user_frame", "file": "user_frames/000002.jpg"},
        {"t": 1600, "type": "reply_text", "response_id": "r", "item_id": "a", "delta": "A green picture."},
        {"t": 3000, "type": "session_end", "reason": "client_closed", "code": 1000},
    ]
    assert subtitle_at(events, 1300) == "You: What do you see?"
    assert subtitle_at(events, 2000) == "A green picture."
    built = build_replays(tmp_path, {"events": events})
    assert built["mp4"] == "merged_replay.mp4" and built["duration_s"] == 3.0
    with wave.open(str(tmp_path / "merged_replay.wav")) as w:
        assert w.getnchannels() == 2 and w.getnframes() == 3 * RATE
    with av.open(str(tmp_path / "merged_replay.mp4")) as c:
        assert c.streams.video and c.streams.audio
        frames = list(c.decode(video=0))
        assert 5 <= len(frames) <= 7  # 3 s at 2 fps
        last = frames[-1].to_ndarray(format="rgb24")
        assert last[60:120, 100:200, 1].mean() > 150  # the second (brighter green) frame at the end
        assert abs(float(c.duration) / 1e6 - 3.0) < 0.3
