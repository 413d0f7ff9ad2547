// Loudness meter: momentary loudness (LUFS, ITU-R BS.1770 K-weighting, ~400 ms window) of any
// node, measured with native Web Audio nodes so nothing runs per sample on the main thread.
// K-weighting = a high shelf (+4 dB above ~1.7 kHz, the head's effect) and a high-pass (~38 Hz).

const WINDOW_S = 0.4;

export class LufsMeter {
  constructor(ctx, source) {
    this.ctx = ctx;
    const shelf = ctx.createBiquadFilter();
    shelf.type = "highshelf";
    shelf.frequency.value = 1681;
    shelf.gain.value = 4;
    const hp = ctx.createBiquadFilter();
    hp.type = "highpass";
    hp.frequency.value = 38;
    hp.Q.value = 0.5;
    this.analyser = ctx.createAnalyser();
    // The largest power of two not longer than the 400 ms window.
    const want = ctx.sampleRate * WINDOW_S;
    let size = 32;
    while (size * 2 <= want && size < 32768) size *= 2;
    this.analyser.fftSize = size;
    this.buf = new Float32Array(size);
    source.connect(shelf);
    shelf.connect(hp);
    hp.connect(this.analyser);
    this.nodes = [shelf, hp, this.analyser];
  }

  /** Momentary loudness in LUFS; -Infinity for digital silence. */
  read() {
    this.analyser.getFloatTimeDomainData(this.buf);
    let sum = 0;
    for (let i = 0; i < this.buf.length; i++) sum += this.buf[i] * this.buf[i];
    const ms = sum / this.buf.length;
    return ms > 0 ? -0.691 + 10 * Math.log10(ms) : -Infinity;
  }

  disconnect() {
    for (const n of this.nodes) n.disconnect();
  }
}

/** Text for a meter: "-23 LUFS", or "silent" below -70 (the BS.1770 absolute gate). */
export function formatLufs(value) {
  return value > -70 ? `${value.toFixed(0)} LUFS` : "silent";
}

/** 0..1 bar position for -60..0 LUFS. */
export function lufsFraction(value) {
  if (!(value > -60)) return 0;
  return Math.min(1, (value + 60) / 60);
}
