// Queue chimes, synthesised with oscillators (no audio files): one soft note when the user
// reaches the head of the queue, a rising pair when a worker is assigned, and a bright triad
// when the session is ready to listen. They let a user wait with the tab in the background.

const NOTES = {
  waiting: [[660, 0, 0.18]],
  assigned: [[523, 0, 0.12], [784, 0.13, 0.16]],
  ready: [[523, 0, 0.1], [659, 0.09, 0.1], [784, 0.18, 0.18]],
};

export class QueueChimes {
  constructor(ctx, { volume = 0.12, enabled = true } = {}) {
    this.ctx = ctx;
    this.volume = volume;
    this.enabled = enabled;
    this.played = []; // names, for the page's test hooks
  }

  waiting() { this._play("waiting"); }
  assigned() { this._play("assigned"); }
  ready() { this._play("ready"); }

  _play(name) {
    if (!this.enabled || !this.ctx || this.ctx.state === "closed") return;
    this.played.push(name);
    const t0 = this.ctx.currentTime + 0.02;
    for (const [freq, at, dur] of NOTES[name]) {
      const osc = this.ctx.createOscillator();
      const env = this.ctx.createGain();
      osc.type = "sine";
      osc.frequency.value = freq;
      // Short attack and exponential release: no clicks.
      env.gain.setValueAtTime(0.0001, t0 + at);
      env.gain.exponentialRampToValueAtTime(this.volume, t0 + at + 0.015);
      env.gain.exponentialRampToValueAtTime(0.0001, t0 + at + dur);
      osc.connect(env);
      env.connect(this.ctx.destination);
      osc.start(t0 + at);
      osc.stop(t0 + at + dur + 0.02);
    }
  }
}
