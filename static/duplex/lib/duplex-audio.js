// A duplex session's audio graph, apart from what carries the audio: the AudioContext at the wire
// rate, the microphone -> the mixer's mic gain -> the capture worklet (its frames go to `onFrame`),
// the loudness meters, the queue chimes, and what a transport asks for: the page's player behind
// the mixer's volume (WebSocket), the microphone as a track to send and the reply's remote track
// metered (WebRTC). `stop` stops and closes all of it.
import { AudioPlayer } from "./audio-player.js";
import { LufsMeter } from "./lufs.js";
import { Mixer } from "./mixer-controller.js";
import { QueueChimes } from "./queue-chimes.js";

export const RATE = 24000; // the wire rate, both directions
export const FRAME_MS = 40;
const HEARD_RMS = 1e-4; // above the decoded silence frames (zeros), below any speech

export class DuplexAudio {
  /** `onFrame({pcm, rms})`: each 40 ms PCM16 frame of the microphone, after the mic gain. */
  constructor({ chimes = true, onFrame }) {
    this.chimesEnabled = chimes;
    this.onFrame = onFrame;
    this.ctx = null;
    this.captureCtx = null; // a context at the device's rate, where the mic cannot feed ours
    this.stream = null; // the microphone's
    this.chimes = null;
    this.mixer = null;
    this.micMeter = null;
    this.outMeter = null;
    this._nodes = { capture: null, micGain: null, micOut: null, player: null, remote: null };
  }

  async start(stream) {
    this.stream = stream;
    try {
      this.ctx = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    } catch {
      this.ctx = new AudioContext({ latencyHint: "interactive" }); // the worklets resample
    }
    if (this.ctx.state === "suspended") await this.ctx.resume().catch(() => {});
    this._clock0 = this.ctx.currentTime;
    this._perf0 = performance.now();
    this.chimes = new QueueChimes(this.ctx, { enabled: this.chimesEnabled });
    const base = new URL(".", import.meta.url);
    await this.ctx.audioWorklet.addModule(new URL("capture-processor.js", base));
    this.mixer = new Mixer(this.ctx);
    let source;
    try {
      source = this.ctx.createMediaStreamSource(stream);
    } catch {
      // Some browsers cannot feed a mic into a context at another rate: capture at native rate.
      this.captureCtx = new AudioContext();
      await this.captureCtx.audioWorklet.addModule(new URL("capture-processor.js", base));
      source = this.captureCtx.createMediaStreamSource(stream);
    }
    const cctx = this.captureCtx || this.ctx;
    const capture = (this._nodes.capture = new AudioWorkletNode(cctx, "capture-processor", {
      numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
      processorOptions: { targetRate: RATE, frameMs: FRAME_MS },
    }));
    capture.port.onmessage = (e) => this.onFrame(e.data);
    // mic -> gain (the mixer's mic level) -> capture; the meters read after the gains.
    const micGain = (this._nodes.micGain = cctx === this.ctx ? this.mixer.mic : cctx.createGain());
    if (micGain !== this.mixer.mic) micGain.gain.value = this.mixer.mic.gain.value;
    source.connect(micGain);
    micGain.connect(capture);
    this.micMeter = new LufsMeter(cctx, micGain);
  }

  /** WebSocket: the page's player, behind the mixer's volume; the reply is metered as played. */
  async addPlayer() {
    const player = (this._nodes.player = new AudioPlayer(this.ctx, { sourceRate: RATE, output: this.mixer.output }));
    await player.start();
    this.outMeter = new LufsMeter(this.ctx, this.mixer.output);
    return player;
  }

  /** WebRTC: the microphone after the mixer's gain, as a track for the call (the browser's echo
   * cancellation, noise suppression and gain control already ran on the captured one). */
  trackOut() {
    const micOut = (this._nodes.micOut = (this.captureCtx || this.ctx).createMediaStreamDestination());
    this._nodes.micGain.connect(micOut);
    return micOut.stream.getAudioTracks()[0];
  }

  /** WebRTC: the reply's remote track here, metered (never played: the <audio> element plays
   * it, where the echo canceller hears it). Throws where the browser cannot. */
  meterRemote(stream) {
    const src = this.ctx.createMediaStreamSource(stream);
    this.outMeter = new LufsMeter(this.ctx, src);
    return (this._nodes.remote = new RemoteLevel(this.ctx, src));
  }

  get outputLevel() {
    return this.mixer ? this.mixer.outputLevel : 1;
  }

  /** Mixer setting: "mic" 0..2 or "output" 0..1; false before the graph exists. */
  setLevel(channel, value) {
    if (!this.mixer) return false;
    this.mixer.set(channel, value);
    return true;
  }

  /** On a call, a paused mic sends silence (the worker drops audio while paused anyway). */
  micEnabled(on) {
    if (this._nodes.micOut) for (const t of this._nodes.micOut.stream.getAudioTracks()) t.enabled = on;
  }

  /** Seconds between what the graph outputs and the speaker. */
  get outputLatencyS() {
    return (this.ctx.baseLatency || 0) + (this.ctx.outputLatency || 0);
  }

  /** Audio clock minus wall clock since start (ms): a drifting sound card shows here. */
  get driftMs() {
    if (!this.ctx || this._clock0 == null || this.ctx.state !== "running") return 0;
    return (this.ctx.currentTime - this._clock0) * 1000 - (performance.now() - this._perf0);
  }

  /** Momentary loudness (LUFS) of the mic as sent and of the assistant as played. */
  get levels() {
    return {
      mic: this.micMeter ? this.micMeter.read() : -Infinity,
      output: this.outMeter ? this.outMeter.read() : -Infinity,
    };
  }

  stop() {
    const { capture, micOut, player, remote } = this._nodes;
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (capture) capture.port.onmessage = null;
    if (player) player.stop();
    if (micOut) micOut.stream.getTracks().forEach((t) => t.stop());
    if (remote) remote.stop();
    for (const c of [this.ctx, this.captureCtx]) if (c && c.state !== "closed") c.close().catch(() => {});
    this.stream = null;
  }
}

/** The reply's level off a call's remote track: its RMS over the last ~10 ms, and the time it
 * carried sound (the gateway sends digital silence between replies, which does not count). */
class RemoteLevel {
  constructor(ctx, source) {
    this.probe = ctx.createAnalyser();
    this.probe.fftSize = 256; // ~10 ms at 24 kHz
    source.connect(this.probe);
    this.windowMs = (this.probe.fftSize / ctx.sampleRate) * 1000; // how far the window lags
    this.heardMs = 0;
    this._buf = new Float32Array(this.probe.fftSize);
    let last = performance.now();
    this._timer = setInterval(() => {
      const now = performance.now();
      if (this.rms() > HEARD_RMS) this.heardMs += Math.min(now - last, 100);
      last = now;
    }, 20);
  }

  rms() {
    this.probe.getFloatTimeDomainData(this._buf);
    let sum = 0;
    for (let i = 0; i < this._buf.length; i++) sum += this._buf[i] * this._buf[i];
    return Math.sqrt(sum / this._buf.length);
  }

  stop() {
    clearInterval(this._timer);
  }
}
