// Streaming PCM player: an AudioWorklet processor with a jitter buffer plus its main-thread
// wrapper. The same file is loaded twice: by `audioWorklet.addModule` (where
// AudioWorkletProcessor exists, so the processor registers) and as an ES module by the page
// (which uses the exported `AudioPlayer`).
//
// The worklet is the only place that knows what was really *played* (not just received), so
// it reports played samples per item back to the page; that is what `conversation.item.truncate`
// must carry for the history to hold only what the user heard.

const PROCESSOR = "player-processor";

if (typeof AudioWorkletProcessor !== "undefined") {
  class PlayerProcessor extends AudioWorkletProcessor {
    constructor(options) {
      super();
      const o = (options && options.processorOptions) || {};
      // Prebuffer before starting (and after an underrun) to ride out network jitter.
      this.prebuffer = Math.round((sampleRate * (o.prebufferMs || 120)) / 1000);
      this.queue = []; // {item, data: Float32Array, off}
      this.buffered = 0;
      this.playing = false;
      this.ended = new Set(); // items whose last chunk has arrived: play out without prebuffer
      this.held = false; // paused on a probable barge-in; the audio stays queued
      this.played = {}; // item -> samples played
      this.totalPlayed = 0;
      this.gaps = 0;
      this.levelSq = 0;
      this.levelN = 0;
      this.lastReport = 0;
      this.port.onmessage = (e) => this.onMessage(e.data);
    }

    onMessage(m) {
      if (m.type === "push") {
        this.queue.push({ item: m.item, data: m.data, off: 0 });
        this.buffered += m.data.length;
        this.ended.delete(m.item);
      } else if (m.type === "end") {
        this.ended.add(m.item);
      } else if (m.type === "flush") {
        // Barge-in: drop everything at once and say exactly how much of each item was heard.
        const dropped = this.buffered;
        this.queue = [];
        this.buffered = 0;
        this.playing = false;
        this.held = false;
        this.port.postMessage({ type: "flushed", id: m.id, dropped, played: { ...this.played } });
        this.report(true);
      } else if (m.type === "hold") {
        // Probable barge-in heard locally: silence from the next render quantum, keep the queue
        // in case the server says it was not speech after all.
        this.held = true;
        this.port.postMessage({ type: "held", id: m.id, played: { ...this.played } });
      } else if (m.type === "release") {
        this.held = false;
      }
    }

    report(force) {
      if (!force && currentTime - this.lastReport < 0.05) return;
      this.lastReport = currentTime;
      const level = this.levelN ? Math.sqrt(this.levelSq / this.levelN) : 0;
      this.levelSq = 0;
      this.levelN = 0;
      this.port.postMessage({
        type: "progress", played: { ...this.played }, totalPlayed: this.totalPlayed,
        buffered: this.buffered, gaps: this.gaps, level, playing: this.playing && !this.held, held: this.held,
      });
    }

    process(_inputs, outputs) {
      const out = outputs[0][0];
      out.fill(0);
      if (!this.playing && this.queue.length) {
        const tail = this.queue[this.queue.length - 1].item;
        if (this.buffered >= this.prebuffer || this.ended.has(tail)) this.playing = true;
      }
      let n = 0;
      if (this.playing && !this.held) {
        while (n < out.length && this.queue.length) {
          const c = this.queue[0];
          const take = Math.min(out.length - n, c.data.length - c.off);
          out.set(c.data.subarray(c.off, c.off + take), n);
          for (let i = n; i < n + take; i++) this.levelSq += out[i] * out[i];
          c.off += take;
          n += take;
          this.played[c.item] = (this.played[c.item] || 0) + take;
          if (c.off >= c.data.length) this.queue.shift();
        }
        this.buffered -= n;
        this.totalPlayed += n;
        if (!this.queue.length) {
          // Ran dry: a gap if the item was still streaming, the natural end otherwise.
          const last = Object.keys(this.played).pop();
          if (n < out.length && last !== undefined && !this.ended.has(last)) this.gaps++;
          this.playing = false;
        }
      }
      this.levelN += out.length;
      for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
      this.report(false);
      return true;
    }
  }
  registerProcessor(PROCESSOR, PlayerProcessor);
}

/** Main-thread side: feed base64 PCM16 24 kHz, read played ms per item, flush on barge-in. */
export class AudioPlayer extends EventTarget {
  constructor(ctx, { sourceRate = 24000, prebufferMs = 120, output = null } = {}) {
    super();
    this.ctx = ctx;
    this.output = output || ctx.destination; // e.g. the mixer's volume node
    this.sourceRate = sourceRate;
    this.prebufferMs = prebufferMs;
    this.node = null;
    this.stats = { played: {}, totalPlayed: 0, buffered: 0, gaps: 0, level: 0, playing: false };
    this._flushes = new Map();
    this._flushId = 0;
  }

  async start() {
    await this.ctx.audioWorklet.addModule(new URL(import.meta.url));
    this.node = new AudioWorkletNode(this.ctx, PROCESSOR, {
      numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
      processorOptions: { prebufferMs: this.prebufferMs },
    });
    this.node.port.onmessage = (e) => this._onMessage(e.data);
    this.node.connect(this.output);
  }

  _onMessage(m) {
    if (m.type === "progress") {
      Object.assign(this.stats, m);
      this.dispatchEvent(new CustomEvent("progress", { detail: this.stats }));
    } else if (m.type === "flushed" || m.type === "held") {
      Object.assign(this.stats.played, m.played);
      const resolve = this._flushes.get(m.id);
      this._flushes.delete(m.id);
      if (resolve) resolve(m);
    }
  }

  /** Queue one base64 PCM16 chunk of `item`; resampled here if the context is not 24 kHz. */
  push(item, b64) {
    if (!this.node) return;
    const bin = atob(b64);
    const n = bin.length >> 1;
    let data = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      let v = bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8);
      if (v >= 0x8000) v -= 0x10000;
      data[i] = v / 32768;
    }
    if (this.ctx.sampleRate !== this.sourceRate) data = resample(data, this.sourceRate, this.ctx.sampleRate);
    this.node.port.postMessage({ type: "push", item, data }, [data.buffer]);
  }

  /** The item's audio is complete: play out the tail even if below the prebuffer. */
  end(item) {
    if (this.node) this.node.port.postMessage({ type: "end", item });
  }

  /** Drop all queued audio; resolves with {dropped, played} (samples, context rate). */
  flush() {
    return this._ask("flush");
  }

  /** Go silent but keep the queue (a barge-in not yet confirmed); resolves when silent. */
  hold() {
    return this._ask("hold");
  }

  /** Carry on after a hold that turned out to be no barge-in. */
  release() {
    if (this.node) this.node.port.postMessage({ type: "release" });
  }

  _ask(type) {
    if (!this.node) return Promise.resolve({ dropped: 0, played: {} });
    const id = ++this._flushId;
    return new Promise((resolve) => {
      this._flushes.set(id, resolve);
      this.node.port.postMessage({ type, id });
    });
  }

  /** Seconds between the worklet's output and the speaker (what a stop still lets through). */
  get outputLatencyS() {
    return (this.ctx.baseLatency || 0) + (this.ctx.outputLatency || 0);
  }

  playedMs(item) {
    return ((this.stats.played[item] || 0) * 1000) / this.ctx.sampleRate;
  }

  get totalPlayedMs() {
    return (this.stats.totalPlayed * 1000) / this.ctx.sampleRate;
  }

  get bufferedMs() {
    return (this.stats.buffered * 1000) / this.ctx.sampleRate;
  }

  stop() {
    if (this.node) this.node.disconnect();
    this.node = null;
  }
}

function resample(data, from, to) {
  const n = Math.floor((data.length * to) / from);
  const out = new Float32Array(n);
  const step = from / to;
  for (let i = 0; i < n; i++) {
    const p = i * step;
    const j = Math.floor(p);
    const f = p - j;
    const a = data[j];
    const b = j + 1 < data.length ? data[j + 1] : a;
    out[i] = a + (b - a) * f;
  }
  return out;
}
