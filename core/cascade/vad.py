"""Streaming voice activity detection with Silero VAD (ONNX, shipped in ``silero-vad``).

``SileroModel`` is shared by a worker's conversations (one ONNX session); each conversation owns
a ``StreamingVad`` holding its recurrent state, so streams never mix. Besides speech start/end
it reports the moment silence *begins* inside speech, so the pipeline can transcribe
speculatively while it waits out the silence hangover.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass
from typing import Literal

import numpy as np
import onnxruntime

RATE = 16000
PAUSE_MS = 96  # silence that marks a speculation point (shorter gaps between words would churn the CPU)
WINDOW = 512  # samples per model step at 16 kHz (32 ms)
CONTEXT = 64


class SileroModel:
    def __init__(self, path: str | None = None) -> None:
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
        buf = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n_windows = buf.size // WINDOW
        for i in range(n_windows):
            window = buf[i * WINDOW : (i + 1) * WINDOW]
            x = np.concatenate([self._context, window]).astype(np.float32, copy=False)
            prob, self._state = self.model.step(x, self._state)
            self._context = window[-CONTEXT:]
            start, end = self.processed, self.processed + WINDOW
            self.processed = end
            self._advance(prob, start, end, events)
        self._pending = buf[n_windows * WINDOW :].copy()
        return events

    def _advance(self, prob: float, start: int, end: int, events: list[VadEvent]) -> None:
        voiced = prob >= self.threshold
        if not self.in_speech:
            if voiced:
                if self._candidate_start is None:
                    self._candidate_start = start
                self._last_voiced_end = end
                if end - self._candidate_start >= self.min_speech_samples:
                    self.in_speech = True
                    self._paused = False
                    self.end_wait_samples = None
                    self._speech_start = self._candidate_start
                    events.append(VadEvent("start", self._ms(self._speech_start)))
            elif prob < self.neg_threshold:
                self._candidate_start = None
            return
        if voiced:
            self._last_voiced_end = end
            self._silent = False
            if self._paused:
                self._paused = False
                self.end_wait_samples = None
                events.append(VadEvent("resume", self._ms(start)))
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

    def _end_silence(self) -> int:
        return self.silence_samples if self.end_wait_samples is None else self.end_wait_samples

    def _end(self) -> VadEvent:
        self.in_speech = False
        self._paused = False
        self._silent = False
        self._candidate_start = None
        self.end_wait_samples = None
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
        return self._last_voiced_end
