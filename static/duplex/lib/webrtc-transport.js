// The WebRTC transport of a duplex session: one call (realtime-call.js) carries the microphone
// (and camera) as tracks, the reply on its remote track, played by an <audio> element (where the
// browser's echo canceller hears it and its jitter buffer smooths it), and the events on its data
// channel. The gateway plays the reply, says when (output_audio_buffer.*), and on a barge-in stops
// it and truncates it to what it played: the page holds, flushes and truncates nothing
// (`pagePlays` false) and only measures where the reply went quiet. Answers the session through `host`.
// A call whose connection fails (ICE `failed`, or `disconnected` for longer than a network change
// takes) is offered again with the session's resume token (issue 72, shared/resume.js): a new call
// to the same URL plus `resume_token=`, the same tracks and <audio> element, after 0.25, 0.5, 1, 2 s...
// while the grace lasts; when its `session.created` arrives the same session goes on and the old
// connection is closed here only (a hangup, or a close the gateway heard, would end the session).
import { Resume, watchNetwork } from "../../shared/resume.js";
import { closeReason, endingCode } from "./close-codes.js";
import { CallError, RealtimeCall } from "./realtime-call.js";

// A call's input audio starts with what the microphone said in the last 3 s before session.created
// (the gateway keeps that much while the call waits), then goes on without a gap.
const CALL_PREROLL_MS = 3000;
// ICE says `disconnected` for a moment when packets stop (a busy network, a Wi-Fi hiccup) and
// comes back by itself; this long without coming back is a network change: the call is offered again.
const DISCONNECTED_MS = 1500;

/** The close code a socket would have had for a refused offer (a token's: 403 refused, 410 expired). */
function refusedCode(e) {
  if (e.status === 429) return e.code === "queue_full" ? 1013 : 4029;
  return { 0: 1006, 401: 1008, 403: 1008, 410: 4010 }[e.status] || 1011;
}

export class WebRTCTransport {
  static PATH = "/v1/realtime/calls";

  static url(path, query) {
    return `${path}?${query}`;
  }

  /** `host`: {receive(event), progress(null), log(detail), closed(code, reason, extra), lastError(),
   * reconnecting()}; `audio`: the <audio> element that plays the reply (one is made if null). */
  constructor({ url, host, audio = null }) {
    this.url = url;
    this.host = host;
    this.audio = audio;
    this.pagePlays = false;
    this.call = null; // the live call; while reconnecting, the new call being tried (null between tries)
    this.framesSent = 0; // the microphone rides the call's track: no frames are sent as events
    this.framesGated = 0;
    this.resume = new Resume();
    this.reconnects = 0; // calls that brought the session back after a connection failed
    this._lostCall = null; // the call whose connection failed, closed here once the session is back
    this._retry = 0;
    this._disconnected = 0;
    this._stopping = false;
    this._ended = false; // the host was told the session closed
    this._unwatch = () => {};
    this._videoTrack = null;
    this._callSession = null;
    this._graph = null;
    this._micTrack = null;
    this._remote = null; // the reply's level off the remote track (duplex-audio.js)
    this._heardBefore = 0; // playedMs of the calls before this one
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
    this._videoTrack = videoTrack;
    this._callSession = callSession;
    this._unwatch = watchNetwork({ offline: () => {}, online: () => this._retryNow() });
    const call = this._newCall(this.url);
    try {
      await call.connect();
    } catch (e) {
      if (!(e instanceof CallError)) throw e;
      this._finish(refusedCode(e), e.message, { keyRefused: e.status === 401 });
      return;
    }
    this._answered(call, "answered");
  }

  /** A call to `url` with the session's tracks and <audio> element, as `this.call`; what it says
   * reaches the host only while it is `this.call`. */
  _newCall(url) {
    const call = (this.call = new RealtimeCall({
      url, micTrack: this._micTrack, videoTrack: this._videoTrack, audio: this.audio, liveSession: this._callSession,
    }));
    const live = (fn) => (e) => { if (call === this.call) fn(e.detail); };
    call.addEventListener("event", live((ev) => this._receive(ev)));
    call.addEventListener("remote", live((d) => this._meter(d.stream)));
    call.addEventListener("stats", live(() => this.host.progress(null)));
    call.addEventListener("state", live((d) => this._watch(call, d.state)));
    call.addEventListener("closed", live((d) => this._closed(call, d.code)));
    call.addEventListener("log", (e) => this.host.log(e.detail));
    return call;
  }

  _answered(call, what) {
    if (this._ended) return; // stopped while the offer was on its way
    this.resume.known(call.resumeToken);
    if (!call.ended) this.host.log({ level: "info", text: `WebRTC call ${call.callId} ${what}` });
  }

  _receive(ev) {
    if (ev.type === "session.resume_token") this.resume.issued(ev);
    else if (ev.type === "session.created" && this.resume.retrying) this._back();
    this.host.receive(ev);
  }

  /** The new call's session.created: the same session goes on; the failed call is let go here. */
  _back() {
    this.resume.back();
    this.reconnects++;
    this._playing = false; // a reply cut by the drop said nothing more
    if (this._lostCall) this._lostCall.abandon();
    this._lostCall = null;
    this.host.log({ level: "info", text: "reconnected: the same session goes on" });
  }

  /** The connection's state: `failed` is lost; `disconnected` is lost when it lasts. */
  _watch(call, state) {
    clearTimeout(this._disconnected);
    if (state === "disconnected") this._disconnected = setTimeout(() => this._lost(call), DISCONNECTED_MS);
    else if (state === "failed") this._lost(call);
  }

  /** The live call's connection is gone as a failed ICE connection leaves it (also the tests' way
   * to fail it: Chromium keeps a loopback call up whatever the network does). */
  lostConnection() {
    if (this.call && !this.resume.retrying) this._lost(this.call);
  }

  /** `call`'s connection is gone: offer again with the token, or end the session. The failed
   * call is kept (not closed: the gateway would hear a deliberate end) until the session is back. */
  _lost(call, code = 1006) {
    if (call !== this.call || this._ended) return;
    clearTimeout(this._disconnected);
    this.call = null;
    if (!this._lostCall) this._lostCall = call;
    else call.abandon(); // a new call that failed in its turn: the first one still waits
    this._again(code, closeReason(code, ""));
  }

  /** Try again after the backoff while the grace lasts; else the session ends with `code`, `reason`. */
  _again(code, reason) {
    if (!this._stopping && this.resume.retries(code)) {
      this.host.reconnecting();
      this._retry = setTimeout(() => this._reoffer(), this.resume.nextDelayMs());
      return;
    }
    this._finish(code, reason);
  }

  async _reoffer() {
    if (this.call || this._stopping || this._ended) return;
    const call = this._newCall(this.resume.url(this.url));
    try {
      await call.connect();
    } catch (e) {
      call.abandon(); // refused (closed already), or the browser could not make the offer
      if (call !== this.call || this._ended) return; // stopped meanwhile
      this.call = null;
      const refused = e instanceof CallError;
      this.host.log({ level: "info", text: `the call could not come back: ${e.message || e}` });
      // 403 or 410 end the session with the refusal; unreachable or 5xx: again, while the grace lasts.
      if (refused) this._again(refusedCode(e), e.message);
      else this._again(1011, `The call could not be offered again: ${e.message || e}`);
      return;
    }
    this._answered(call, "answered: bringing the session back");
  }

  _retryNow() {
    if (this.call || this._stopping || this._ended || !this.resume.retrying) return;
    clearTimeout(this._retry);
    this._reoffer();
  }

  /** The call ended: by Stop (1000), by the gateway, whose last error event says why, or as a
   * connection that failed, which is offered again. */
  _closed(call, code) {
    const ending = code === 1000 || this._stopping ? 1000 : endingCode(this.host.lastError());
    if (ending) this._finish(ending, closeReason(ending, ""));
    else this._lost(call, code);
  }

  /** The session ended here: nothing to bring back any more. */
  _finish(code, reason, extra = {}) {
    if (this._ended) return;
    this._ended = true;
    clearTimeout(this._retry);
    clearTimeout(this._disconnected);
    this._unwatch();
    this.resume.forget();
    if (this._lostCall) this._lostCall.abandon();
    this._lostCall = null;
    this.host.closed(code, reason, extra);
  }

  _meter(stream) {
    if (this._remote) {
      this._heardBefore += this._remote.heardMs; // a call before this one's
      this._remote.stop();
    }
    try {
      this._remote = this._graph.meterRemote(stream);
    } catch (e) {
      this._remote = null;
      this.host.log({ level: "info", text: `reply level not metered here: ${e.message || e}` });
    }
  }

  /** An event on the live call's data channel; false while there is none (reconnecting). */
  send(event) {
    return this.call && !this.resume.retrying ? this.call.send(event) : false;
  }

  /** Stop: hang up (the call's close ends the session); between tries to bring it back, the
   * session ends here; false when there is no call to end. */
  close() {
    this._stopping = true;
    if (this._ended) return false;
    if (this.call && !this.call.ended) {
      this.call.hangup(); // also a new call still being offered: the gateway ends the session
      return true;
    }
    if (!this.resume.retrying) return false;
    this._finish(1000, closeReason(1000, "")); // between tries: nothing to hang up
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
  get playedMs() { return this._heardBefore + (this._remote ? this._remote.heardMs : 0); }
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
    this._videoTrack = track; // also a call that brings the session back sends this one
    if (this.call) await this.call.replaceVideoTrack(track);
  }

  stopAudio() {
    this._playing = false;
  }
}
