// Voice clips: mic -> the duplex capture worklet (PCM16 mono frames at 24 kHz) -> one buffer.
// The mic is opened per clip and released right after, so the browser's "recording"
// indicator is only on while the user is actually recording. The mic is opened (and a refusal
// explained) by shared/microphone.js, as for the duplex pages.
import { MicError, openMic } from "../shared/microphone.js";

const RATE = 24000;
const FRAME_MS = 40;
const CAPTURE_URL = new URL("../duplex/lib/capture-processor.js", import.meta.url);
const loaded = new WeakSet(); // contexts that already have the capture worklet

export const MAX_CLIP_MS = 120_000;

async function addCapture(ctx) {
  if (!loaded.has(ctx)) {
    await ctx.audioWorklet.addModule(CAPTURE_URL);
    loaded.add(ctx);
  }
}

export class VoiceRecorder extends EventTarget {
  constructor() {
    super();
    this.recording = false;
    this.level = 0;
    this._chunks = [];
    this._bytes = 0;
  }

  get ms() {
    return (this._bytes / 2 / RATE) * 1000;
  }

  /** Start a clip on `ctx` (the page's AudioContext); rejects with MicError if no mic. */
  async start(ctx) {
    if (this.recording) return;
    this._chunks = [];
    this._bytes = 0;
    this.stream = await openMic({ button: "Record", meanwhile: "You can still type or attach images." });
    try {
      await this._wire(ctx);
    } catch (e) {
      this._release();
      throw new MicError("other", `Could not start recording: ${e && e.message ? e.message : e}`);
    }
    this.recording = true;
    this.dispatchEvent(new CustomEvent("start"));
  }

  async _wire(ctx) {
    try {
      await addCapture(ctx);
      this._source = ctx.createMediaStreamSource(this.stream);
      this._ctx = ctx;
    } catch {
      // Some browsers cannot feed a mic into a context at another rate: capture at the
      // device's rate in a context of our own; the worklet resamples to 24 kHz.
      this._ownCtx = this._ownCtx || new AudioContext();
      await addCapture(this._ownCtx);
      this._source = this._ownCtx.createMediaStreamSource(this.stream);
      this._ctx = this._ownCtx;
    }
    this.node = new AudioWorkletNode(this._ctx, "capture-processor", {
      numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
      processorOptions: { targetRate: RATE, frameMs: FRAME_MS },
    });
    this.node.port.onmessage = (e) => this._onFrame(e.data);
    this._source.connect(this.node);
  }

  _onFrame({ pcm, rms }) {
    if (!this.recording) return;
    const bytes = new Uint8Array(pcm);
    this._chunks.push(bytes);
    this._bytes += bytes.length;
    this.level = rms;
    this.dispatchEvent(new CustomEvent("progress", { detail: { ms: this.ms, level: rms } }));
    if (this.ms >= MAX_CLIP_MS) this.dispatchEvent(new CustomEvent("limit"));
  }

  /** Stop and return the clip: {pcm: Uint8Array (PCM16 LE, 24 kHz mono), ms}. */
  stop() {
    const ms = this.ms;
    const pcm = new Uint8Array(this._bytes);
    let off = 0;
    for (const c of this._chunks) {
      pcm.set(c, off);
      off += c.length;
    }
    this._release();
    return { pcm, ms };
  }

  /** Throw the clip away. */
  cancel() {
    this._release();
  }

  _release() {
    this.recording = false;
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.disconnect();
    }
    if (this._source) this._source.disconnect();
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    this.node = this._source = this.stream = null;
    this._chunks = [];
    this._bytes = 0;
    this.level = 0;
  }
}
