"""Input audio at 16 kHz: the room taken out (``room.py``: echo, noise), a bounded buffer plus
streaming Silero VAD, one per conversation.

``process`` runs in a worker thread and reports ``(kind, ms, segment)`` for each VAD event:
``start``/``resume`` of speech, and at ``pause`` (a speculation point) and ``end`` the utterance
so far, with prefix padding and a short tail of silence.
"""

from __future__ import annotations

import time

import numpy as np

from core.audio import StreamResampler
from core.conversation.config import ConversationConfig, TurnDetection
from core.conversation.played_audio import PlayedAudio
from core.conversation.room import RoomFilter
from core.conversation.vad import StreamingVad

VAD_RATE = 16000  # every model here takes 16 kHz speech
TAIL_SAMPLES = VAD_RATE * 3 // 10  # audio kept after the last voiced sample for ASR
MAX_BUFFER_SECONDS = 300

VadReport = tuple[str, int, "np.ndarray | None"]


class AudioInput:
    def __init__(self, vad_model, cfg: ConversationConfig, played: PlayedAudio | None = None) -> None:
        self.vad_model = vad_model
        self.turn_detection: TurnDetection | None = cfg.turn_detection
        self.vad = self._new_vad()
        self.resampler = StreamResampler(cfg.input_sample_rate, VAD_RATE)
        self.played = played  # the echo's reference (None: nothing to cancel against)
        self.room: RoomFilter | None = None
        self.set_room(cfg)
        self.buffer = np.zeros(0, dtype=np.float32)
        # What the glances read, sample for sample beside ``buffer`` (the room's ``words``: over an
        # echo, a linear canceller's output that keeps the voice whole); None: the same as ``buffer``.
        self.words: np.ndarray | None = None
        self.buffer_start = 0  # stream offset (16 kHz samples) of buffer[0]
        self.stream_samples = 0
        self._echo_until = 0  # stream offset up to which the reply sounded while its echo was cancelled
        # The last ended voice's segment and, over an echo, its audio as the VAD heard it
        self._ended: tuple[np.ndarray | None, np.ndarray | None] = (None, None)

    def _new_vad(self) -> StreamingVad | None:
        td = self.turn_detection
        if td is None:
            return None
        return StreamingVad(self.vad_model, td.threshold, td.end_silence_ms, pause_ms=td.pause_ms)

    @property
    def pad(self) -> int:
        td = self.turn_detection
        return td.prefix_padding_ms * VAD_RATE // 1000 if td is not None else 0

    def configure(self, td: TurnDetection) -> None:
        """New VAD settings mid-stream: buffered audio and the VAD's state are kept."""
        self.turn_detection = td
        if self.vad is not None:
            self.vad.configure(td.threshold, td.end_silence_ms, td.pause_ms)

    def set_room(self, cfg: ConversationConfig) -> None:
        """Echo cancellation and noise suppression as ``cfg`` asks (a new filter when that changed)."""
        played = self.played if cfg.echo_cancellation else None
        want = (played is not None, cfg.noise_reduction is not None)
        have = (False, False) if self.room is None else (self.room.played is not None, self.room.suppressing)
        if want != have:
            self.room = RoomFilter(played, cfg.noise_reduction is not None) if any(want) else None

    def process(self, samples: np.ndarray, arrived_at: float | None = None) -> tuple[np.ndarray, list[VadReport]]:
        """Resample, clean, buffer, detect; returns the 16 kHz audio and the VAD reports it caused.
        ``arrived_at``: when the samples arrived (monotonic; the echo canceller's clock)."""
        audio = self.resampler.process(samples)
        words = None
        if self.room is not None:
            audio, words, echo = self.room.clean(audio, time.monotonic() if arrived_at is None else arrived_at)
            if echo:
                self._echo_until = self.stream_samples + audio.size
        self._keep_words(words, audio)
        self.buffer = np.concatenate([self.buffer, audio]) if self.buffer.size else audio.copy()
        self.stream_samples += audio.size
        if self.buffer.size > MAX_BUFFER_SECONDS * VAD_RATE:
            self.trim(self.stream_samples - MAX_BUFFER_SECONDS * VAD_RATE)
        out: list[VadReport] = []
        if self.vad is None:
            return audio, out
        for ev in self.vad.process(audio):
            out.append(self._report(ev))
        if not self.vad.in_speech:
            self.trim(self.stream_samples - self.pad - VAD_RATE)
        return audio, out

    @property
    def onset_sure(self) -> bool:
        """Whether a voice's onset can be taken at its word: not while the echo canceller is still
        learning the echo path (what it leaves can read as a voice; ``room.py``)."""
        return self.room is None or not self.room.learning

    @property
    def hears_echo(self) -> bool:
        """Whether the microphone is known to hear the assistant's own reply (``room.py``)."""
        return self.room is not None and self.room.cancelling

    def end_within(self, wait_ms: int) -> VadReport | None:
        """Set the wait that ends the current pause (semantic turn detection); the ``end``
        report at once when the silence already lasted that long."""
        if self.vad is None:
            return None
        ev = self.vad.end_within(wait_ms * VAD_RATE // 1000)
        return None if ev is None else self._report(ev)

    def _report(self, ev) -> VadReport:
        segment = None
        if ev.kind in ("pause", "end"):
            start = self.vad.speech_start_samples - self.pad
            end = self.vad.last_voiced_end_samples + TAIL_SAMPLES
            # A turn spoken over the reply's echo is read as the glances read it (``room.py``):
            # AEC3's suppressor takes syllables of a voice over a loud echo, and the transcript is
            # what the model answers (dev voices' short cut-ins at -6 dB: the first word right in
            # 26 of 60 from AEC3's output, "Stop." as "Um." or "Talk.", in 48 from the linear one).
            over_echo = self._echo_until > start and self.words is not None
            # At a pause only ~100 ms after the last word has arrived; Whisper hears the
            # last word worse without a tail ("France" -> "friends"), so pad with silence.
            want = end - max(start, self.buffer_start)
            segment = _padded(self.slice(start, end, for_words=over_echo), want)
            if ev.kind == "end":
                # Its audio leaves the buffer now: a reading of the ended voice over the echo takes
                # AEC3's too, as a glance does (``Hearing._read``).
                self._ended = (segment, _padded(self.slice(start, end), want) if over_echo else None)
        if ev.kind == "end":
            self.trim(self.vad.last_voiced_end_samples)
        return ev.kind, ev.ms, segment

    def heard_as(self, segment: np.ndarray) -> np.ndarray | None:
        """The ended voice ``segment`` as the VAD heard it (AEC3's output) when the segment was
        read through the linear canceller; None otherwise."""
        ended, heard = self._ended
        return heard if ended is segment else None

    @property
    def reads_through_echo(self) -> bool:
        """The glances read the linear canceller's output (the room found an echo lately)."""
        return self.words is not None

    def _keep_words(self, words: np.ndarray | None, audio: np.ndarray) -> None:
        """Buffer what the glances read of this chunk (before ``audio`` joins ``buffer``)."""
        if words is None and self.words is None:
            return
        if self.words is None:  # the first chunk that differs: what came before read the same
            self.words = self.buffer.copy()
        self.words = np.concatenate([self.words, audio if words is None else words])

    def slice(self, start: int, end: int, for_words: bool = False) -> np.ndarray:
        """Buffered audio between two stream offsets; ``for_words``: what the glances read."""
        a = max(0, start - self.buffer_start)
        b = max(a, min(self.buffer.size, end - self.buffer_start))
        source = self.words if for_words and self.words is not None else self.buffer
        return source[a:b].copy()

    def trim(self, keep_from: int) -> None:
        drop = keep_from - self.buffer_start
        if drop > 0:
            self.buffer = self.buffer[drop:]
            if self.words is not None:
                self.words = self.words[drop:]
            self.buffer_start += drop

    def take(self) -> np.ndarray:
        """Everything buffered (an explicit commit); the VAD restarts after it, so the committed
        audio cannot end a turn later."""
        segment = self.buffer
        self.clear()
        old, self.vad = self.vad, self._new_vad()
        if self.vad is not None:
            self.vad.processed = self.stream_samples
            if old is not None:
                self.vad.hear_room_of(old)
        return segment

    def clear(self) -> None:
        self.buffer = np.zeros(0, dtype=np.float32)
        self.words = None
        self.buffer_start = self.stream_samples


def _padded(audio: np.ndarray, size: int) -> np.ndarray:
    """``audio`` with silence after it up to ``size`` samples."""
    if audio.size >= size:
        return audio
    return np.concatenate([audio, np.zeros(size - audio.size, dtype=np.float32)])
