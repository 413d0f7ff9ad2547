"""What the listener hears on a WebRTC call, measured by the test, not by the page under test.

``LEVEL_TAP_JS`` runs before a page's scripts (``install_level_tap``): it taps
the microphone stream ``getUserMedia`` returns (Chromium's fake microphone playing the test's WAV)
and every remote audio track an ``RTCPeerConnection`` receives (the reply), each into an
AudioWorklet of its own ``AudioContext`` that computes the RMS of every 10 ms frame. Both taps run
in that one context, so their frames carry the same clock (the context's ``currentTime`` of the
frame's first sample). Nothing is played: the worklets feed a muted gain. ``levels(driver)`` reads
the frames; ``measure_barge_in`` finds, from them alone, the voice's onset over the reply and the
reply's last audible frame after it (``BargeInTrack``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_S = 0.01  # one RMS value per 10 ms of audio

LEVEL_TAP_JS = """(() => {
  const FRAME_S = %s;
  const tap = (window.__levelTap = {mic: [], track: [], attached: {}, errors: []});
  const WORKLET = `
    class LevelTap extends AudioWorkletProcessor {
      constructor() { super(); this.n = Math.round(sampleRate * ${FRAME_S}); this.k = 0; this.sum = 0; this.t0 = 0; this.out = []; }
      process(inputs) {
        const chans = inputs[0] || [];
        const len = chans.length ? chans[0].length : 128;
        for (let i = 0; i < len; i++) {
          if (this.k === 0) this.t0 = currentTime + i / sampleRate;
          let s = 0;
          for (const c of chans) s += c[i] * c[i];
          this.sum += chans.length ? s / chans.length : 0;
          if (++this.k === this.n) {
            this.out.push(this.t0, Math.sqrt(this.sum / this.n));
            this.k = 0; this.sum = 0;
            if (this.out.length >= 20) { this.port.postMessage(this.out); this.out = []; }
          }
        }
        return true;
      }
    }
    registerProcessor("level-tap", LevelTap);`;
  let ready = null;
  const context = () => ready || (ready = (async () => {
    const ctx = new AudioContext();
    await ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([WORKLET], {type: "text/javascript"})));
    if (ctx.state !== "running") await ctx.resume();
    const mute = ctx.createGain();
    mute.gain.value = 0;
    mute.connect(ctx.destination);
    tap.ctx = ctx;
    tap.mute = mute;
    return ctx;
  })());
  const attach = (name, track) => context().then((ctx) => {
    const node = new AudioWorkletNode(ctx, "level-tap", {numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1]});
    node.port.onmessage = (e) => { for (const v of e.data) tap[name].push(v); };
    ctx.createMediaStreamSource(new MediaStream([track])).connect(node);
    node.connect(tap.mute);
    tap.attached[name] = ctx.currentTime;
    (tap.nodes || (tap.nodes = [])).push(node);  // kept alive
  }).catch((err) => tap.errors.push(`${name}: ${err && err.message || err}`));
  const devices = navigator.mediaDevices, open = devices.getUserMedia.bind(devices);
  devices.getUserMedia = async (c) => {
    const stream = await open(c);
    const t = stream.getAudioTracks()[0];
    if (t && !tap.attached.mic) { tap.attached.mic = -1; attach("mic", t); }
    return stream;
  };
  const Peer = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends Peer {
    constructor(...args) {
      super(...args);
      this.addEventListener("track", (e) => {
        if (e.track.kind === "audio" && !tap.attached.track) { tap.attached.track = -1; attach("track", e.track); }
      });
    }
  };
})();""" % FRAME_S


def install_level_tap(driver) -> None:
    """Tap the next page's microphone and remote tracks (call before ``driver.get``). The pages'
    Content-Security-Policy (script-src 'self') refuses the tap's worklet module, a blob: URL, so
    CSP is bypassed for this driver's pages; the pages' own scripts are served from 'self' anyway."""
    driver.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": LEVEL_TAP_JS})


def levels(driver) -> dict:
    """The taps' frames so far: ``{"mic": [[t, rms], ...], "track": [...], "now": t, "errors": [...]}``."""
    got = driver.execute_script(
        "const t = window.__levelTap; return t ? {mic: t.mic, track: t.track, errors: t.errors,"
        " now: t.ctx ? t.ctx.currentTime : null} : null;")
    if not got:
        return {"mic": [], "track": [], "now": None, "errors": ["no tap on this page"]}
    for name in ("mic", "track"):
        got[name] = np.asarray(got[name], dtype=float).reshape(-1, 2).tolist()
    return got


# The reply is audible in a 10 ms frame of the track whose RMS is above the track's idle level:
# while nothing plays, the gateway sends a constant Opus silence frame (gateway/realtime/webrtc/
# tracks.py, OPUS_SILENCE), which decodes to digital zeros, so the idle frames (the track before
# the question ended: no reply can have started) measure ~0. The threshold is IDLE_MARGIN times
# the loudest idle frame, and never below AUDIBLE_FLOOR (-50 dBFS): far under Piper's speech (RMS
# ~0.05-0.2 in its words) yet above the decoder's fade into the silence frames after the last word.
AUDIBLE_FLOOR = 0.003
IDLE_MARGIN = 4.0
MIN_IDLE_FRAMES = 20  # 200 ms of idle track at least, or the threshold has no basis
# A silence of at least REPLY_GAP_S on the track ends a reply: Piper's pauses between words and
# sentences are shorter, so a run of audible frames after such a gap is the next reply.
REPLY_GAP_S = 0.4
# The microphone (the fake device plays the WAV: digital zeros between the utterances) carries
# voice in a frame above MIC_VOICED (-40 dBFS; speech is 10-20 dB louder). Voiced frames less
# than MIC_GAP_S apart are one utterance (its word and sentence pauses); the WAV's utterances are
# seconds apart.
MIC_VOICED = 0.01
MIC_GAP_S = 1.0
# A run of the track that begins up to CUT_ALLOWANCE_S after the onset is still the cut reply (a
# sentence pause of >= REPLY_GAP_S that spanned the onset): the next reply cannot begin before the
# interruption (~3 s of speech) has ended.
CUT_ALLOWANCE_S = 0.5


def runs(frames: np.ndarray, threshold: float, gap_s: float) -> list[tuple[float, float]]:
    """(start, end) of the runs of frames above ``threshold``, runs less than ``gap_s`` apart joined;
    ``end`` is the end of the run's last loud frame."""
    loud = frames[frames[:, 1] > threshold, 0] if len(frames) else np.zeros(0)
    out: list[tuple[float, float]] = []
    for t in loud:
        if out and t - out[-1][1] < gap_s:
            out[-1] = (out[-1][0], float(t) + FRAME_S)
        else:
            out.append((float(t), float(t) + FRAME_S))
    return out


@dataclass
class BargeInTrack:
    """One barge-in as the taps heard it (times on the taps' clock, seconds)."""

    why: str | None = None  # set: what the frames lack (the measurement or its precondition)
    idle_rms: float | None = None  # the loudest idle frame of the track
    threshold: float | None = None  # audible above this RMS
    reply_start: float | None = None  # the reply's first audible frame
    onset: float | None = None  # the voice's onset on the mic: its first run that began after reply_start
    playing_at_onset: bool = False  # the reply was audible on the track (a run covers the onset)
    cut_end: float | None = None  # the end of the cut reply's last audible frame
    next_start: float | None = None  # the next reply's first audible frame (None: none yet)
    track_until: float | None = None  # the last track frame read

    @property
    def silence_after_onset_ms(self) -> int | None:
        """Onset -> the cut reply's last audio on the track (ms)."""
        if self.onset is None or self.cut_end is None:
            return None
        return round((self.cut_end - self.onset) * 1000)


def measure_barge_in(got: dict) -> BargeInTrack:
    """The barge-in in the taps' frames (``levels``): the question is the mic's first utterance, the
    reply the track's first audible run after it, the interruption the mic's first utterance that
    began after the reply did."""
    mic = np.asarray(got["mic"], dtype=float).reshape(-1, 2)
    track = np.asarray(got["track"], dtype=float).reshape(-1, 2)
    m = BargeInTrack(track_until=float(track[-1, 0]) if len(track) else None)
    voice = runs(mic, MIC_VOICED, MIC_GAP_S)
    if not voice:
        m.why = "no voice on the microphone yet"
        return m
    asked = voice[0][1]  # the question's end: no reply before it
    idle = track[track[:, 0] < asked, 1]
    if len(idle) < MIN_IDLE_FRAMES:
        m.why = f"only {len(idle)} idle frames of the track before the question ended"
        return m
    m.idle_rms = float(idle.max())
    m.threshold = max(AUDIBLE_FLOOR, IDLE_MARGIN * m.idle_rms)
    replies = runs(track[track[:, 0] >= asked], m.threshold, REPLY_GAP_S)
    if not replies:
        m.why = "no reply audible on the track yet"
        return m
    m.reply_start = replies[0][0]
    later = [a for a, _ in voice if a > m.reply_start]
    if not later:
        m.why = "no voice began on the microphone after the reply began"
        return m
    m.onset = later[0]
    m.playing_at_onset = any(a <= m.onset <= b for a, b in replies)
    cut = [r for r in replies if r[0] < m.onset + CUT_ALLOWANCE_S]
    m.cut_end = cut[-1][1]
    nxt = [a for a, _ in replies if a >= m.onset + CUT_ALLOWANCE_S]
    m.next_start = nxt[0] if nxt else None
    if not m.playing_at_onset:
        m.why = "the reply was not audible on the track when the voice began"
    return m
