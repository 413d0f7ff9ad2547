"""Takes the room out of the microphone before the VAD, the glances and the transcripts hear it.

A microphone beside a loudspeaker hears the assistant's own reply: without this, every echo onset
is a barge-in and the assistant interrupts itself. The server holds the echo's reference (what the
listener played, ``PlayedAudio``), so it cancels the echo itself, with WebRTC's audio processing
module (AEC3, its noise suppressor and high-pass filter) as the ``livekit`` real-time SDK ships it:
a maintained native build with wheels for every platform, ~1.2 % of a core per session
(``python -m bench calls --parts room``).

- **Two clocks made one.** The microphone's samples are placed on the monotonic clock by when
  they arrived: a chunk's last sample no later than its arrival, and the clock follows the
  soonest arrivals (network jitter only delays). The reference is read at the same times; what is
  left between them (the network both ways, the client's buffers, the room) is the echo path's
  delay, which AEC3 estimates itself (tested 40-300 ms). Audio sent faster than real time (a
  file, a test's burst) is no live microphone: it passes uncancelled until chunks come in real
  time again. Chunks that come late in a bunch (a busy loop) keep their places; a client that
  paused sending (every chunk late for 2 s) moves the clock on. The linear canceller's reference
  keeps a continuous clock of its own through the clock's small steps (``LINEAR_SNAP_S``).
- **No echo, no cancelling.** AEC3 that has never found an echo path (a headset, a test's clean
  microphone) suppresses a voice that speaks over the reply during its first seconds; so its
  output is used only while the microphone follows the reply: by their levels once the reply has
  sounded long enough (``EchoPresence``), by the waveform before (``waveform_match``). While it
  does not, the microphone passes as it came (the canceller still adapts, for when it does).
- **While it learns.** In a session's first seconds of reply AEC3 can leave 8-20 dB of a phrase's
  echo (a phrase after a pause, ~1.0-1.5 s in), and Silero takes that residue for a voice: the
  story stopped itself about once in five. By its levels that residue looks like a voice over the
  echo whose first 100 ms the learning canceller suppressed (a gate on them lost 9 of 30 early
  voices), so nothing is taken out: ``learning`` says that a voice's onset is unsure for now, and
  the turn policy waits for its words before it yields (``vad_turns.py``). So does a reply's new
  run (after the listener's queue ran dry: every answer) for its first second of sound
  (``RESETTLE_FRAMES``): its delay moved, and AEC3 follows it again.
- **Words read through a linear canceller.** While the listener talks over a loud echo, AEC3's
  suppressor takes syllables of the voice too ("Stop." read as "It's gone."): the glances, and
  the transcript of a turn the reply sounded in, read a linear canceller's output instead
  (``linear_echo.py``), aligned to the echo path's delay that the waveform reading finds
  (``echo_match``). ``clean`` returns both.
- **No reply, no canceller.** Once the reference has been silent for a second (``STILL_FRAMES``)
  nothing played can still echo: AEC3 rests and the microphone passes as it came, so a session
  that listens costs ~2 points of a core less.
- **Noise suppression** (``noise_reduction``: ``near_field``/``far_field``, OpenAI's field) runs on
  what the canceller kept. The binding offers one suppression level, so both types run the same.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from core.conversation import linear_echo
from core.conversation.played_audio import PlayedAudio

RATE = 16000  # what the VAD and every model here take
FRAME = RATE // 100  # the audio processing module takes 10 ms frames
REF_FRAME = PlayedAudio.rate // 100
LATE_WINDOW_S = 2.0  # every chunk this long late by more than LATE_SLACK_S: the client paused sending
LATE_SLACK_S = 0.02
MAX_LEAD_S = 0.15  # audio this much ahead of real time is not live (network bunching stays under it)
BURST_TOLERANCE_S = 0.005  # after a burst, a chunk that took its own length to come is live again

# EchoPresence: a microphone follows the reply when its 10 ms levels correlate with the reply's at
# one lag (the echo path's delay) over the last seconds the reply played. Two independent voices
# reach ~0.3 at their best lag of 60; an echo 20 dB down over room noise stays above 0.6.
WINDOW_FRAMES = 300  # 3 s of history
MAX_LAG_FRAMES = 60  # echo paths up to 600 ms
MIN_ACTIVE_FRAMES = 50  # the reply must have sounded this long in the window before a decision
ACTIVE_LEVEL = 100.0  # PCM16 RMS of a frame of the reply that counts as sounding (-50 dBFS)
ECHO_CORRELATION = 0.5  # at or above: an echo is there
CLEAN_CORRELATION = 0.3  # below: none is (between the two the last decision stands)
ECHO_FLOOR = 0.01  # an echo path 40 dB down is still one
ECHO_FOLLOWS = 0.6  # share of the reply's sounding frames the microphone must sound in with it
DECIDE_EVERY = 10  # frames between decisions
# Once an echo was found, the listener talking over it lowers the correlation for as long as the
# window holds the voice: only this many decisions in a row without one (10 s of the reply
# sounding) say the echo has gone (a headset plugged in).
CLEAN_AFTER_ECHO = 100
# Until the levels can tell (the reply's first ~1.1 s), a voice in the microphone is told from the
# echo by its waveform: an echo is the reply filtered by the room, so the microphone's last 200 ms
# (whitened, at 8 kHz) match some 200 ms of the reply's last 800 ms (normalised peak 0.6-0.9 at
# -6 to -20 dB, delays 40-300 ms, RT60 150-300 ms); a voice matches none (0.10-0.15, the reply's
# own TTS voice saying other words included). Between the bounds the last reading stands.
QUICK_EVERY = 5  # frames between readings
QUICK_MIC_S = 0.2
QUICK_REF_S = 0.8
QUICK_ECHO = 0.4
QUICK_VOICE = 0.25
QUICK_LEVEL = 60.0  # PCM16 RMS (-55 dBFS): a quieter microphone holds nothing to tell
QUICK_STRETCH_LEVEL = 10.0  # RMS of a stretch of the whitened reply below which it played nothing
# The linear canceller's reference runs on a clock of its own that only ever steps 10 ms a frame:
# the microphone's clock moves back a few ms whenever a chunk comes sooner than any before it (a
# busy loop or network makes the first ones late), and each such step would move the reference
# against the echo the filter learned, which it then learns again for seconds while the glances
# read its residue, the echo ~5 dB down instead of ~15 ("Stop." read as "It's top.", "Let's jump.";
# offline, three dev voices' "Stop." over -10 dB echo, arrivals late by an exponential 8 / 20 ms on
# average: 15 / 12 of 18 glances read it, 18 / 18 with this clock). A larger step (a client that
# paused sending) is a new place: the filter follows it and realigns.
LINEAR_SNAP_S = 0.03
ALIGN_EVERY = 50  # frames between waveform readings, once the levels decided, that keep the linear canceller aligned
LEARNING_FRAMES = 200  # the canceller learns while the reply has sounded less than this (2 s) in the session
# Each run of the reply (``PlayedAudio.run_at``: one that began after the listener's queue ran dry,
# as every answer and every resumed reply does) reaches the loudspeaker a different few tens of ms
# late, and AEC3, having found one echo path, takes a while to follow the moved delay: offline (a
# Piper answer after a cut-in, -10 dB) a run 50-80 ms later than the last left 10-15 dB of its echo
# in its first ~0.6 s, and the room bench's answers to 4 of 48 cut-ins stopped themselves 0.3-0.8 s
# in. So a new run's first second of sound is learned again: a voice's onset in it is unsure.
RESETTLE_FRAMES = 100
# Nothing the loudspeaker played can still be in the microphone once the reference has been
# silent this long (echo paths up to 600 ms, a room's tail up to 300 ms): AEC3 rests, and the
# microphone passes as it came (AEC3 with a silent reference only high-passes it). Its last
# second of reference was zeros, so when the reply sounds again it starts from a clean history
# and the echo path it learned. A session that listens costs ~2 points of a core less
# (``python -m bench calls --parts listening``).
STILL_FRAMES = 100


class EchoPresence:
    """Whether the microphone hears the loudspeaker: ``None`` until the reply has sounded long
    enough to tell, then a decision that changes only when the evidence crosses the other bound."""

    def __init__(self) -> None:
        self._mic = np.zeros(WINDOW_FRAMES, np.float32)
        self._ref = np.zeros(WINDOW_FRAMES, np.float32)
        self._frames = 0
        self.echo: bool | None = None
        self._clean_streak = 0  # decisions in a row that found no echo
        self.correlation = 0.0
        self.delay_ms: int | None = None  # the lag of the best correlation

    def add(self, mic_rms: float, ref_rms: float) -> None:
        i = self._frames % WINDOW_FRAMES
        self._mic[i], self._ref[i] = mic_rms, ref_rms
        self._frames += 1
        if self._frames % DECIDE_EVERY == 0:
            self._decide()

    def _decide(self) -> None:
        n = min(self._frames, WINDOW_FRAMES)
        order = (np.arange(self._frames - n, self._frames)) % WINDOW_FRAMES
        mic, ref = self._mic[order], self._ref[order]
        m = n - MAX_LAG_FRAMES
        if m <= 0 or np.count_nonzero(ref[:m] > ACTIVE_LEVEL) < MIN_ACTIVE_FRAMES:
            return
        # the microphone's last m frames against the reply's, 0..MAX_LAG_FRAMES frames earlier, over
        # the frames some of the reply could echo in: the user's own voice while nothing played (a
        # spoken question just before the reply) says nothing of an echo, and counted it made a
        # microphone at -6 dB read 0.27-0.33 a second into the first reply and be judged clean.
        could = np.lib.stride_tricks.sliding_window_view(ref, MAX_LAG_FRAMES + 1).max(axis=1)[:m] > ACTIVE_LEVEL
        heard = mic[MAX_LAG_FRAMES:][could]
        refs = np.lib.stride_tricks.sliding_window_view(ref, m)[::-1][:, could]  # row L: lag L
        a = heard - heard.mean()
        b = refs - refs.mean(axis=1, keepdims=True)
        den = np.sqrt((a * a).sum() * (b * b).sum(axis=1))
        c = np.where(den > 0, (b @ a) / np.maximum(den, 1e-9), 0.0)
        lag = int(np.argmax(c))
        best = float(c[lag])
        self.correlation, self.delay_ms = best, lag * 10
        # An echo sounds in the microphone whenever the reply does; a voice or two that happen to
        # line up with the reply's level do not (their correlation can reach the bound by chance).
        lagged = refs[lag]
        sounding = lagged > ACTIVE_LEVEL
        hiss = float(np.percentile(mic[MAX_LAG_FRAMES:], 10))  # over the whole window: its quietest frames
        floor = np.maximum(lagged[sounding] * ECHO_FLOOR, 2.0 * hiss)  # above its own hiss
        follows = np.count_nonzero(heard[sounding] >= floor) / max(1, np.count_nonzero(sounding))
        self._clean_streak = self._clean_streak + 1 if best < CLEAN_CORRELATION else 0
        if best >= ECHO_CORRELATION and follows >= ECHO_FOLLOWS:
            self.echo = True
        elif self._clean_streak >= (CLEAN_AFTER_ECHO if self.echo else 1):
            self.echo = False


class Cleaned(NamedTuple):
    """A chunk of the microphone cleaned two ways, the same length: ``heard`` (for the VAD and the
    turn's transcript) and ``words`` (for the glances: the voice kept whole, ``linear_echo.py``)."""

    heard: np.ndarray
    words: np.ndarray | None  # None: the same as ``heard``
    echo: bool = False  # the reply sounded in this chunk while its echo was cancelled (``words`` is the turn's to read)


class RoomFilter:
    """One session's microphone cleaner: echo cancellation against ``played`` (None: off) and
    noise suppression (``noise_suppression``), both with the high-pass filter. Feed it 16 kHz
    float audio in arrival order; it returns what is cleaned so far (while it cancels or
    suppresses, up to 10 ms stays pending; while the microphone passes as it came, nothing).
    Runs in the input thread, never on the loop."""

    def __init__(self, played: PlayedAudio | None, noise_suppression: bool) -> None:
        from livekit import rtc  # the native module loads only for sessions that use it

        self._rtc = rtc
        self.played = played
        self._aec = None
        self._ns = None
        if played is not None:
            self._aec = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)
            self._aec.set_stream_delay_ms(0)  # the delay is AEC3's to estimate
            self.presence = EchoPresence()
            self._recent = np.zeros(int(QUICK_MIC_S * RATE), np.int16)  # the microphone's last 200 ms
            self._voice: bool | None = None  # the last waveform reading: a voice (True) or the echo (False)
            self._unplayed = False  # ``_voice`` was read while nothing played: it holds only until the reply sounds
            self._sounded = 0  # frames the reply sounded in
            self.linear = linear_echo.LinearEcho() if linear_echo.available() else None
            self._run: int | None = None  # the run of the reply the reference last read
            self._resettling = 0  # frames of the current run's sound left to learn its delay in
            self._still = 0  # frames in a row the reference was digital silence (``STILL_FRAMES``)
        if noise_suppression:
            self._ns = rtc.AudioProcessingModule(noise_suppression=True, high_pass_filter=True)
        self._pending = np.zeros(0, np.int16)
        self._pending_t: float | None = None  # monotonic time of the first pending sample
        # While the output is the microphone as it came (no echo found, no noise suppression), a
        # partial frame is given on at once (``_given`` of the pending samples) and the canceller
        # reads it with the next chunk: a clean microphone's voice never waits up to 10 ms for its
        # frame to fill (a VAD window ending in it waited a whole chunk).
        self._passing = noise_suppression is False
        self._given = 0
        self._last_arrival = 0.0
        self._moved_back = 0.0  # how far the clock went back to meet early chunks since it started
        self._late, self._late_since = float("inf"), 0.0  # the least lateness of the chunks since then
        self._burst = False  # audio is coming faster than real time: no echo of the room in it
        self._linear_t: float | None = None  # the linear canceller's reference clock (``LINEAR_SNAP_S``)
        self.frames = 0
        # The last frame was the canceller's output: the microphone is taken to hear the loudspeaker
        # (its levels found an echo, or, before they can tell, its waveform did not last read a voice).
        self.cancelling = False
        self.learning = False  # the last frame came out of a canceller still learning the echo path

    @property
    def suppressing(self) -> bool:
        return self._ns is not None

    def process(self, audio: np.ndarray, arrived_at: float) -> np.ndarray:
        """What the VAD hears of ``audio`` (``clean``'s ``heard``)."""
        return self.clean(audio, arrived_at).heard

    def clean(self, audio: np.ndarray, arrived_at: float) -> Cleaned:
        chunk = (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)
        live = self._clock(chunk.size, arrived_at)
        pcm = np.concatenate([self._pending, chunk]) if self._pending.size else chunk
        whole = pcm.size // FRAME * FRAME
        heard, words = np.empty(whole, np.int16), np.empty(whole, np.int16)
        differs = echo = False
        for k in range(0, whole, FRAME):
            h, w, e = self._frame(pcm[k:k + FRAME], self._pending_t + k / RATE, live)
            heard[k:k + FRAME], words[k:k + FRAME] = h, w
            differs, echo = differs or w is not h, echo or e
        heard, words = heard[self._given:], words[self._given:]  # (their first samples were given on before)
        given = self._given if whole == 0 else 0  # samples of the new pending already given on
        self._pending = pcm[whole:].copy()
        self._pending_t += whole / RATE
        if self._passing and self._pending.size > given:  # nothing waits for the frame's end
            tail = self._pending[given:]
            heard, words = np.concatenate([heard, tail]), np.concatenate([words, tail])
            given = self._pending.size
        self._given = given
        return Cleaned(heard.astype(np.float32) / 32768.0, words.astype(np.float32) / 32768.0 if differs else None, echo)

    def _clock(self, samples: int, arrived_at: float) -> bool:
        """Place a chunk on the monotonic clock; whether it is live (arrives in real time)."""
        start = arrived_at - samples / RATE
        last, self._last_arrival = self._last_arrival, arrived_at
        if self._pending_t is None or (self._burst and start >= last - BURST_TOLERANCE_S):
            self._burst = False  # the first chunk, or real time again after a burst: the clock starts here
            self._pending_t = start - self._pending.size / RATE
            self._moved_back = 0.0
            self._late, self._late_since = float("inf"), arrived_at
            return True
        if self._burst:
            return False
        expected = self._pending_t + self._pending.size / RATE
        if start < expected:  # sooner than the clock allows: the clock started late (network jitter) ...
            if self._moved_back + expected - start > MAX_LEAD_S:  # ... or it comes faster than real time
                self._burst = True
                return False
            self._moved_back += expected - start
            self._pending_t -= expected - start
        # Late chunks move the clock on only when every chunk for a while came late (the client
        # paused sending): a stalled loop delivers a bunch whose last chunk is on time.
        self._late = min(self._late, max(0.0, start - expected))
        if arrived_at - self._late_since >= LATE_WINDOW_S:
            if self._late > LATE_SLACK_S:
                self._pending_t += self._late
                self._moved_back = 0.0
            self._late, self._late_since = float("inf"), arrived_at
        return True

    def _read_waveform(self, t: float) -> None:
        """Does the microphone hold a voice, or the reply's echo, and how late? Read while the
        levels cannot tell yet, then every ``ALIGN_EVERY`` frames for the linear canceller."""
        if self.frames % QUICK_EVERY or _rms(self._recent) < QUICK_LEVEL:
            return
        ref = self.played.read(t + FRAME / RATE - QUICK_REF_S, int(QUICK_REF_S * PlayedAudio.rate))
        if _rms(ref) < ACTIVE_LEVEL:
            self._voice = self._unplayed = True  # nothing played that could come back: whatever is heard is the room's
            return
        match, lag_s = echo_match(self._recent, ref)
        if match >= QUICK_ECHO:
            self._voice, self._unplayed = False, False
            if self.linear is not None:
                self.linear.align(lag_s + self._linear_offset(t))  # the delay on the linear canceller's clock
        elif match < QUICK_VOICE:
            self._voice, self._unplayed = True, False

    def _frame(self, mic: np.ndarray, t: float, live: bool) -> tuple[np.ndarray, np.ndarray, bool]:
        """One 10 ms frame: what the VAD hears, what the glances read, and whether the reply
        sounded while its echo was cancelled."""
        self.frames += 1
        rtc = self._rtc
        out = mic
        words = None
        echo = self.cancelling = False
        if self._aec is not None and live:
            ref = self.played.read(t, REF_FRAME)
            run = self.played.run_at(t)
            if run is not None and run != self._run:
                self._run, self._resettling = run, RESETTLE_FRAMES
            self._still = 0 if ref.any() else self._still + 1
            resting = self._still > STILL_FRAMES
            if not resting:
                self._aec.process_reverse_stream(rtc.AudioFrame(ref.tobytes(), PlayedAudio.rate, 1, REF_FRAME))
                frame = rtc.AudioFrame(mic.tobytes(), RATE, 1, FRAME)
                self._aec.process_stream(frame)
            ref_level = _rms(ref)
            self.presence.add(_rms(mic), ref_level)
            self._sounded += ref_level > ACTIVE_LEVEL
            self._resettling -= bool(self._resettling and ref_level > ACTIVE_LEVEL)
            # every frame: a reading matches the microphone's last 200 ms as they came (kept only
            # at the readings, the ones every ALIGN_EVERY frames held 10 ms from each of the last 20)
            self._recent = np.concatenate([self._recent[mic.size:], mic])
            if self.presence.echo is None or (self.presence.echo and self.frames % ALIGN_EVERY == 0):
                self._read_waveform(t)
            # the linear canceller for the glances, unless the microphone is known to hear no echo
            linear = None
            if self.linear is not None and self.presence.echo is not False:
                linear = self.linear.frame(mic, self._linear_reference(t), ref_level > ACTIVE_LEVEL)
            elif self.linear is not None:
                self.linear.rest()
            if self._unplayed and ref_level > ACTIVE_LEVEL:
                # A voice read while nothing played (the user's question) says nothing of the reply
                # that now begins: kept, the echo of the answer's first ~100-250 ms passed uncancelled
                # until a reading could match it, and the VAD took it for a voice (issue 70's SDK drive).
                self._voice, self._unplayed = None, False
            cancelled = bool(self.presence.echo or (self.presence.echo is None and not self._voice))
            self.cancelling = cancelled
            if cancelled:
                out, words = (mic if resting else np.frombuffer(frame.data, np.int16)), linear
                echo = ref_level > ACTIVE_LEVEL
            self.learning = cancelled and (self._sounded < LEARNING_FRAMES or self._resettling > 0)
        if self._ns is not None:
            frame = rtc.AudioFrame(out.tobytes(), RATE, 1, FRAME)
            self._ns.process_stream(frame)
            out = np.frombuffer(frame.data, np.int16)
        self._passing = out is mic
        if not mic.any():
            return mic, mic, echo  # digital silence holds no echo or noise: kept, not comfort-noised
        return out, out if words is None else words, echo

    def _linear_reference(self, t: float) -> np.ndarray:
        """What played at the linear canceller's time for the frame at ``t``: its clock steps a
        frame at a time and meets ``t`` again only when they are ``LINEAR_SNAP_S`` apart."""
        self._linear_t = t + self._linear_offset(t)
        ref = self.played.read(self._linear_t, REF_FRAME)
        self._linear_t += FRAME / RATE
        return ref

    def _linear_offset(self, t: float) -> float:
        """How far the linear canceller's clock is ahead of the frame at ``t`` (0 once they are
        ``LINEAR_SNAP_S`` apart: it meets ``t`` again there)."""
        if self._linear_t is None or abs(self._linear_t - t) >= LINEAR_SNAP_S:
            return 0.0
        return self._linear_t - t


def _rms(x: np.ndarray) -> float:
    f = x.astype(np.float64)
    return float(np.sqrt(np.dot(f, f) / f.size))  # a dot product, ~2 us: np.mean of squares ~8 us, several a 10 ms frame


def waveform_match(mic16: np.ndarray, ref24: np.ndarray) -> float:
    """The best normalised correlation of ``mic16`` (16 kHz) against any stretch of ``ref24``
    (24 kHz, longer), both taken to 8 kHz by decimation and whitened by a first difference."""
    return echo_match(mic16, ref24)[0]


def echo_match(mic16: np.ndarray, ref24: np.ndarray) -> tuple[float, float]:
    """``waveform_match`` and where: how long after the end of the stretch of ``ref24`` that matches
    best the microphone's last sample came (both end at the same time): the echo path's delay."""
    m = np.diff(mic16[::2].astype(np.float64))
    r = np.diff(ref24[::3].astype(np.float64))
    n = m.size
    if n == 0 or r.size < n:
        return 0.0, 0.0
    size = 1 << int(np.ceil(np.log2(r.size + n)))
    corr = np.fft.irfft(np.fft.rfft(r, size) * np.conj(np.fft.rfft(m, size)), size)[: r.size - n + 1]
    energy = np.concatenate([[0.0], np.cumsum(r * r)])
    stretch = energy[n:] - energy[:-n]
    # A stretch the reply was (nearly) silent in holds no echo; its tiny energy (and the FFT's and
    # the running sum's rounding) would make any microphone "match" it far above 1.
    sounding = stretch > max(QUICK_STRETCH_LEVEL ** 2 * n, 1e-6 * float(stretch.max(initial=0.0)))
    if not sounding.any():
        return 0.0, 0.0
    den = np.sqrt(stretch[sounding] * float((m * m).sum()))
    scores = np.abs(corr[sounding]) / np.maximum(den, 1e-9)
    best = int(np.argmax(scores))
    start = int(np.flatnonzero(sounding)[best])  # the matching stretch is r[start:start + n]
    return float(min(1.0, scores[best])), (r.size - start - n) / 8000.0
