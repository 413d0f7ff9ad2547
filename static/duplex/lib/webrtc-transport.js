// The WebRTC transport of a duplex session: one call (realtime-call.js) carries the microphone
// (and camera) as tracks, the reply on its remote track, played by an <audio> element (where the
// browser's echo canceller hears it and its jitter buffer smooths it), and the events on its data
// channel. The gateway plays the reply, says when (output_audio_buffer.*), and on a barge-in stops
// it and truncates it to what it played: the page holds, flushes and truncates nothing
// (`pagePlays` false) and only measures where the reply went quiet. Answers the session through `host`.
import { closeReason, endingCode } from "./close-codes.js";
import { CallError, RealtimeCall } from "./realtime-call.js";

// A call's input audio starts with what the microphone said in the last 3 s before session.created
// (the gateway keeps that much while the call waits), then goes on without a gap.
const CALL_PREROLL_MS = 3000;

export class WebRTCTransport {
  static PATH = "/v1/realtime/calls";

  static url(path, query) {
    return `${path}?${query}`;
  }

  /** `host`: {receive(event), progress(null), log(detail), closed(code, reason, extra), lastError()};
   * `audio`: the <audio> element that plays the reply (one is made if null). */
  constructor({ url, host, audio = null }) {
    this.url = url;
    this.host = host;
    this.audio = audio;
    this.pagePlays = false;
    this.call = null;
    this.framesSent = 0; // the microphone rides the call's track: no frames are sent as events
    this.framesGated = 0;
    this._graph = null;
    this._micTrack = null;
    this._remote = null; // the reply's level off the remote track (duplex-audio.js)
    this._playing = false; // output_audio_buffer.started seen, not yet stopped or cleared
    this._inputStartAt = null;
  }

  prepare(graph) {
    this._graph = graph;
    this._micTrack = graph.trackOut();
  }

  /** Offer the mic (and camera) tracks; a refusal ends the session with the code a socket would have. */
  async connect({ videoTrack = null, callSession = null } = {}) {
    if (!this.audio) this.audio = new Audio();
    this.audio.autoplay = true;
    this.audio.volume = this._graph.outputLevel;
    const call = (this.call = new RealtimeCall({
      url: this.url, micTrack: this._micTrack, videoTrack, audio: this.audio, liveSession: callSession,
    }));
    call.addEventListener("event", (e) => this.host.receive(e.detail));
    call.addEventListener("remote", (e) => this._meter(e.detail.stream));
    call.addEventListener("stats", () => this.host.progress(null));
    call.addEventListener("log", (e) => this.host.log(e.detail));
    call.addEventListener("closed", (e) => this._closed(e.detail.code));
    try {
      await call.connect();
    } catch (e) {
      if (!(e instanceof CallError)) throw e;
      const code = e.status === 429 && e.code !== "queue_full" ? 4029
        : { 0: 1006, 401: 1008, 403: 1008, 429: 1013 }[e.status] || 1011;
      this.host.closed(code, e.message, { keyRefused: e.status === 401 });
      return;
    }
    this.host.log({ level: "info", text: `WebRTC call ${call.callId} answered` });
  }

  /** The call ended: by Stop (1000), or by the gateway, whose last error event says why. */
  _closed(code) {
    const ending = code === 1000 ? 1000 : endingCode(this.host.lastError()) || code;
    this.host.closed(ending, closeReason(ending, ""));
  }

  _meter(stream) {
    try {
      this._remote = this._graph.meterRemote(stream);
    } catch (e) {
      this.host.log({ level: "info", text: `reply level not metered here: ${e.message || e}` });
    }
  }

  send(event) {
    return this.call ? this.call.send(event) : false;
  }

  /** Stop: hang up (the call's close ends the session); false when there is no call to end. */
  close() {
    if (!this.call || this.call.ended) return false;
    this.call.hangup();
    return true;
  }

  /** A mic frame: the call's track carries the microphone; a frame here only times a barge-in. */
  sendMic() {
    return true;
  }

  /** session.created arrived: the input timeline began up to CALL_PREROLL_MS before, and no
   * earlier than when the connection came up. */
  inputStarted(now) {
    const flowing = this.call && this.call.connectedAt != null ? now - this.call.connectedAt : 0;
    this._inputStartAt = now - Math.min(CALL_PREROLL_MS, flowing);
  }

  /** When the mic captured input-audio time `ms` (placed from when session.created arrived here,
   * a little late by the trip). */
  capturedAt(ms) {
    return this._inputStartAt != null && ms != null ? this._inputStartAt + ms : null;
  }

  // ---------------------------------------------------------------- the reply, played by the gateway

  /** The time the remote track carried sound (not the idle silence frames). */
  get playedMs() { return this._remote ? this._remote.heardMs : 0; }
  /** The jitter buffer's delay: audio held ahead of the speaker. */
  get bufferedMs() { return this.call ? this.call.stats.bufferedMs : 0; }
  /** The jitter buffer's concealment events (lost audio). */
  get gaps() { return this.call ? this.call.stats.gaps : 0; }
  get latencyS() { return this._graph.outputLatencyS; }
  get replyLevel() { return this._remote; }

  audible() {
    return this._playing;
  }

  /** output_audio_buffer.started (true), .stopped or .cleared (false): the gateway says when it plays. */
  replyPlaying(on) {
    this._playing = on;
  }

  push() {} // the reply's audio rides the track
  end() {}

  /** Quiet at once (Stop in Live): the <audio> element lets go of the track. */
  quiet() {
    if (this.audio) this.audio.srcObject = null;
  }

  setVolume(v) {
    if (this.audio) this.audio.volume = v;
  }

  /** Flip camera: the new track replaces the old one on the call. */
  async replaceVideoTrack(track) {
    if (this.call) await this.call.replaceVideoTrack(track);
  }

  stopAudio() {
    this._playing = false;
  }
}
