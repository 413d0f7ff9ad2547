// A duplex session's barge-in: the user talks over the reply, the reply stops, the server learns
// how much of it was heard, and the page measures how long it kept sounding. Given the reply's
// `output` (the transport: whether the page plays it, whether it is audible, hold, flush, its
// level), the mic's levels and `send`; it emits "bargein" ({stopMs, via}) and "log".
// - Local hold (WebSocket, Realtime): the server's VAD needs ~100 ms of speech plus a round trip
//   before it says speech_started, so the page does not wait for it. When mic frames that passed
//   the echo guard stay loud for ONSET_FRAMES while the reply is audible, playback is *held*
//   (silenced, audio kept); the server's speech_started then flushes it and the page truncates
//   the item to what was played, or after HOLD_MAX_MS without one the hold is released and the
//   reply carries on (a cough, a door). On a call the gateway plays the reply and stops it on the
//   server's speech_started (a local hold would make it count as heard what the user never
//   heard); in Live the server stops sending and the page plays all it got: no hold there.
// - Deltas already in flight for an interrupted item are dropped (`dropsLate`).
// - Each stop is measured: start of the overlap -> the player silent (on a call, the remote track
//   silent), plus the output latency.
import { FRAME_MS } from "./duplex-audio.js";

const ONSET_RMS = 0.03;
const ONSET_FRAMES = 2;
const HOLD_MAX_MS = 700;
// On a call the reply is measured where it is heard: the remote track's level, read in ~10 ms
// windows after a barge-in, until it stays below SILENT_RMS (or STOP_WAIT_MS passes).
const SILENT_RMS = 0.003;
const STOP_WAIT_MS = 1500;

export class BargeIn extends EventTarget {
  /** `localHold`: whether a loud onset holds the page's player (WebSocket and Realtime only). */
  constructor({ output, send, localHold }) {
    super();
    this.output = output;
    this.send = send;
    this.localHold = localHold;
    this.bargeIns = []; // {stopMs, via}: user speech over the reply -> playback silent
    this.truncates = []; // {item_id, audio_end_ms}, for display and tests
    this.userSpeaking = false; // between the server's speech_started and speech_stopped
    this.streaming = false; // a reply is being generated (response.created .. response.done)
    this._item = null; // the assistant item whose audio is playing/streaming
    this._truncated = new Set(); // items truncated (by us, or on a call by the gateway)
    this._interrupted = new Set(); // items cut off while streaming: late deltas are dropped
    this._loudRun = 0;
    this._onsetAt = null; // capture time of the current loud run's first sample
    this._inaudibleAt = 0; // last frame at which nothing was playing
    this._hold = null; // {at, timer} while playback is held on a local onset
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // ---------------------------------------------------------------- the reply it may cut

  replyStarted() {
    this.streaming = true;
    this._item = null; // the previous reply is history now
  }

  replyItem(item) {
    this._item = item;
  }

  replyDone() {
    this.streaming = false;
  }

  /** Whether audio of `item` arrives too late: the user cut it off. */
  dropsLate(item) {
    return this._truncated.has(item) || this._interrupted.has(item);
  }

  /** The server truncated `item` (on a call, the gateway, to what it played); true when that is
   * news here (the page's own truncates are counted when sent). */
  truncatedByServer(item, audioEndMs) {
    if (this.output.pagePlays || this._truncated.has(item)) return false;
    this._truncated.add(item);
    this.truncates.push({ item_id: item, audio_end_ms: audioEndMs });
    return true;
  }

  // ---------------------------------------------------------------- the user's voice

  /** A mic frame's level (RMS) at `now`; `passed`: it was not taken for the reply's echo. */
  micLevel(rms, passed, now) {
    const loud = passed && rms >= ONSET_RMS;
    const audible = this.output.audible();
    if (!audible) this._inaudibleAt = now;
    if (!loud) {
      this._loudRun = 0;
      if (!this.userSpeaking) this._onsetAt = null;
      return;
    }
    // The frame arrived at `now`; its first sample was captured one frame earlier.
    if (this._loudRun++ === 0) this._onsetAt = now - FRAME_MS;
    // Speech that began in a pause of the reply overlaps it only from when the reply resumed.
    if (this.localHold && this._loudRun >= ONSET_FRAMES && audible && !this._hold) {
      this._holdPlayback(this._overlapStart());
    }
  }

  /** The server's speech_started; `serverAt`: when the mic captured its audio_start_ms, if known. */
  speechStarted(serverAt) {
    this.userSpeaking = true;
    const wasAudible = this.output.audible();
    const held = this._hold;
    this._clearHold();
    const onsets = [this._onsetAt, serverAt].filter((t) => t != null);
    const overlapAt = onsets.length ? this._overlapStart(Math.min(...onsets)) : null;
    if (!this.output.pagePlays) {
      // The gateway stops the reply now (output_audio_buffer.cleared) and truncates it to what
      // it played; what is measured here is when the reply went quiet at this end.
      if (wasAudible) this._whenReplySilent().then((at) => { if (at != null) this._recordStop(overlapAt, "server", at); });
      return;
    }
    this._cut().then(() => {
      // Already measured when held locally; otherwise the server's VAD stopped it.
      if (wasAudible && !held) this._recordStop(overlapAt, "server");
    });
  }

  speechStopped() {
    this.userSpeaking = false;
  }

  /** response.done with status cancelled: whatever is left of the reply goes. */
  cancelled() {
    this._clearHold();
    this._cut();
  }

  /** The session ended: no hold outlives it. */
  stop() {
    this._clearHold();
  }

  // ---------------------------------------------------------------- inside

  /** When the user's current speech and the assistant's audio started to overlap. */
  _overlapStart(onset = this._onsetAt) {
    return onset == null ? null : Math.max(onset, this._inaudibleAt);
  }

  async _holdPlayback(overlapAt) {
    this._hold = { at: performance.now(), timer: setTimeout(() => this._releaseHold(), HOLD_MAX_MS) };
    await this.output.hold();
    this._recordStop(overlapAt, "local");
  }

  _releaseHold() {
    if (!this._hold) return;
    this._clearHold();
    this.output.release();
    this._emit("log", { level: "info", text: "no speech after all: reply resumed" });
  }

  _clearHold() {
    if (this._hold) clearTimeout(this._hold.timer);
    this._hold = null;
  }

  /** One barge-in's stop latency: start of the overlap -> silent at `silentAt`, plus the output latency. */
  _recordStop(onsetAt, via, silentAt = performance.now()) {
    if (onsetAt == null) return;
    const stopMs = silentAt - onsetAt + this.output.latencyS * 1000;
    this.bargeIns.push({ stopMs: Math.round(stopMs), via });
    this._emit("bargein", { stopMs, via });
  }

  /** On a call: when the reply's track went quiet after a barge-in (null: it never did, or is not metered). */
  async _whenReplySilent() {
    const level = this.output.replyLevel;
    if (!level) return null;
    const t0 = performance.now();
    let quiet = 0;
    while (performance.now() - t0 < STOP_WAIT_MS) {
      if (level.rms() < SILENT_RMS) {
        // Two quiet windows in a row; the analyser's window lags by about its length.
        if (++quiet >= 2) return performance.now() - level.windowMs;
      } else {
        quiet = 0;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    return null;
  }

  /** Stop the page's playback now and tell the server how much of the reply was heard. */
  async _cut() {
    const item = this._item;
    if (!this.output.pagePlays) return; // on a call the gateway stops the reply and truncates it
    if (item && this.streaming) this._interrupted.add(item);
    const res = await this.output.flush();
    if (!item || this._truncated.has(item)) return;
    // Nothing dropped and the item was fully played: the history is already right.
    if (res.dropped === 0 && !this.streaming) return;
    this._truncated.add(item);
    const playedMs = Math.floor(res.playedMs(item));
    this.send({ type: "conversation.item.truncate", item_id: item, content_index: 0, audio_end_ms: playedMs });
    this.truncates.push({ item_id: item, audio_end_ms: playedMs });
    this._emit("log", { level: "info", text: `interrupted: truncated ${item} at ${playedMs} ms` });
  }
}
