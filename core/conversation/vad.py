"""Streaming voice activity detection with Silero VAD (ONNX, shipped in ``silero-vad``), which every
backend's turn-taking uses (``audio_input.py``).

``SileroModel`` is shared by a worker's conversations (one ONNX session); each conversation owns
a ``StreamingVad`` holding its recurrent state, so streams never mix. Besides speech start/end
it reports the moment silence *begins* inside speech, so the pipeline can transcribe
speculatively while it waits out the silence hangover.

Silero's probability stays high for one to four 32 ms windows after the voice stops (its
recurrent state decays), ~85 ms on our spoken set. The signal's energy says it sooner: when
``QUIET_MS`` of 10 ms frames fall below the quiet level (a few times the noise floor measured
between turns, and far below the turn's speech level), the pause is reported at once. Only the
speculation point moves: the end of speech and the silence that ends a turn stay Silero's.
After such a pause the energy also says when the voice is back (``LOUD_MS`` of loud frames):
Silero's trailing windows call the silence voiced, and a short last syllable "trailing off".

In a loud room (a café's voices, issue 70) Silero hears every voice, near or far, and babble
never stops: it cut the reply, and a near voice inside that endless "speech" was never reported.
So where the room itself talks (a level above ``ROOM_FLOOR_DB``, steady: its 80th percentile
within ``ROOM_STEADY_DB`` of its 20th, and Silero's mean probability at that level between
``ROOM_TALKS`` and ``ROOM_NEAR_VOICE``), a window counts as voiced only when it stands out: speech
starts ``ONSET_ABOVE_ROOM_DB`` above the room's 20th percentile and goes on while
``VOICE_ABOVE_ROOM_DB`` above it. The room is the last ``ROOM_S`` of windows outside speech, and
every window of a stream's first ``ROOM_MIN_WINDOWS``: within them only a voice Silero is
``SURE_VOICE`` of starts at once; another waits for them (where it began is kept) and starts if
the room does not talk or it stood out, so a session that opens in a café is not taken by it.
Steady noise that does not talk (a fan, typing, music) is left to Silero, a quiet room is never
gated. Chosen offline on the bench's noises (``bench/duplex/room.py``) and the dev clips: babble
at 10 dB SNR started speech 24 times in 6 x 20 s, 1 with the gate, and 2 in 30 streams' first 6 s;
every dev overlap clip over it still starts (+16 ms p50); fan, music and keyboard give the same
events as without the gate.
"""

from __future__ import annotations

import importlib.resources
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from core.audio import frame_rms

RATE = 16000
PAUSE_MS = 96  # silence that marks a speculation point (shorter gaps between words would churn the CPU)
WINDOW = 512  # samples per model step at 16 kHz (32 ms)
CONTEXT = 64
FRAME = 160  # 10 ms energy frames
QUIET_MS = 40  # quiet frames in a row that mark a pause before Silero's probability falls
LOUD_MS = 20  # loud frames in a row after such a pause that mean the voice is back
NOISE_FACTOR = 3.0  # quiet: below this many times the noise floor ...
SPEECH_SHARE = 0.05  # ... and below this share of the turn's speech level
MIN_LEVEL = 1e-4  # digital silence
ROOM_S = 8.0  # the room's level: over this much of the latest windows outside speech ...
ROOM_PERCENTILE = 20  # ... this percentile of their levels (dBFS)
ROOM_MIN_WINDOWS = 15  # a stream's first 480 ms are all room; speech starts wait for them
ROOM_FLOOR_DB = -55.0  # a room quieter than this never gates (a clean microphone is untouched)
ROOM_STEADY_DB = 12.0  # a room whose 80th percentile is further above its 20th is not steady: no gate
ROOM_TALKS = 0.08  # Silero's mean probability over windows at the room's level for it to talk (a fan's: 0.001) ...
ROOM_NEAR_VOICE = 0.85  # ... below this: Silero hears one near voice clearly (a stream that starts mid-word)
SURE_VOICE = 0.9  # within a stream's first windows a voice starts at once when Silero is this sure of it
ONSET_ABOVE_ROOM_DB = 10.0  # speech starts only this far above a loud room ...
VOICE_ABOVE_ROOM_DB = 4.0  # ... and goes on while this far above it


class SileroModel:
    def __init__(self, path: str | None = None) -> None:
        import onnxruntime  # here, not at import: the conversation core's config reads PAUSE_MS

        if path is None:
            path = str(importlib.resources.files("silero_vad.data").joinpath("silero_vad.onnx"))
        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            path, providers=["CPUExecutionProvider"], sess_options=opts
        )
        self._sr = np.array(RATE, dtype=np.int64)

    def step(self, window: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        out, new_state = self.session.run(
            None, {"input": window[None, :], "state": state, "sr": self._sr}
        )
        return float(out[0][0]), new_state


@dataclass(frozen=True, slots=True)
class VadEvent:
    kind: Literal["start", "pause", "resume", "end"]
    ms: int  # offset into the stream's audio


class StreamingVad:
    """Hysteresis state machine over Silero probabilities.

    start: speech has lasted ``min_speech_ms`` (reported at its first voiced window).
    pause: ``pause_ms`` of silence inside speech (a speculation point; shorter gaps between
    words would only churn the CPU).
    resume: speech came back before the hangover ran out.
    end: ``silence_ms`` of silence passed (or the wait ``end_within`` set for this pause);
    reported at the end of the last voiced window.
    """

    def __init__(
        self,
        model: SileroModel,
        threshold: float = 0.5,
        silence_ms: int = 500,
        min_speech_ms: int = 96,
        pause_ms: int = PAUSE_MS,
    ) -> None:
        self.model = model
        self.threshold = threshold
        self.neg_threshold = max(threshold - 0.15, 0.01)
        self.silence_samples = silence_ms * RATE // 1000
        self.min_speech_samples = min_speech_ms * RATE // 1000
        self.pause_samples = pause_ms * RATE // 1000
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self.processed = 0  # samples consumed by the model
        self.in_speech = False
        self._candidate_start: int | None = None
        self._speech_start = 0
        self._last_voiced_end = 0
        self._paused = False
        self._silent = False
        self.end_wait_samples: int | None = None  # this pause's scored wait (semantic_vad)
        self.early_pauses = True  # energy may report a pause before Silero does
        self._noise = None  # RMS of a 10 ms frame between turns (slow average)
        self._speech_level = 0.0  # RMS of the turn's loud frames (slow average)
        self._frame_pending = np.zeros(0, dtype=np.float32)
        self._frames_seen = 0  # samples covered by energy frames
        self._quiet_since: int | None = None  # first sample of the current run of quiet frames
        self._loud_since: int | None = None  # first sample of the current run of loud frames
        self._early_at: int | None = None  # where an energy pause put the end of the voice
        self._room: deque[float] = deque(maxlen=int(ROOM_S * RATE / WINDOW))  # dBFS of windows outside speech
        self._talk: deque[float] = deque(maxlen=int(ROOM_S * RATE / WINDOW))  # Silero's for windows at the room's level
        self._windows = 0  # windows seen
        self._level = -120.0  # dBFS of the window being decided
        self._candidate_peak = -120.0  # the loudest window of the speech candidate ...
        self._candidate_probs: list[float] = []  # ... and Silero's for its windows
        self._held = False  # a candidate long enough to start came within the first windows

    def configure(self, threshold: float, silence_ms: int, pause_ms: int | None = None) -> None:
        self.threshold = threshold
        self.neg_threshold = max(threshold - 0.15, 0.01)
        self.silence_samples = silence_ms * RATE // 1000
        if pause_ms is not None:
            self.pause_samples = pause_ms * RATE // 1000

    @staticmethod
    def _ms(samples: int) -> int:
        return int(round(samples * 1000 / RATE))

    def process(self, samples: np.ndarray) -> list[VadEvent]:
        """Consume 16 kHz float32 samples; return the events they caused, in order."""
        events: list[VadEvent] = []
        self._energy(samples, events)
        buf = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n_windows = buf.size // WINDOW
        for i in range(n_windows):
            window = buf[i * WINDOW : (i + 1) * WINDOW]
            x = np.concatenate([self._context, window]).astype(np.float32, copy=False)
            prob, self._state = self.model.step(x, self._state)
            prob = self._above_room(prob, window)
            self._context = window[-CONTEXT:]
            start, end = self.processed, self.processed + WINDOW
            self.processed = end
            self._advance(prob, start, end, events)
        self._pending = buf[n_windows * WINDOW :].copy()
        return events

    def _above_room(self, prob: float, window: np.ndarray) -> float:
        """Silero's probability, or 0 for a window that does not stand out from a talking room."""
        level = self._level = 10 * np.log10(max(float(np.dot(window, window)) / window.size, 1e-12))
        low = self._room_low()
        first = self._windows < ROOM_MIN_WINDOWS  # a stream's first windows are all room
        if first or (low is not None and not self.in_speech and level < low + ONSET_ABOVE_ROOM_DB):
            self._talk.append(prob)  # how much Silero hears a voice at the room's own level
        gated = prob
        low = self._gate_level(low)
        if low is not None and level < low + (VOICE_ABOVE_ROOM_DB if self.in_speech else ONSET_ABOVE_ROOM_DB):
            gated = 0.0
        self._windows += 1
        if first or gated < self.threshold:
            self._room.append(level)
        return gated

    def _gate_level(self, low: float | None) -> float | None:
        """The room's 20th percentile ``low`` when the room gates (it talks), else None."""
        if low is None or not self._talk:
            return None
        return low if ROOM_TALKS <= sum(self._talk) / len(self._talk) < ROOM_NEAR_VOICE else None

    def _room_low(self) -> float | None:
        """The room's 20th percentile when it is loud and steady (see the module docstring), else None."""
        if len(self._room) < ROOM_MIN_WINDOWS:
            return None
        low, high = _percentiles(self._room, ROOM_PERCENTILE, 100 - ROOM_PERCENTILE)
        if low < ROOM_FLOOR_DB or high - low > ROOM_STEADY_DB:
            return None
        return float(low)

    def hear_room_of(self, other: "StreamingVad") -> None:
        """Carry the room heard by ``other`` over (a VAD restarted after a commit: the room is the same)."""
        self._room, self._talk, self._windows = other._room.copy(), other._talk.copy(), other._windows

    def _quiet_level(self) -> float:
        noise = self._noise if self._noise is not None else MIN_LEVEL
        return max(MIN_LEVEL, min(noise * NOISE_FACTOR, self._speech_level * SPEECH_SHARE))

    def _energy(self, samples: np.ndarray, events: list[VadEvent]) -> None:
        """10 ms frame levels: the noise floor between turns, the speech level within one, and
        the early pause (see the module docstring)."""
        buf = np.concatenate([self._frame_pending, samples]) if self._frame_pending.size else samples
        n = buf.size // FRAME
        if n:
            for level in frame_rms(buf, FRAME).tolist():
                start = self._frames_seen
                self._frames_seen += FRAME
                if not self.in_speech:
                    # Falls at once, rises slowly: the quietest recent frames, not speech onsets.
                    noise = self._noise if self._noise is not None else level
                    self._noise = level if level < noise else 0.99 * noise + 0.01 * level
                    self._quiet_since = self._loud_since = None
                    continue
                if level >= self._quiet_level():
                    self._speech_level = max(level, 0.9 * self._speech_level + 0.1 * level)
                    self._quiet_since = None
                    if self._loud_since is None:
                        self._loud_since = start
                    if self._early_at is not None and self._frames_seen - self._loud_since >= LOUD_MS * RATE // 1000:
                        self._resume(self._loud_since, events)  # the words so far would miss it
                    continue
                self._loud_since = None
                if self._quiet_since is None:
                    self._quiet_since = start
                if (self.early_pauses and not self._paused
                        and self._frames_seen - self._quiet_since >= QUIET_MS * RATE // 1000):
                    self._paused = True
                    self._early_at = self._quiet_since
                    events.append(VadEvent("pause", self._ms(self._quiet_since)))
        self._frame_pending = buf[n * FRAME :].copy()

    def _advance(self, prob: float, start: int, end: int, events: list[VadEvent]) -> None:
        voiced = prob >= self.threshold
        if not self.in_speech:
            holding = self._windows <= ROOM_MIN_WINDOWS  # the room is still being heard
            if voiced:
                if self._candidate_start is None:
                    self._candidate_start, self._candidate_peak, self._candidate_probs = start, self._level, []
                self._candidate_peak = max(self._candidate_peak, self._level)
                self._candidate_probs.append(prob)
                self._last_voiced_end = end
                if end - self._candidate_start >= self.min_speech_samples:
                    # within the first windows only a voice Silero is sure of starts (a near one)
                    if holding and sum(self._candidate_probs) < SURE_VOICE * len(self._candidate_probs):
                        self._held = True
                    else:
                        self._start(events)
                return
            if self._held and not holding:  # speech within the first windows: now the room is known
                self._held = False
                low = self._gate_level(self._room_low())
                if low is None or self._candidate_peak >= low + ONSET_ABOVE_ROOM_DB:
                    self._start(events)  # and this window is its first silence, below
                else:
                    self._candidate_start = None
                    return
            elif prob < self.neg_threshold and not self._held:
                self._candidate_start = None
                return
            else:
                return
        if voiced:
            self._last_voiced_end = end
            if self._early_at is not None:
                return  # after an energy pause the energy says when the voice is back
            self._silent = False
            if self._paused:
                self._resume(start, events)
            return
        if prob >= self.neg_threshold and not self._silent:
            # Between the thresholds before any silence: speech is trailing off (as Silero's
            # own iterator does, this neither ends speech nor starts the silence clock).
            self._last_voiced_end = end
            return
        self._silent = True
        if not self._paused and end - self._last_voiced_end >= self.pause_samples:
            self._paused = True
            events.append(VadEvent("pause", self._ms(self._last_voiced_end)))
        if end - self._last_voiced_end >= self._end_silence():
            events.append(self._end())

    def _start(self, events: list[VadEvent]) -> None:
        self.in_speech = True
        self._held = False
        self._paused = False
        self.end_wait_samples = None
        self._speech_start = self._candidate_start
        self._speech_level = 0.0
        self._early_at = None
        events.append(VadEvent("start", self._ms(self._speech_start)))

    def _resume(self, at: int, events: list[VadEvent]) -> None:
        self._paused = False
        self._silent = False
        self._early_at = None
        self.end_wait_samples = None
        events.append(VadEvent("resume", self._ms(at)))

    def _end_silence(self) -> int:
        return self.silence_samples if self.end_wait_samples is None else self.end_wait_samples

    def _end(self) -> VadEvent:
        self.in_speech = False
        self._paused = False
        self._silent = False
        self._candidate_start = None
        self.end_wait_samples = None
        self._early_at = None
        return VadEvent("end", self._ms(self._last_voiced_end))

    def end_within(self, wait_samples: int) -> VadEvent | None:
        """Shorten (or lengthen) this pause's wait (semantic turn detection scored what was
        said); returns the end event at once when the silence so far already covers it."""
        if not self.in_speech or not self._paused:
            return None
        self.end_wait_samples = wait_samples
        if self.processed - self._last_voiced_end >= wait_samples:
            return self._end()
        return None

    @property
    def speech_start_samples(self) -> int:
        return self._speech_start

    @property
    def last_voiced_end_samples(self) -> int:
        """The end of the voice: Silero's, or the energy pause's while Silero still lags it."""
        return max(self._last_voiced_end, self._early_at or 0)


def _percentiles(values, *qs: float) -> list[float]:
    """``np.percentile(values, qs)`` (its default, linear method, to the last bit) of a few hundred
    floats, by sorting them in Python: ~8 us against numpy's ~50 us, every 32 ms window of every session."""
    a = sorted(values)
    out = []
    for q in qs:
        i = q / 100 * (len(a) - 1)  # (in numpy's order: the rounding is the same)
        lo = int(i)
        t = i - lo
        b0, b1 = a[lo], a[min(lo + 1, len(a) - 1)]
        out.append(b1 - (b1 - b0) * (1 - t) if t >= 0.5 else b0 + (b1 - b0) * t)  # numpy's _lerp
    return out
