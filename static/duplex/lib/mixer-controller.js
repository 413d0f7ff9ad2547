// Mixer: the mic's send level and the assistant's playback volume, as two GainNodes the session
// routes through, with settings kept per browser. Mic gain changes what the server hears (and
// what the echo guard compares); volume changes only what the user hears.

const KEY = "omniduplex.mixer";

export class Mixer {
  constructor(ctx) {
    const saved = load();
    this.mic = ctx.createGain();
    this.output = ctx.createGain();
    this.mic.gain.value = saved.mic;
    this.output.gain.value = saved.output;
    this.output.connect(ctx.destination);
  }

  get micLevel() { return this.mic.gain.value; }
  get outputLevel() { return this.output.gain.value; }

  set(channel, value) {
    const v = Math.max(0, Math.min(channel === "mic" ? 2 : 1, Number(value)));
    this[channel].gain.value = v;
    saveMixer(channel, v);
  }

  disconnect() {
    this.mic.disconnect();
    this.output.disconnect();
  }
}

/** Slider settings before a session exists (the page shows them while idle). */
export function savedMixer() {
  return load();
}

function load() {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) || "{}");
    return { mic: num(v.mic, 1), output: num(v.output, 1) };
  } catch {
    return { mic: 1, output: 1 };
  }
}

function num(v, d) {
  return typeof v === "number" && Number.isFinite(v) ? v : d;
}

export function saveMixer(channel, value) {
  const saved = load();
  saved[channel] = value;
  try { localStorage.setItem(KEY, JSON.stringify(saved)); } catch { /* private mode: not kept */ }
}
