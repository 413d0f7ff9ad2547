// The WebSocket transport of a duplex session: every event on one socket, the microphone among
// them as PCM16 frames (input_audio_buffer.append) and the reply's audio as deltas that the page's
// own player worklet plays. So the page guards against the reply's echo itself (echo-guard.js),
// places the server's audio times by the frames it sent, and is the one to hold, flush and
// truncate the reply on a barge-in (`pagePlays`). Its parts answer the session through `host`.
// A socket that drops without a deliberate close is opened again with the session's resume token
// (issue 72, shared/resume.js): the same session goes on; the frames of the time away are not sent.
import { Resume, watchNetwork } from "../../shared/resume.js";
import { b64, onEvents } from "../../shared/wire.js";
import { closeReason } from "./close-codes.js";
import { RATE } from "./duplex-audio.js";
import { EchoGuard } from "./echo-guard.js";

const FRAME_LOG = 150; // recent frames kept to place the server's audio times (6 s)

export class WebSocketTransport {
  static PATH = "/v1/realtime";

  static url(path, query) {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    return `${proto}//${location.host}${path}?${query}`;
  }

  /** `host`: {receive(event), opened(), send(event), progress(stats), log(detail), closed(code, reason),
   * reconnecting()}. */
  constructor({ url, host }) {
    this.url = url;
    this.host = host;
    this.pagePlays = true;
    this.ws = null;
    this.player = null;
    this.echo = new EchoGuard();
    this.framesSent = 0;
    this.framesGated = 0; // sent as silence: probable echo
    this._sentMs = 0;
    this._frameLog = []; // [inputAudioEndMs, capturedAt] of recent frames
    this.resume = new Resume();
    this.reconnects = 0; // sockets that brought the session back after a drop
    this._retry = 0;
    this._stopping = false;
    this._unwatch = watchNetwork({ offline: () => this._lost(), online: () => this._retryNow() });
  }

  async prepare(graph) {
    this.player = await graph.addPlayer();
    this.player.addEventListener("progress", (e) => {
      this.echo.played(e.detail);
      this.host.progress(e.detail);
    });
  }

  connect() {
    this._open(this.url, true);
  }

  _open(url, first) {
    const ws = (this.ws = new WebSocket(url));
    if (first) ws.onopen = () => this.host.opened();
    onEvents(ws, (ev) => this._receive(ev));
    ws.onclose = (e) => {
      if (ws === this.ws) this._dropped(e.code, e.reason);
    };
    ws.onerror = () => this.host.log({ level: "error", text: "WebSocket error" });
  }

  _dropped(code, reason) {
    this.ws = null;
    if (!this._stopping && this.resume.retries(code)) {
      this.host.reconnecting();
      this._retry = setTimeout(() => this._open(this.resume.url(this.url), false), this.resume.nextDelayMs());
      return;
    }
    this._unwatch(); // the session ended: nothing to bring back
    this.host.closed(code, closeReason(code, reason));
  }

  /** The network went: the socket is given up as dropped, closed in the background. */
  _lost() {
    const ws = this.ws;
    if (!ws || this._stopping) return;
    this.ws = null;
    try { ws.close(4000, "network lost"); } catch { /* closing already */ }
    this._dropped(1006, "network lost");
  }

  _retryNow() {
    if (this.ws || this._stopping || !this.resume.retrying) return;
    clearTimeout(this._retry);
    this._open(this.resume.url(this.url), false);
  }

  _receive(ev) {
    if (ev.type === "session.resume_token") this.resume.issued(ev);
    else if (ev.type === "session.created" && this.resume.retrying) {
      this.resume.back();
      this.reconnects++;
      this.host.log({ level: "info", text: "reconnected: the same session goes on" });
    }
    this.host.receive(ev);
  }

  get open() {
    return !!this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  send(event) {
    if (!this.open) return false;
    this.ws.send(JSON.stringify(event));
    return true;
  }

  /** Stop: close the socket (the close event ends the session); false when there is none to close. */
  close() {
    this._stopping = true;
    if (this.resume.retrying && !this.ws) {
      clearTimeout(this._retry); // between attempts: nothing to close; the session ends here
      this.resume.forget();
      this._unwatch();
      this.host.closed(1000, "client stop");
      return true;
    }
    if (!this.ws || this.ws.readyState > WebSocket.OPEN) return false;
    this.ws.close(1000, "client stop");
    return true;
  }

  /** A mic frame: sent (silence in its place if it is probably echo); whether it passed the
   * guard, or null when the socket is not open. */
  sendMic({ pcm, rms }, now) {
    if (!this.open) return null;
    let bytes = new Uint8Array(pcm);
    const passed = this.echo.passes(rms);
    if (!passed) {
      bytes = new Uint8Array(bytes.length); // silence in place of probable echo
      this.framesGated++;
    }
    this.host.send({ type: "input_audio_buffer.append", audio: b64(bytes) });
    this.framesSent++;
    this._sentMs += (bytes.length / 2 / RATE) * 1000;
    this._frameLog.push([this._sentMs, now]);
    if (this._frameLog.length > FRAME_LOG) this._frameLog.shift();
    return passed;
  }

  /** The session started: the input timeline is the frames sent from now on. */
  inputStarted() {}

  /** When the mic captured input-audio time `ms` (the server's audio_start_ms), if we know. */
  capturedAt(ms) {
    for (const [endMs, at] of this._frameLog) {
      if (endMs >= ms) return at - (endMs - ms);
    }
    return null;
  }

  // ---------------------------------------------------------------- the reply, played here

  get playedMs() { return this.player ? this.player.totalPlayedMs : 0; }
  get bufferedMs() { return this.player ? this.player.bufferedMs : 0; }
  get gaps() { return this.player ? this.player.stats.gaps : 0; }
  get latencyS() { return this.player.outputLatencyS; }
  get replyLevel() { return null; } // the player says what it played

  audible() {
    const st = this.player && this.player.stats;
    return !!st && !st.held && (st.playing || st.buffered > 0);
  }

  /** output_audio_buffer.*: a call's; the player here knows what it plays. */
  replyPlaying() {}

  push(item, delta) { this.player.push(item, delta); }
  end(item) { if (this.player) this.player.end(item); }
  hold() { return this.player.hold(); }
  release() { if (this.player) this.player.release(); }

  /** Drop the queued reply: {dropped (samples), playedMs(item): what was heard of it}. */
  async flush() {
    const res = await this.player.flush();
    return { dropped: res.dropped, playedMs: (item) => ((res.played[item] || 0) * 1000) / this.player.ctx.sampleRate };
  }

  /** Quiet at once (Stop in Live): whatever still arrives is not played. */
  quiet() {
    if (this.player) this.player.stop();
  }

  setVolume() {} // the mixer's volume node is the player's output
  async replaceVideoTrack() {} // the page sends the camera as events
  stopAudio() {}
}
