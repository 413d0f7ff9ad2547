// The chat's spoken replies: an AudioContext and the AudioWorklet player (made on the first user
// gesture, as autoplay asks), the audio deltas of each reply item, and what the user silenced
// (a stopped reply's late deltas stay unplayed). Says when it starts or stops being audible
// through `onAudible(on)` and passes the player's progress on through `onProgress(stats)`.
import { AudioPlayer } from "../duplex/lib/audio-player.js";

export class ChatReplyAudio {
  constructor({ rate, onAudible, onProgress }) {
    this.rate = rate;
    this.onAudible = onAudible;
    this.onProgress = onProgress;
    this.ctx = null;
    this.player = null;
    this.audible = false;
    this._muted = new Set(); // assistant items whose audio the user stopped
    this._ready = null;
  }

  get playedMs() { return this.player ? this.player.totalPlayedMs : 0; }

  /** Create the AudioContext and player. Call from a click/keypress so autoplay is allowed. */
  async ensure() {
    if (!this._ready) {
      this._ready = (async () => {
        try {
          this.ctx = new AudioContext({ sampleRate: this.rate, latencyHint: "interactive" });
        } catch {
          this.ctx = new AudioContext({ latencyHint: "interactive" }); // the player resamples
        }
        this.player = new AudioPlayer(this.ctx, { sourceRate: this.rate });
        await this.player.start();
        this.player.addEventListener("progress", (e) => this._progress(e.detail));
        return this.ctx;
      })();
    }
    const ctx = await this._ready;
    if (ctx.state === "suspended") await ctx.resume().catch(() => {});
    return ctx;
  }

  /** A reply's audio delta (base64 PCM16), unless that item was silenced. */
  push(itemId, delta) {
    if (this.player && !this._muted.has(itemId)) this.player.push(itemId, delta);
  }

  /** The item's audio is complete: play out what is buffered. */
  end(itemId) {
    if (this.player && itemId) this.player.end(itemId);
  }

  /** The item's audio, from now on, stays unplayed (its reply was stopped). */
  mute(itemId) {
    if (itemId) this._muted.add(itemId);
  }

  /** Quiet at once: every item so far is silenced and what is buffered is dropped. */
  async silence(itemIds) {
    if (!this.player) return;
    for (const id of itemIds) this._muted.add(id);
    await this.player.flush();
    this._setAudible(false);
  }

  /** The connection dropped: nothing plays until a reply comes again. */
  stopped() {
    this.audible = false;
  }

  close() {
    if (this.player) this.player.stop();
    if (this.ctx && this.ctx.state !== "closed") this.ctx.close().catch(() => {});
  }

  _progress(stats) {
    this._setAudible(Boolean(stats.playing || stats.buffered > 0));
    this.onProgress(stats);
  }

  _setAudible(on) {
    if (on === this.audible) return;
    this.audible = on;
    this.onAudible(on);
  }
}
