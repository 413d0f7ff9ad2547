// AudioWorklet capture: mic samples -> PCM16 frames of `frameMs` at `targetRate` (24 kHz).
// Resamples linearly when the AudioContext does not run at the target rate (Firefox, or a
// browser that refused a 24 kHz context), so the wire format never depends on the device.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.targetRate = o.targetRate || 24000;
    this.frameSamples = Math.round((this.targetRate * (o.frameMs || 40)) / 1000);
    this.step = sampleRate / this.targetRate; // input samples per output sample
    this.pos = 0; // fractional read position into `carry`
    this.carry = new Float32Array(0);
    this.frame = new Int16Array(this.frameSamples);
    this.fill = 0;
    this.sumSq = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0 || !input[0]) return true;
    const ch = input[0];
    // Append the new block to what is left of the previous one (at most a sample or two).
    const buf = new Float32Array(this.carry.length + ch.length);
    buf.set(this.carry);
    buf.set(ch, this.carry.length);
    let pos = this.pos;
    while (pos + 1 < buf.length) {
      const i = Math.floor(pos);
      const f = pos - i;
      const s = buf[i] + (buf[i + 1] - buf[i]) * f;
      this.sumSq += s * s;
      this.frame[this.fill++] = Math.max(-32768, Math.min(32767, Math.round(s * 32767)));
      if (this.fill === this.frameSamples) {
        const rms = Math.sqrt(this.sumSq / this.frameSamples);
        const out = this.frame;
        this.port.postMessage({ pcm: out.buffer, rms }, [out.buffer]);
        this.frame = new Int16Array(this.frameSamples);
        this.fill = 0;
        this.sumSq = 0;
      }
      pos += this.step;
    }
    const keep = Math.floor(pos);
    this.carry = buf.slice(keep);
    this.pos = pos - keep;
    return true;
  }
}

registerProcessor("capture-processor", CaptureProcessor);
