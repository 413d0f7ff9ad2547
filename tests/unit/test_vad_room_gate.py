"""The VAD in a room that talks (``core/conversation/vad.py``, issue 70), with real Silero: café
babble (the bench's, six espeak-ng voices; ``bench/duplex/room.py``) 10 dB below a near voice
(Piper). The room's voices alone, from a stream's first sample, hardly ever start speech; a near
voice over them starts at once and its turn ends after it; a quiet room, a fan as loud as the
babble, and a near voice from the stream's first sample are untouched (the same events as Silero
without the gate)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.duplex.room import babble, fan
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


def room(make, seconds: float, speech: np.ndarray) -> np.ndarray:
    """One of the bench's noises at 16 kHz, ``SNR_DB`` below the speech's active level."""
    b = resample(make(seconds, 7), 24000, RATE).astype(np.float32)
    return b * (active_rms(speech) / 10 ** (SNR_DB / 20) / float(np.sqrt(np.mean(b.astype(np.float64) ** 2))))


def cafe(seconds: float, speech: np.ndarray) -> np.ndarray:
    return room(lambda s, seed: babble(s, seed, cache=None), seconds, speech)


def events(model: SileroModel, audio: np.ndarray) -> list[tuple[str, int]]:
    v = StreamingVad(model)
    out = []
    for i in range(0, audio.size, 320):
        out += [(e.kind, e.ms) for e in v.process(audio[i:i + 320])]
    return out


def ungated(model: SileroModel, audio: np.ndarray, monkeypatch) -> list[tuple[str, int]]:
    with monkeypatch.context() as m:
        m.setattr(vad, "ROOM_FLOOR_DB", float("inf"))
        return events(model, audio)


def starts(evs: list[tuple[str, int]]) -> int:
    return sum(1 for kind, _ in evs if kind == "start")


def test_the_rooms_voices_alone_hardly_start_speech(model, speech, monkeypatch):
    noise = cafe(30.0, speech)  # from the stream's first sample: no room heard before
    gated, without = starts(events(model, noise)), starts(ungated(model, noise, monkeypatch))
    print(f"starts in 30 s of babble at {SNR_DB:g} dB SNR: {gated} with the gate, {without} without")
    assert gated <= 1, gated


def test_a_near_voice_over_the_room_starts_and_its_turn_ends(model, speech):
    before = 8 * RATE
    audio = cafe(8.0 + speech.size / RATE + 3.0, speech)
    audio[before:before + speech.size] += speech
    evs = events(model, audio)
    voiced = np.nonzero(np.abs(speech) > 0.01)[0]
    onset, voice_end = (before + voiced[0]) * 1000 // RATE, (before + voiced[-1]) * 1000 // RATE
    near = [ms for kind, ms in evs if kind == "start" and ms >= onset - 300]
    assert near and near[0] <= onset + 200, (onset, evs)
    ends = [ms for kind, ms in evs if kind == "end" and ms > near[0]]
    assert ends and ends[0] <= voice_end + 1200, (voice_end, evs)


def test_a_quiet_room_a_fan_and_a_voice_from_the_first_sample_are_untouched(model, speech, monkeypatch):
    quiet = np.concatenate([np.zeros(RATE, np.float32), speech, np.zeros(RATE, np.float32), speech,
                            np.zeros(RATE, np.float32)])
    quiet = quiet + np.random.default_rng(0).normal(0, 3e-4, quiet.size).astype(np.float32)  # -70 dBFS
    loud_fan = room(fan, quiet.size / RATE, speech)[: quiet.size] + quiet
    first = np.concatenate([speech[np.nonzero(np.abs(speech) > 0.01)[0][0]:], np.zeros(RATE, np.float32)])
    # a word shorter than the first windows the room is heard for: its start waited, it is not lost
    short = np.concatenate([first[: int(0.35 * RATE)], np.zeros(RATE, np.float32)])
    for audio in (quiet, loud_fan, first, short):
        gated = events(model, audio)
        assert gated == ungated(model, audio, monkeypatch)
        assert starts(gated) == (2 if audio is quiet or audio is loud_fan else 1), gated


def test_the_rooms_percentiles_are_numpys_to_the_last_bit():
    """The gate reads the room's 20th and 80th percentiles every 32 ms window; they are computed in
    Python for speed and must be exactly ``np.percentile``'s (its default, linear method)."""
    rng = np.random.default_rng(7)
    for size in [*range(1, 40), 249, 250]:
        for _ in range(20):
            levels = rng.normal(-60, 8, size).tolist()
            assert vad._percentiles(levels, 20, 80) == [float(x) for x in np.percentile(levels, (20, 80))], size
