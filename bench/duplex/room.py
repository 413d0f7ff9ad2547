"""The room around a simulated client (``python -m bench duplex --room``): a microphone that hears
the loudspeaker (echo) and the room's noise as well as the user.

**Echo.** The client's ``Player(keep=True)`` keeps the PCM it plays (24 kHz int16) on its play
timeline, clears applied: audio cleared at ``speech_started`` is not played, audio of a cut reply
that arrives after the clear is (``Player``'s rule). At each 20 ms chunk the microphone sends, it
adds what the loudspeaker played ``delay_ms`` earlier (``loudspeaker``), convolved with a short
synthetic room (``room_response``: the direct path first, then an exponentially decaying noise tail
with the asked RT60, 150-300 ms; unit energy) and scaled to ``level_db`` relative to the played
signal (-6, -10, -20 dB). The convolution runs chunk by chunk (overlap-add), so the tail of what
played before rings into the next chunk.

**Noise**, made here from nothing of any set and nothing downloaded, seeded and deterministic,
each a loop of ``LOOP_S`` seconds with a cross-faded seam:

- ``babble``: six espeak-ng voices (English accents with named variants) reading invented café
  sentences (``BABBLE_SENTENCES``, checked against every set by the tests), staggered, at
  different distances, mixed and slightly reverberated (RT60 0.5 s); cached under ``data/room/``
  (git-ignored): espeak-ng takes some seconds.
- ``music``: a I-V-vi-IV chord progression (pad chords with six harmonics and ADSR envelopes),
  a plucked bass on the first and third beat, a plucked melody walking the major scale in eighth
  notes with rests, soft noise hats on the off-beats.
- ``keyboard``: key presses at typing rhythm (gamma-distributed gaps, about 8 keys a second,
  words, spaces, pauses to think): a bright click, a short body thump, a softer release click.
- ``fan``: pink noise low-passed at 800 Hz, slowly modulated at the blade rate, with a 50 Hz mains
  hum and its harmonics.

Levels are set by SNR (20 and 10 dB) against a typical user voice at the microphone: the median
over the part's ``complete`` clips of their active-speech RMS (``voice_level``: the 20 ms frames
within 30 dB of the clip's loudest). The microphone (``RoomMic``) sends echo + noise + the user's
clip when one is queued, rounded and clipped to int16.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from bench.duplex.client import Mic, Player
from bench.duplex.common import CHUNK, CHUNK_MS
from bench.duplex_set import RATE
from devtools.espeak import espeak

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "data" / "room"  # git-ignored (data/*)
NOISE_VERSION = 1  # bump when a generator changes, so a cached babble is made again
LOOP_S = 30.0  # each noise is a loop this long
NOISES = ("babble", "music", "keyboard", "fan")
ECHO_LEVELS_DB = (-10.0, -6.0, -20.0)
DELAYS_MS = (40, 80, 150, 220, 300)  # cycled across trials
RT60S_S = (0.15, 0.2, 0.25, 0.3)  # the echo's room, cycled across trials
ACTIVE_DB = 30.0  # voice_level: frames within this of the clip's loudest are speech

# Espeak-ng voices for the babble (voice, words per minute, pitch); none of the held-out part's voices
# (tests/unit/test_duplex_set.py keeps those out of every other file).
BABBLE_VOICES = (("en-gb-scotland+Andy", 150, 40), ("en-029+Annie", 165, 62), ("en-us-nyc+Gene", 175, 35),
                 ("en-gb-x-rp+Alicia", 158, 70), ("en-gb-x-gbclan+Lee", 145, 48), ("en-gb-x-gbcwmd+belinda", 168, 55))
# Invented café chatter, written for the babble; no item of any set (tests/unit/test_duplex_room.py).
BABBLE_SENTENCES = (
    "So my cousin finally sold that old green van to a farmer from the valley.",
    "The oat milk here is fine but the almond one tastes of cardboard.",
    "We waited forty minutes for the tram and then three came at once.",
    "Honestly the second season dragged, although the ending made up for it.",
    "She painted the whole hallway yellow without asking anybody first.",
    "I told him the meeting moved to Thursday but he turned up anyway.",
    "Their terrace gets the sun until about six in the evening.",
    "My neighbour keeps bees on the roof and gives away jars of honey.",
    "The printer jammed again right before the deadline, naturally.",
    "We are thinking of driving up the coast for the long weekend.",
    "He ordered the soup, sent it back, and then ordered the same soup.",
    "Did you ever finish that jigsaw with the thousand tiny boats?",
    "The kids built a fort out of sofa cushions and refused to leave it.",
    "Apparently the bakery across the square is closing in spring.",
    "I swapped my old bike for a folding one and I regret nothing.",
    "Our landlord promised to fix the boiler before the cold sets in.",
    "The choir rehearses in the church hall every Tuesday night.",
    "Somebody left a violin case on the bus and nobody claimed it.",
    "I burnt the rice twice last week, so now I just buy it cooked.",
    "They moved the market to the car park while the street is dug up.",
    "My sister started running and now she talks about nothing else.",
    "The film was three hours long and I slept through the middle bit.",
    "Remember to bring the blue folder, the one with the receipts in it.",
    "We planted tomatoes by the fence but the snails got there first.",
)


# ------------------------------------------------------------------------------------ the echo


def room_response(rt60_s: float, seed: int, drr_db: float = 3.0, rate: int = RATE) -> np.ndarray:
    """A synthetic room's impulse response: the direct path (sample 0), then from 3 ms a noise tail
    decaying by 60 dB over ``rt60_s``, ``drr_db`` below the direct path in energy; unit energy."""
    rng = np.random.default_rng(seed)
    n = max(2, int(rt60_s * rate))
    t = np.arange(n) / rate
    tail = rng.standard_normal(n) * np.exp(-np.log(1000.0) * t / rt60_s)
    tail[:max(1, int(0.003 * rate))] = 0.0
    tail *= np.sqrt(10 ** (-drr_db / 10) / np.sum(tail ** 2))
    tail[0] = 1.0
    return tail / np.sqrt(np.sum(tail ** 2))


def loudspeaker(player: Player, start: float, n: int, rate: int = RATE) -> np.ndarray:
    """What the loudspeaker played at the times ``start + k / rate``, k < n (monotonic seconds),
    from a ``Player(keep=True)``: each segment's samples from its start until where it stops
    sounding (a clear cuts it there); silence elsewhere."""
    out = np.zeros(n)
    stop = start + n / rate
    for (_, _, s, e), pcm in zip(reversed(player.segments), reversed(player.pcm)):
        if e <= s:
            continue  # cleared before it began
        if e <= start:
            break  # the segments that sounded are in time order: every earlier one ended before
        if s >= stop:
            continue
        lo = max(0, int(np.ceil((s - start) * rate)))
        hi = min(n, int(np.ceil((e - start) * rate)))
        k = np.arange(lo, hi)
        j = np.floor(k + (start - s) * rate + 0.5).astype(np.int64)
        keep = (j >= 0) & (j < pcm.size)
        out[k[keep]] = pcm[j[keep]]
    return out


class Echo:
    """The loudspeaker as the microphone hears it: ``level_db`` below what played, ``delay_ms``
    later, through ``room_response(rt60_s, seed)``. ``chunk`` is called for consecutive chunks."""

    def __init__(self, level_db: float, delay_ms: float, rt60_s: float = 0.2, seed: int = 0) -> None:
        self.level_db, self.delay_ms, self.rt60_s = level_db, delay_ms, rt60_s
        self.gain = 10 ** (level_db / 20)
        self.ir = room_response(rt60_s, seed)
        self._nfft = 1 << int(np.ceil(np.log2(CHUNK + self.ir.size - 1)))
        self._h = np.fft.rfft(self.ir, self._nfft)
        self._carry = np.zeros(self._nfft)  # what rings on past the chunks already heard
        self.played_energy = 0.0  # of the dry signal (what played), for the level heard
        self.echo_energy = 0.0

    def chunk(self, player: Player, end: float, n: int = CHUNK) -> np.ndarray:
        """The echo in the ``n`` samples the microphone captured up to ``end`` (monotonic seconds)."""
        if n + self.ir.size - 1 > self._nfft:
            raise ValueError(f"chunks of {n} samples are longer than this echo was set up for")
        dry = loudspeaker(player, end - n / RATE - self.delay_ms / 1000, n)
        wet = np.fft.irfft(np.fft.rfft(dry, self._nfft) * self._h, self._nfft) + self._carry
        self._carry = np.concatenate([wet[n:], np.zeros(n)])
        out = wet[:n] * self.gain
        self.played_energy += float(np.sum(dry ** 2))
        self.echo_energy += float(np.sum(out ** 2))
        return out

    def heard_db(self) -> float | None:
        """The echo's level relative to what played, over the chunks so far."""
        if self.played_energy <= 0 or self.echo_energy <= 0:
            return None
        return round(10 * np.log10(self.echo_energy / self.played_energy), 2)


class RoomMic(Mic):
    """``Mic`` in a room: each chunk is the queued voice plus the ``echo`` of ``player`` plus the
    ``noise`` loop (from ``noise_at``, the sample it starts on), rounded and clipped to int16."""

    def __init__(self, ws, player: Player, echo: Echo | None = None, noise: np.ndarray | None = None,
                 noise_at: int = 0, append: str = "input_audio_buffer.append") -> None:
        super().__init__(ws, append)
        self.player, self.echo, self.noise = player, echo, noise
        self._at = noise_at % noise.size if noise is not None and noise.size else 0
        self.clipped = 0  # samples past int16

    def hear(self, voice: np.ndarray, end: float) -> np.ndarray:
        x = voice.astype(np.float64)
        if self.echo is not None:
            x += self.echo.chunk(self.player, end, x.size)
        if self.noise is not None:
            x += loop_slice(self.noise, self._at, x.size)
            self._at = (self._at + x.size) % self.noise.size
        x = np.round(x)
        self.clipped += int(np.sum(np.abs(x) > 32767))
        return np.clip(x, -32768, 32767).astype(np.int16)


def loop_slice(x: np.ndarray, at: int, n: int) -> np.ndarray:
    """``n`` samples of the loop ``x`` from ``at``, wrapping round."""
    idx = (at + np.arange(n)) % x.size
    return x[idx]


# ----------------------------------------------------------------------------------- the levels


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2))) if np.size(x) else 0.0


def dbfs(level: float) -> float | None:
    """An int16 RMS in dB relative to full scale."""
    return round(20 * np.log10(level / 32768), 1) if level > 0 else None


def active_rms(pcm: np.ndarray, rate: int = RATE) -> float:
    """A clip's active-speech RMS: over its 20 ms frames within ``ACTIVE_DB`` of its loudest."""
    frame = rate * CHUNK_MS // 1000
    x = np.asarray(pcm, np.float64)
    n = x.size // frame
    if n == 0:
        return rms(x)
    energy = np.mean(x[:n * frame].reshape(n, frame) ** 2, axis=1)
    active = energy[energy >= energy.max() * 10 ** (-ACTIVE_DB / 10)]
    return float(np.sqrt(np.mean(active)))


def voice_level(pcms: list[np.ndarray]) -> float:
    """A typical user voice at the microphone (int16 RMS): the median of the clips' ``active_rms``."""
    if not pcms:
        raise ValueError("no clip to take a voice level from")
    return float(np.median([active_rms(p) for p in pcms]))


def at_snr(noise: np.ndarray, voice_rms: float, snr_db: float) -> np.ndarray:
    """``noise`` scaled so its RMS is ``snr_db`` below ``voice_rms``."""
    return noise * (voice_rms / 10 ** (snr_db / 20) / rms(noise))


# ------------------------------------------------------------------------------------ the noise


def noise(kind: str, seed: int = 0, seconds: float = LOOP_S, cache: Path | None = CACHE) -> np.ndarray:
    """One of ``NOISES`` as a loop of ``seconds`` (float, unit RMS, at ``RATE``); ``cache``: where
    the babble is kept (None: made every time)."""
    if kind == "babble":
        return babble(seconds, seed, cache=cache)
    makers = {"music": music, "keyboard": keyboard, "fan": fan}
    if kind not in makers:
        raise ValueError(f"unknown noise {kind!r}; one of {NOISES}")
    return makers[kind](seconds, seed)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / rms(x)


def _loopable(x: np.ndarray, n: int, fade: int) -> np.ndarray:
    """The first ``n`` samples of ``x`` (which holds ``n + fade``), its head cross-faded with what
    follows sample ``n``, so the loop has no seam."""
    out = x[:n].copy()
    ramp = np.linspace(0.0, 1.0, fade, endpoint=False)
    out[:fade] = x[:fade] * ramp + x[n:n + fade] * (1 - ramp)
    return out


def reverberate(x: np.ndarray, rt60_s: float, seed: int, drr_db: float) -> np.ndarray:
    """``x`` through ``room_response`` (an FFT convolution, cut to ``x``'s length)."""
    h = room_response(rt60_s, seed, drr_db)
    size = 1 << int(np.ceil(np.log2(x.size + h.size - 1)))
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)[:x.size]


def babble(seconds: float = LOOP_S, seed: int = 0, talkers: int = 6, cache: Path | None = CACHE) -> np.ndarray:
    """Café babble: ``talkers`` espeak-ng voices reading ``BABBLE_SENTENCES`` in their own orders
    with short pauses, each at its own distance (-4..+2 dB), mixed, reverberated (RT60 0.5 s, as
    much tail as direct sound); unit RMS, a seamless loop."""
    spec = json.dumps([NOISE_VERSION, seconds, seed, talkers, BABBLE_VOICES, BABBLE_SENTENCES])
    path = None
    if cache is not None:
        path = Path(cache) / f"babble-{hashlib.sha1(spec.encode()).hexdigest()[:12]}.npy"
        if path.exists():
            try:
                return np.load(path)
            except (OSError, ValueError):
                pass
    rng = np.random.default_rng([seed, 1])
    n, fade = int(seconds * RATE), int(0.5 * RATE)
    mix = np.zeros(n + fade)
    for t in range(talkers):
        voice, wpm, pitch = BABBLE_VOICES[t % len(BABBLE_VOICES)]
        track = np.zeros(n + fade)
        pos = int(rng.uniform(0.0, 1.5) * RATE)
        order = rng.permutation(len(BABBLE_SENTENCES))
        k = 0
        while pos < track.size:
            said = espeak(BABBLE_SENTENCES[order[k % order.size]], voice, wpm + int(rng.integers(-10, 11)), pitch)
            k += 1
            take = min(said.size, track.size - pos)
            track[pos:pos + take] = said[:take]
            pos += said.size + int(rng.uniform(0.15, 0.9) * RATE)
        mix += _unit(track) * 10 ** (rng.uniform(-4.0, 2.0) / 20)
    out = _unit(_loopable(reverberate(mix, 0.5, seed + 7, 0.0), n, fade)).astype(np.float32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, out)
    return out


def _harmonics(f: float, t: np.ndarray, count: int, tilt: float, phase: np.ndarray) -> np.ndarray:
    return sum(np.sin(2 * np.pi * f * h * t + phase[h - 1]) / h ** tilt for h in range(1, count + 1))


def _adsr(n: int, attack: float, decay: float, sustain: float, release: float) -> np.ndarray:
    a, d, r = int(attack * RATE), int(decay * RATE), int(release * RATE)
    env = np.full(n, sustain)
    env[:a] = np.linspace(0, 1, a, endpoint=False)
    env[a:a + d] = np.linspace(1, sustain, len(env[a:a + d]), endpoint=False)
    if r:
        env[-r:] *= np.linspace(1, 0, min(r, n))
    return env


def _midi(note: float) -> float:
    return 440.0 * 2 ** ((note - 69) / 12)


def music(seconds: float = LOOP_S, seed: int = 0) -> np.ndarray:
    """Background music: I-V-vi-IV pad chords, plucked bass and melody, off-beat hats; unit RMS."""
    rng = np.random.default_rng([seed, 2])
    n, fade = int(seconds * RATE), int(0.5 * RATE)
    out = np.zeros(n + fade + 3 * RATE)
    root = 55 + int(rng.integers(0, 6))  # G3..C4
    beat = 60.0 / float(rng.uniform(88, 108))
    chords = ((0, 4, 7), (7, 11, 14), (9, 12, 16), (5, 9, 12))
    scale = (0, 2, 4, 5, 7, 9, 11, 12, 14, 16)

    def put(at: float, tone: np.ndarray, gain: float) -> None:
        i = int(at * RATE)
        if i < out.size:
            take = min(tone.size, out.size - i)
            out[i:i + take] += gain * tone[:take]

    bar, step, note = 0, 0, 4
    while bar * 4 * beat < (n + fade) / RATE:
        at = bar * 4 * beat
        chord = chords[bar % len(chords)]
        length = int(4 * beat * RATE)
        t = np.arange(length) / RATE
        for iv in chord:  # the pad
            put(at, _harmonics(_midi(root + iv), t, 6, 1.5, rng.uniform(0, 2 * np.pi, 6))
                * _adsr(length, 0.12, 0.4, 0.6, 0.35), 0.22)
        for b in (0, 2):  # the bass
            tb = np.arange(int(1.5 * beat * RATE)) / RATE
            put(at + b * beat, _harmonics(_midi(root + chord[0] - 12), tb, 4, 1.2, np.zeros(4))
                * np.exp(-tb / 0.45), 0.5)
        for e in range(8):  # the melody, eighth notes
            if rng.random() < 0.25:
                continue
            step = int(np.clip(step + rng.integers(-2, 3), 0, len(scale) - 1))
            note = root + 12 + scale[step]
            tm = np.arange(int(0.6 * RATE)) / RATE
            vibrato = 1 + 0.004 * np.sin(2 * np.pi * 5.5 * tm)
            tone = _harmonics(_midi(note), tm * vibrato, 4, 1.8, np.zeros(4)) * np.exp(-tm / 0.22)
            tone[:120] *= np.linspace(0, 1, 120)
            put(at + e * beat / 2, tone, 0.35)
        for b in range(4):  # hats on the off-beats
            hat = np.diff(rng.standard_normal(int(0.04 * RATE) + 1)) * np.exp(-np.arange(int(0.04 * RATE)) / 60)
            put(at + (b + 0.5) * beat, hat, 0.05)
        bar += 1
    return _unit(_loopable(out, n, fade)).astype(np.float32)


def _key(rng: np.random.Generator, space: bool) -> np.ndarray:
    """One key: a bright press click, a short body thump, a softer release click 60-110 ms later."""
    length = int(0.16 * RATE)
    out = np.zeros(length)
    click_n = int(0.004 * RATE)
    tc = np.arange(click_n)
    click = 0.3 * np.diff(rng.standard_normal(click_n + 1)) * np.exp(-tc / (0.0015 * RATE))
    out[:click_n] += click
    f = rng.uniform(110, 170) if space else rng.uniform(180, 320)
    tt = np.arange(int(0.03 * RATE)) / RATE
    out[:tt.size] += 0.6 * np.sin(2 * np.pi * f * tt) * np.exp(-tt / 0.012)
    rel = int(rng.uniform(0.06, 0.11) * RATE)
    out[rel:rel + click_n] += 0.12 * np.diff(rng.standard_normal(click_n + 1)) * np.exp(-tc / (0.001 * RATE))
    return out * rng.uniform(0.6, 1.0) * (1.3 if space else 1.0)


def keyboard(seconds: float = LOOP_S, seed: int = 0) -> np.ndarray:
    """Typing: words of 2-8 keys (gaps from a gamma of mean 0.12 s), a space after each, now and
    then a pause of 0.6-2 s to think; unit RMS."""
    rng = np.random.default_rng([seed, 3])
    n, fade = int(seconds * RATE), int(0.2 * RATE)
    out = np.zeros(n + fade + RATE)
    t = 0.1
    while t < (n + fade) / RATE:
        for k in range(int(rng.integers(2, 9)) + 1):
            key = _key(rng, space=k == 0 and t > 0.1)
            i = int(t * RATE)
            take = min(key.size, out.size - i)
            out[i:i + take] += key[:take]
            t += float(rng.gamma(4.0, 0.03))
        if rng.random() < 0.15:
            t += float(rng.uniform(0.6, 2.0))
    return _unit(_loopable(out, n, fade)).astype(np.float32)


def fan(seconds: float = LOOP_S, seed: int = 0) -> np.ndarray:
    """A fan: pink noise low-passed at 800 Hz, modulated at a blade rate of 20-30 Hz by 10 %, with a
    50 Hz hum and its harmonics 10 dB under the noise; periodic (an FFT noise, whole cycles), so it
    loops without a seam; unit RMS."""
    rng = np.random.default_rng([seed, 4])
    n = int(seconds * RATE)
    f = np.fft.rfftfreq(n, 1 / RATE)
    shape = 1 / np.sqrt(np.maximum(f, 20.0)) / (1 + (f / 800.0) ** 2)
    spectrum = (rng.standard_normal(f.size) + 1j * rng.standard_normal(f.size)) * shape
    spectrum[0] = 0
    air = _unit(np.fft.irfft(spectrum, n))
    t = np.arange(n) / RATE
    blade = round(rng.uniform(20, 30) * seconds) / seconds  # whole cycles in the loop
    air *= 1 + 0.1 * np.sin(2 * np.pi * blade * t)
    hum = sum(a * np.sin(2 * np.pi * 50 * h * t + rng.uniform(0, 2 * np.pi))
              for h, a in ((1, 1.0), (2, 0.5), (3, 0.3)))
    return _unit(air + _unit(hum) * 10 ** (-10 / 20)).astype(np.float32)
