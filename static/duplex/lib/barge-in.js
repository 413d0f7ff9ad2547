// DuplexSession's echo guard and barge-in: methods of DuplexSession, installed on it by
// duplex-session.js (they share its state). Mic frames are gated against the reply's echo and
// sent (WebSocket); a loud run over the audible reply holds playback before the server's VAD
// says speech_started; the server's word flushes the player and truncates what was not heard;
// each barge-in's stop latency is measured (on a call, where the reply's track goes quiet).
import { b64 } from "../../shared/wire.js";
import { FRAME_MS, RATE } from "./duplex-audio.js";

// Echo guard (simple ducking gate). Even with the browser's echo cancellation, the assistant's
// own voice coming out of the speakers can reach the mic loud enough for server VAD to call it
// a barge-in, and the assistant would interrupt itself. So while the assistant is audibly
// playing, a mic frame is sent only if it is clearly louder than what we are playing
// (ECHO_RATIO times the playback level, and at least ECHO_FLOOR); quieter frames are replaced
// by silence (not dropped, so the server's audio timeline stays continuous). A user who
// really talks over the assistant is louder at the mic than the echo and still gets through.
const ECHO_RATIO = 0.6;
const ECHO_FLOOR = 0.015;
const ECHO_HANGOVER_MS = 250; // room reverb outlives the last played sample a little

// Local barge-in: the server's VAD needs ~100 ms of speech plus a round trip before it says
// speech_started, so the page does not wait for it. When mic frames that passed the echo guard
// stay loud for ONSET_FRAMES while the assistant is audible, playback is *held* (silenced, audio
// kept); the server's speech_started then flushes it, or after HOLD_MAX_MS without one the hold
// is released and the reply carries on (a cough, a door).
const ONSET_RMS = 0.03;
const ONSET_FRAMES = 2;
const HOLD_MAX_MS = 700;
// On a call the reply is measured where it is heard: the remote track's level, read in ~10 ms
// windows after a barge-in, until it stays below SILENT_RMS (or STOP_WAIT_MS passes).
const SILENT_RMS = 0.003;
const STOP_WAIT_MS = 1500;

export class BargeIn {
  _onProgress(stats) {
    if (stats.level > 0.002) {
      this._lastLoudPlayback = performance.now();
      this._playLevel = stats.level;
    }
    const audible = stats.playing || stats.buffered > 0;
    if (this.state === "speaking" && !audible && !this._streaming) this._set("listening");
    else if (audible && (this.state === "listening" || this.state === "thinking")) this._set("speaking");
    this._emit("progress", stats);
  }

  _echoGate(rms) {
    const recent = performance.now() - this._lastLoudPlayback < ECHO_HANGOVER_MS;
    if (!recent) return true;
    return rms >= Math.max(ECHO_FLOOR, this._playLevel * ECHO_RATIO);
  }

  _onFrame({ pcm, rms }) {
    if (this.transport === "webrtc") {
      // The call's track carries the microphone: a frame here only times a barge-in.
      if (!this.live || this.paused) return;
      this.micLevel = rms;
      this._localOnset(rms >= ONSET_RMS, performance.now());
      return;
    }
    // Nothing is sent while queued: nobody listens yet, and the gateway keeps only a few events.
    if (!this.live || !this.ws || this.ws.readyState !== WebSocket.OPEN || this.paused) return;
    const now = performance.now();
    let bytes = new Uint8Array(pcm);
    const passed = this._echoGate(rms);
    if (!passed) {
      bytes = new Uint8Array(bytes.length); // silence in place of probable echo
      this.framesGated++;
    }
    this._send({ type: "input_audio_buffer.append", audio: b64(bytes) });
    this.framesSent++;
    this._sentMs += (bytes.length / 2 / RATE) * 1000;
    this._frameLog.push([this._sentMs, now]);
    if (this._frameLog.length > 150) this._frameLog.shift();
    this.micLevel = rms;
    this._localOnset(passed && rms >= ONSET_RMS, now);
  }

  _audible() {
    if (this.transport === "webrtc") return this._playing;
    const st = this.player && this.player.stats;
    return !!st && !st.held && (st.playing || st.buffered > 0);
  }

  _localOnset(loud, now) {
    const audible = this._audible();
    if (!audible) this._inaudibleAt = now;
    if (!loud) {
      this._loudRun = 0;
      if (!this._userSpeaking) this._onsetAt = null;
      return;
    }
    // The frame arrived at `now`; its first sample was captured one frame earlier.
    if (this._loudRun++ === 0) this._onsetAt = now - FRAME_MS;
    // Speech that began in a pause of the reply overlaps it only from when the reply resumed.
    // On a call the gateway plays the reply and stops it on the server's speech_started (a local
    // hold would make it count as heard what the user never heard), so nothing is held here; nor
    // in Live, where the server stops sending and the page plays all it got.
    if (this.transport === "websocket" && this.dialect !== "live" && this._loudRun >= ONSET_FRAMES && audible && !this._hold) {
      this._holdPlayback(this._overlapStart());
    }
  }

  /** When the user's current speech and the assistant's audio started to overlap. */
  _overlapStart(onset = this._onsetAt) {
    return onset == null ? null : Math.max(onset, this._inaudibleAt);
  }

  async _holdPlayback(overlapAt) {
    this._hold = { at: performance.now(), timer: setTimeout(() => this._releaseHold(), HOLD_MAX_MS) };
    await this.player.hold();
    this._recordStop(overlapAt, "local");
  }

  _releaseHold() {
    if (!this._hold) return;
    clearTimeout(this._hold.timer);
    this._hold = null;
    if (this.player) this.player.release();
    this._emit("log", { level: "info", text: "no speech after all: reply resumed" });
  }

  /** One barge-in's stop latency: start of the overlap -> worklet silent (or, on a call, the
   * remote track silent at `silentAt`), plus the output latency. */
  _recordStop(onsetAt, via, silentAt = performance.now()) {
    if (onsetAt == null) return;
    const latencyS = this.player ? this.player.outputLatencyS : (this.ctx.baseLatency || 0) + (this.ctx.outputLatency || 0);
    const stopMs = silentAt - onsetAt + latencyS * 1000;
    this.bargeIns.push({ stopMs: Math.round(stopMs), via });
    this._emit("bargein", { stopMs, via });
  }

  /** When the mic captured input-audio time `ms` (the server's audio_start_ms), if we know. */
  _capturedAt(ms) {
    // On a call the input timeline starts with the microphone's audio kept from before
    // session.created (at most CALL_PREROLL_MS, and only since the connection came up), then runs
    // on without a gap; placed from when that event arrived here (a little late by the trip).
    if (this.transport === "webrtc") return this._inputStartAt != null && ms != null ? this._inputStartAt + ms : null;
    for (const [endMs, at] of this._frameLog) {
      if (endMs >= ms) return at - (endMs - ms);
    }
    return null;
  }

  /** On a call: when the reply's track went quiet after a barge-in (null: it never did, or is not metered). */
  async _whenReplySilent() {
    if (!this._outProbe) return null;
    const t0 = performance.now();
    let quiet = 0;
    while (performance.now() - t0 < STOP_WAIT_MS) {
      const rms = this._outputRms();
      if (rms != null && rms < SILENT_RMS) {
        // Two quiet windows in a row; the analyser's window lags by about its length.
        if (++quiet >= 2) return performance.now() - (this._outProbe.fftSize / this.ctx.sampleRate) * 1000;
      } else {
        quiet = 0;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    return null;
  }

  /** Stop playback now and tell the server how much of the reply was heard. */
  async _bargeIn() {
    const item = this._currentItem;
    if (!this.player) return; // on a call the gateway stops the reply and truncates it
    if (item && this._streaming) this._interrupted.add(item);
    const res = await this.player.flush();
    if (!item || this._truncated.has(item)) return;
    // Nothing dropped and the item was fully played: the history is already right.
    if (res.dropped === 0 && !this._streaming) return;
    this._truncated.add(item);
    const playedMs = Math.floor(((res.played[item] || 0) * 1000) / this.ctx.sampleRate);
    this._send({ type: "conversation.item.truncate", item_id: item, content_index: 0, audio_end_ms: playedMs });
    this.truncates.push({ item_id: item, audio_end_ms: playedMs });
    this._emit("log", { level: "info", text: `interrupted: truncated ${item} at ${playedMs} ms` });
  }
}
