"""A linear echo canceller whose output the glances read: a voice over a loud echo kept whole.

AEC3 (``room.py``) takes ~50 dB of the echo out, which the VAD needs, but while the listener talks
over a loud echo (-6 dB) its suppressor also takes syllables of the voice: Whisper reads a "Stop."
over it as "It's gone.", "Stop, please." as "Top." and the cut-in is missed (issue 70). A linear
filter subtracts only its estimate of the echo and never the voice: it leaves 12-17 dB of echo
residue, which a glance reads through, and the words come out whole (dev cut-ins over -6 dB echo,
offline: stop words read in 19 of 20 clips, AEC3's output 14; dev backchannels over -10 dB: "Mm-hmm"
read as a hum, not AEC3's "And that's in."). So the glances and the overlap's clip read this
output while the canceller's is in use; the VAD keeps AEC3's.

Speex's MDF filter (``pyaec``, a maintained binding with wheels for Linux x86-64, macOS arm64 and
Windows; where it has none, glances read AEC3's output as before). Its 4096 taps cover 256 ms of
echo after a bulk delay: the echo path's delay as the waveform reading finds it (``room.py``,
``echo_match``), less a margin. The filter runs only while the reply has sounded lately and the
microphone may hear it (an idle session or a headset costs nothing): ~1.3 % of a core per
echoing session (``python -m bench calls --parts room``).
"""

from __future__ import annotations

import numpy as np

import soxr

try:  # pragma: no cover - the wheel is there on the platforms it is built for
    from ctypes import POINTER, c_int16

    from pyaec import lib as _speex

    _speex.AecNew  # noqa: B018 - its loader returns None when the library did not load
except Exception:  # ImportError, or AttributeError from a library that did not load
    _speex = None

RATE = 16000
FRAME = RATE // 100
REF_RATE = 24000
TAPS = 4096  # 256 ms of echo tail after the bulk delay
MARGIN_S = 0.04  # the bulk delay stays this far under the echo path's delay: the filter needs its onset
MAX_DELAY_S = 0.6  # the waveform reading finds lags up to 600 ms
REALIGN_S = 0.03  # a lag this far from the one in use ...
REALIGN_AGREE = 3  # ... found this many times in a row (within REALIGN_S of each other) moves the filter
QUIET_FRAMES = 60  # frames after the reply last sounded (its tail and the filter's) before the filter rests


def available() -> bool:
    return _speex is not None


class LinearEcho:
    """One session's linear canceller: ``frame(mic, ref24)`` per 10 ms, in order; ``align(lag_s)``
    when the echo path's delay is found."""

    def __init__(self) -> None:
        if _speex is None:
            raise RuntimeError("pyaec is not installed for this platform")
        # Quick (cubic) quality: a steady 160 samples per frame, 1 of latency; the better qualities
        # come in bursts every few frames, which would move the reference against the microphone.
        self._resampler = soxr.ResampleStream(REF_RATE, RATE, 1, dtype="int16", quality="QQ")
        self._history = np.zeros(int(MAX_DELAY_S * RATE) + 2 * FRAME, np.int16)  # the reference, newest last
        self._held = 0  # samples the resampler holds back (its latency): the history's newest is this old
        self._handle = None
        self.shift = 0  # bulk delay in samples
        self.lag_s: float | None = None  # the echo path's delay the filter is aligned to
        self._candidates: list[float] = []
        self._quiet = QUIET_FRAMES  # frames since the reference last sounded
        self._resting = False  # the filter skipped frames with nothing of the reply in them
        # the frames handed to speex, and pointers to them made once (a cast per call costs more than a copy)
        self._mic, self._ref, self._out = (np.zeros(FRAME, np.int16) for _ in range(3))
        ptr = POINTER(c_int16)
        self._ptrs = tuple(a.ctypes.data_as(ptr) for a in (self._mic, self._ref, self._out))

    def align(self, lag_s: float) -> None:
        """The echo path's delay, as found once more; the filter moves (and learns again) only when
        it is new, or when a different delay is found ``REALIGN_AGREE`` times in a row."""
        if self.lag_s is None:
            return self._move(lag_s)
        if abs(lag_s - self.lag_s) <= REALIGN_S:
            self._candidates.clear()
            return None
        if self._candidates and abs(lag_s - self._candidates[-1]) > REALIGN_S:
            self._candidates.clear()
        self._candidates.append(lag_s)
        if len(self._candidates) >= REALIGN_AGREE:
            self._move(float(np.median(self._candidates)))
        return None

    def _move(self, lag_s: float) -> None:
        self.lag_s = lag_s
        self.shift = int(max(0.0, min(MAX_DELAY_S, lag_s) - MARGIN_S) * RATE)
        self._candidates.clear()
        self._drop_filter()

    def rest(self) -> None:
        """Frames will be skipped (the microphone hears no echo): the filter's history is cleared
        when it runs again."""
        self._resting = self._handle is not None

    def _drop_filter(self) -> None:
        if self._handle is not None:
            _speex.AecDestroy(self._handle)
            self._handle = None

    def frame(self, mic: np.ndarray, ref24: np.ndarray, sounding: bool) -> np.ndarray:
        """The microphone's 10 ms (16 kHz PCM16) less its linear echo estimate; ``ref24``: what
        played at the same time (24 kHz PCM16), ``sounding`` when it was more than silence."""
        ref16 = self._reference(ref24)
        self._quiet = 0 if sounding else self._quiet + 1
        if self._quiet > QUIET_FRAMES + self.shift // FRAME:
            self.rest()  # nothing of the reply can be in the microphone
            return mic
        if self._handle is None:
            self._handle = _speex.AecNew(FRAME, TAPS, RATE, False)  # linear only: no residual suppressor
        elif self._resting:  # the filter's own history of the reference ends where it rested: clear it
            silence = np.zeros(FRAME, np.int16)
            for _ in range(TAPS // FRAME + 1):
                self._cancel(silence, silence)
        self._resting = False
        return self._cancel(mic, ref16)

    def _cancel(self, mic: np.ndarray, ref16: np.ndarray) -> np.ndarray:
        self._mic[:], self._ref[:] = mic, ref16
        _speex.AecCancelEcho(self._handle, *self._ptrs, FRAME)
        return self._out.copy()

    def _reference(self, ref24: np.ndarray) -> np.ndarray:
        """The reference ``shift`` samples ago, at 16 kHz (never later: the resampler's latency is
        taken out of the shift, and where the shift is shorter the reference comes that late)."""
        pcm = self._resampler.resample_chunk(np.ascontiguousarray(ref24, np.int16))
        self._held += FRAME - pcm.size
        self._history = np.concatenate([self._history[pcm.size:], pcm])
        end = self._history.size - max(0, self.shift - self._held)
        return self._history[end - FRAME:end]

    def __del__(self) -> None:
        if _speex is not None:
            self._drop_filter()
