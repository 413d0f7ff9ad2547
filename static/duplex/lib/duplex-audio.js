// DuplexSession's audio graph: methods of DuplexSession, installed on it by duplex-session.js
// (they share its state). The AudioContext at the wire rate, the capture worklet behind the
// mixer's mic gain, the player worklet (WebSocket) or the call's remote track metered (WebRTC),
// the loudness meters, and all of it stopped and closed at the end.
import { AudioPlayer } from "./audio-player.js";
import { LufsMeter } from "./lufs.js";
import { Mixer } from "./mixer-controller.js";
import { QueueChimes } from "./queue-chimes.js";

export const RATE = 24000; // the wire rate, both directions
export const FRAME_MS = 40;
const HEARD_RMS = 1e-4; // above the decoded silence frames (zeros), below any speech

export class DuplexAudio {
  async _startAudio() {
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
    if (this.transport === "websocket") {
      this.player = new AudioPlayer(this.ctx, { sourceRate: RATE, output: this.mixer.output });
      await this.player.start();
      this.player.addEventListener("progress", (e) => this._onProgress(e.detail));
    }
    let source;
    try {
      source = this.ctx.createMediaStreamSource(this.stream);
    } catch {
      // Some browsers cannot feed a mic into a context at another rate: capture at native rate.
      this.captureCtx = new AudioContext();
      await this.captureCtx.audioWorklet.addModule(new URL("capture-processor.js", base));
      source = this.captureCtx.createMediaStreamSource(this.stream);
    }
    const cctx = this.captureCtx || this.ctx;
    this.capture = new AudioWorkletNode(cctx, "capture-processor", {
      numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
      processorOptions: { targetRate: RATE, frameMs: FRAME_MS },
    });
    this.capture.port.onmessage = (e) => this._onFrame(e.data);
    // mic -> gain (the mixer's mic level) -> capture; the meters read after the gains.
    const micGain = cctx === this.ctx ? this.mixer.mic : cctx.createGain();
    if (micGain !== this.mixer.mic) micGain.gain.value = this.mixer.mic.gain.value;
    source.connect(micGain);
    micGain.connect(this.capture);
    this.micMeter = new LufsMeter(cctx, micGain);
    if (this.transport === "webrtc") {
      // The call sends the mic after the mixer's gain (the browser's echo cancellation, noise
      // suppression and gain control already ran on the captured track); the capture worklet
      // then only feeds the barge-in stopwatch. The reply is metered off the call's remote track.
      this.micOut = cctx.createMediaStreamDestination();
      micGain.connect(this.micOut);
    } else {
      this.outMeter = new LufsMeter(this.ctx, this.mixer.output);
    }
  }

  /** The reply's remote track is here: its level (meter, stop measurement), never its sound
   * (the <audio> element plays it, where the echo canceller hears it). */
  _meterRemote(stream) {
    try {
      const src = this.ctx.createMediaStreamSource(stream);
      this.outMeter = new LufsMeter(this.ctx, src);
      this._outProbe = this.ctx.createAnalyser();
      this._outProbe.fftSize = 256; // ~10 ms at 24 kHz
      src.connect(this._outProbe);
      let last = performance.now();
      this._heardTimer = setInterval(() => {
        const now = performance.now();
        const rms = this._outputRms();
        if (rms != null && rms > HEARD_RMS) this._heardMs += Math.min(now - last, 100);
        last = now;
      }, 20);
    } catch (e) {
      this._emit("log", { level: "info", text: `reply level not metered here: ${e.message || e}` });
    }
  }

  /** RMS of the reply as the remote track has it now (last ~10 ms); null when not metered. */
  _outputRms() {
    const a = this._outProbe;
    if (!a) return null;
    const buf = this._probeBuf || (this._probeBuf = new Float32Array(a.fftSize));
    a.getFloatTimeDomainData(buf);
    let sum = 0;
    for (let i = 0; i < buf.length; i++) sum += buf[i] * buf[i];
    return Math.sqrt(sum / buf.length);
  }

  /** Mixer setting: "mic" 0..2 or "output" 0..1 (on a call, the <audio> element's volume). */
  setLevel(channel, value) {
    if (this.mixer) this.mixer.set(channel, value);
    if (channel === "output" && this.audio && this.mixer) this.audio.volume = this.mixer.outputLevel;
  }

  /** On a call, a paused mic sends silence (the worker drops audio while paused anyway). */
  _micEnabled(on) {
    if (this.micOut) for (const t of this.micOut.stream.getAudioTracks()) t.enabled = on;
  }

  _stopAudio() {
    this.live = false;
    if (this._hold) clearTimeout(this._hold.timer);
    this._hold = null;
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.capture) this.capture.port.onmessage = null;
    if (this.player) this.player.stop();
    if (this.micOut) this.micOut.stream.getTracks().forEach((t) => t.stop());
    this._playing = false;
    if (this._heardTimer) clearInterval(this._heardTimer);
    this._heardTimer = null;
    for (const c of [this.ctx, this.captureCtx]) if (c && c.state !== "closed") c.close().catch(() => {});
    this.stream = null;
  }
}
