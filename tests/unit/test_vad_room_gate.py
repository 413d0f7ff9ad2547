"""The VAD in a loud room (``core/conversation/vad.py``, issue 70): café babble (the bench's, six
espeak-ng voices; ``bench/duplex/room.py``) 10 dB below a near voice (Piper) with real Silero. The
room's voices alone hardly ever start speech, a near voice over them starts at once and its turn
ends after it (without the gate Silero hears the babble as speech that never ends, and a voice
inside it is never reported); a quiet room is untouched."""

from __future__ import annotations

import numpy as np
import pytest

from bench.duplex.room import babble
from core.audio import OUTPUT_RATE, resample
from core.conversation import vad
from core.conversation.vad import RATE, SileroModel, StreamingVad

SNR_DB = 10.0


@pytest.fixture(scope="module")
def speech(cascade_backend) -> np.ndarray:
    pcm = b"".join(cascade_backend.tts.synthesize("Hold on, I have a question.", deterministic=True))
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    return resample(audio, OUTPUT_RATE, RATE)


@pytest.fixture(scope="module")
def model() -> SileroModel:
    return SileroModel()


def active_rms(x: np.ndarray) -> float:
    frames = x[: x.size // 320 * 320].reshape(-1, 320)
    energy = np.mean(frames.astype(np.float64) ** 2, axis=1)
    return float(np.sqrt(np.mean(energy[energy >= energy.max() / 100])))  # within 20 dB of the loudest


def cafe(seconds: float, speech: np.ndarray) -> np.ndarray:
    """The bench's babble at 16 kHz, ``SNR_DB`` below the speech's active level."""
    b = resample(babble(seconds, seed=7, cache=None), 24000, RATE).astype(np.float32)
    return b * (active_rms(speech) / 10 ** (SNR_DB / 20) / float(np.sqrt(np.mean(b.astype(np.float64) ** 2))))


def events(model: SileroModel, audio: np.ndarray) -> list[tuple[str, int]]:
    v = StreamingVad(model)
    out = []
    for i in range(0, audio.size, 320):
        out += [(e.kind, e.ms) for e in v.process(audio[i:i + 320])]
    return out


def starts(evs: list[tuple[str, int]]) -> int:
    return sum(1 for kind, _ in evs if kind == "start")


def test_the_rooms_voices_alone_hardly_start_speech(model, speech, monkeypatch):
    room = cafe(30.0, speech)
    gated = starts(events(model, room))
    monkeypatch.setattr(vad, "ROOM_FLOOR_DB", float("inf"))
    ungated = starts(events(model, room))
    print(f"starts in 30 s of babble at {SNR_DB:g} dB SNR: {gated} with the gate, {ungated} without")
    assert gated <= 1, gated


def test_a_near_voice_over_the_room_starts_and_its_turn_ends(model, speech):
    before = 8 * RATE
    room = cafe(8.0 + speech.size / RATE + 3.0, speech)
    room[before:before + speech.size] += speech
    evs = events(model, room)
    onset = (before + int(np.nonzero(np.abs(speech) > 0.01)[0][0])) * 1000 // RATE
    voice_end = (before + int(np.nonzero(np.abs(speech) > 0.01)[0][-1])) * 1000 // RATE
    near = [ms for kind, ms in evs if kind == "start" and ms >= onset - 300]
    assert near and near[0] <= onset + 200, (onset, evs)
    ends = [ms for kind, ms in evs if kind == "end" and ms > near[0]]
    assert ends and ends[0] <= voice_end + 1200, (voice_end, evs)


def test_a_quiet_room_is_untouched(model, speech, monkeypatch):
    audio = np.concatenate([np.zeros(RATE, np.float32), speech, np.zeros(RATE, np.float32), speech,
                            np.zeros(RATE, np.float32)])
    audio = audio + np.random.default_rng(0).normal(0, 3e-4, audio.size).astype(np.float32)  # -70 dBFS
    gated = events(model, audio)
    monkeypatch.setattr(vad, "ROOM_FLOOR_DB", float("inf"))
    assert gated == events(model, audio)
    assert starts(gated) == 2
