// One WebRTC call to the gateway, as OpenAI's Realtime API has it (docs/protocol.md, "WebRTC
// calls"): the microphone (and, on the omni page, the camera) as tracks, the reply's audio on the
// remote track (played by an <audio> element, so the browser's echo canceller hears it), and the
// same JSON events as the WebSocket on a data channel named "oai-events". The offer is POSTed to
// /v1/realtime/calls; the answer says where the call lives (Location), which is where Stop hangs up.
// A Live call (`liveSession`: its session config) posts JSON to /v1/live/sessions instead,
// {session, transport: {type: "webrtc", sdp}}, answered {session: {id}, transport: {sdp}}.
// An answer may carry the session's resume token (`X-Resume-Token`, issue 72): a new call to the
// same URL plus `resume_token=` brings the session back when this one's connection fails; this
// call only keeps it (`resumeToken`) and says how its connection goes ("state" events).
//
// Keys: with API keys configured, this browser's stored key (the one the WebSocket sends as a
// subprotocol, shared/app-gate.js) goes in `Authorization: Bearer`, as Save & share sends it; on
// an open service nothing is sent. UI-free: events out, plain fields for the page and the tests.

const KEY_STORE = "omniduplex.apiKey";
const GATHER_MAX_MS = 1000; // host candidates take milliseconds; never hold the offer longer
const STATS_MS = 500;
// Stop waits this long for the hangup's answer before it closes the connection itself. The gateway
// answers once the call has ended (it closes the connection then): closing first raced the
// request, which then found no call (404) while the call had ended anyway.
const HANGUP_WAIT_MS = 3000;
// The camera is sampled by the gateway at most limits.max_frame_rate a second (2 by default):
// frames beyond that would be encoded here and decoded there only to be dropped.
const CAMERA_FPS = 2;

export class CallError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** This browser's stored API key ("" when none: an open service needs none). */
export function storedKey() {
  try { return localStorage.getItem(KEY_STORE) || ""; } catch { return ""; }
}

/** A sentence for a refused offer (the gateway answers in OpenAI's error shape). */
function refusal(status, error) {
  const code = (error && error.code) || "";
  const message = (error && error.message) || `HTTP ${status}`;
  if (status === 401) {
    return "This service needs a valid API key for conversations, and this browser has none or a wrong one. Enter yours in the box above (kept only in this browser) and press Start again.";
  }
  if (code === "invalid_resume_token" || code === "resume_token_expired") {
    return `The connection was lost and the session could not be brought back (${message}). Press Start for a new one.`;
  }
  if (code === "queue_full") return "The server is busy (queue full). Try again in a moment.";
  if (code === "app_disabled") return "This app is disabled by the operator. Please try again later.";
  if (status === 429) return `Too many sessions just now: ${message}`;
  if (status === 400 && code === "invalid_offer") return `The server could not take this browser's call: ${message}`;
  return `The call could not be started: ${message}`;
}

export class RealtimeCall extends EventTarget {
  /**
   * `url`: the calls URL with its query (model, app, record, extensions); `micTrack`: what is sent
   * as the microphone; `videoTrack`: the camera, or null; `audio`: the <audio> element that plays
   * the reply; `liveSession`: a Live call's session (the offer goes as JSON, see above).
   */
  constructor({ url, micTrack, videoTrack = null, audio, liveSession = null }) {
    super();
    this.url = url;
    this.liveSession = liveSession;
    this.micTrack = micTrack;
    this.videoTrack = videoTrack;
    this.audio = audio;
    this.key = storedKey();
    this.pc = null;
    this.dc = null;
    this.callId = null;
    this.location = null;
    this.resumeToken = null; // the answer's X-Resume-Token, when the URL asked for extensions=resume
    this.remoteStream = null;
    this.videoSender = null;
    this.ended = false;
    this.connectedAt = null; // performance.now() when the connection came up: the mic's audio flows
    this.stats = { bufferedMs: 0, gaps: 0, videoFramesSent: 0, packetsLost: 0, jitterMs: 0 };
    this._statsTimer = null;
  }

  _emit(type, detail = {}) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  get open() {
    return !!this.dc && this.dc.readyState === "open";
  }

  /** Offer, POST, answer. Throws CallError when the gateway refuses (nothing is left open). */
  async connect() {
    const pc = (this.pc = new RTCPeerConnection());
    const local = new MediaStream([this.micTrack]);
    // The reply comes back on the microphone's transceiver (sendrecv), as OpenAI's calls do.
    pc.addTransceiver(this.micTrack, { direction: "sendrecv", streams: [local] });
    if (this.videoTrack) {
      const t = pc.addTransceiver(this.videoTrack, {
        direction: "sendonly", streams: [local], sendEncodings: [{ maxFramerate: CAMERA_FPS }],
      });
      this.videoSender = t.sender;
    }
    pc.ontrack = (e) => {
      if (e.track.kind !== "audio") return;
      this.remoteStream = e.streams && e.streams[0] ? e.streams[0] : new MediaStream([e.track]);
      this.audio.srcObject = this.remoteStream;
      this.audio.play().catch((err) => this._emit("log", { level: "error", text: `reply audio blocked: ${err.message || err}` }));
      this._emit("remote", { stream: this.remoteStream });
    };
    pc.onconnectionstatechange = () => {
      const s = pc.connectionState;
      if (s === "connected" && this.connectedAt == null) this.connectedAt = performance.now();
      this._emit("log", { level: "info", text: `WebRTC connection ${s}` });
      this._emit("state", { state: s });
      if (s === "failed" || s === "closed") this._end(1006, "");
    };
    const dc = (this.dc = pc.createDataChannel("oai-events"));
    dc.onopen = () => this._emit("open");
    dc.onmessage = (e) => {
      let ev;
      try {
        ev = JSON.parse(e.data);
      } catch {
        return; // not JSON: skipped, never fatal (as on the WebSocket)
      }
      this._emit("event", ev);
    };
    dc.onclose = () => this._end(1006, "");

    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc, GATHER_MAX_MS);
    if (this.ended) return; // stopped before the offer left
    const live = this.liveSession;
    const headers = { "Content-Type": live ? "application/json" : "application/sdp",
      ...(this.key ? { Authorization: `Bearer ${this.key}` } : {}) };
    const body = live ? JSON.stringify({ session: live, transport: { type: "webrtc", sdp: pc.localDescription.sdp } })
      : pc.localDescription.sdp;
    let r;
    try {
      r = await fetch(this.url, { method: "POST", headers, body });
    } catch {
      this._fail();
      throw new CallError(0, "unreachable", "The server could not be reached. Check the connection and press Start again.");
    }
    if (r.status !== (live ? 200 : 201)) {
      let error = null;
      try { error = (await r.json()).error; } catch { /* not JSON */ }
      this._fail();
      throw new CallError(r.status, (error && error.code) || `http_${r.status}`, refusal(r.status, error));
    }
    let answer;
    if (live) {
      const created = await r.json();
      this.callId = created.session.id;
      this.location = `${new URL(this.url, location.href).pathname}/${this.callId}`;
      answer = created.transport.sdp;
    } else {
      this.location = r.headers.get("Location");
      this.callId = this.location ? this.location.split("/").pop() : null;
      this.resumeToken = r.headers.get("X-Resume-Token");
      answer = await r.text();
    }
    if (this.ended) {
      // Stopped while the offer was on its way: the call exists at the gateway now; end it.
      if (this.location) this._hangupRequest();
      return;
    }
    await pc.setRemoteDescription({ type: "answer", sdp: answer });
    this._statsTimer = setInterval(() => this._readStats(), STATS_MS);
  }

  /** Send one client event on the data channel; false when it is not open. */
  send(event) {
    if (!this.open) return false;
    this.dc.send(JSON.stringify(event));
    return true;
  }

  /** The camera changed (Flip camera): the new track replaces the old one on the same sender. */
  async replaceVideoTrack(track) {
    this.videoTrack = track;
    if (this.videoSender) await this.videoSender.replaceTrack(track);
  }

  async _readStats() {
    if (!this.pc || this.ended) return;
    let report;
    try {
      report = await this.pc.getStats();
    } catch {
      return;
    }
    const prev = this._prevStats || {};
    const next = {};
    report.forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "audio") {
        next.delay = s.jitterBufferDelay || 0;
        next.emitted = s.jitterBufferEmittedCount || 0;
        this.stats.gaps = s.concealmentEvents || 0;
        this.stats.packetsLost = s.packetsLost || 0;
        this.stats.jitterMs = (s.jitter || 0) * 1000;
      } else if (s.type === "outbound-rtp" && s.kind === "video") {
        this.stats.videoFramesSent = s.framesSent || 0;
      }
    });
    // The jitter buffer's delay over the last interval: the audio held ahead of the speaker.
    const emitted = (next.emitted || 0) - (prev.emitted || 0);
    if (emitted > 0) this.stats.bufferedMs = (((next.delay || 0) - (prev.delay || 0)) / emitted) * 1000;
    this._prevStats = next;
    this._emit("stats", this.stats);
  }

  /** Stop: quiet at once, hang up (the slot is free when the gateway answers), then close the
   * connection (the gateway's own close, meanwhile, is this Stop's too). */
  async hangup() {
    if (this.ended) return;
    this._hangingUp = true;
    if (this.audio) this.audio.srcObject = null;
    if (this.location) {
      await Promise.race([this._hangupRequest(), new Promise((r) => setTimeout(r, HANGUP_WAIT_MS))]);
    }
    this._end(1000, "");
  }

  /** POST .../hangup, with keepalive so that it still leaves when the page is being closed. */
  _hangupRequest() {
    const headers = this.key ? { Authorization: `Bearer ${this.key}` } : {};
    return fetch(`${this.location}/hangup`, { method: "POST", headers, keepalive: true }).catch(() => {});
  }

  _end(code, reason) {
    if (this.ended) return;
    if (this._hangingUp) [code, reason] = [1000, ""]; // the connection closed on our hangup
    this.ended = true;
    this._teardown();
    this._emit("closed", { code, reason });
  }

  /** Refused or unreachable: closed, and no "closed" event (the caller reports the CallError). */
  _fail() {
    this.ended = true;
    this._teardown();
  }

  /** Given up here only: the connection closed, no hangup and no "closed" event. For a call whose
   * connection was lost once a new call brought its session back (the gateway closed this one
   * then; a hangup or a close the gateway heard first would end the session). */
  abandon() {
    if (!this.ended) this._fail();
  }

  _teardown() {
    if (this._statsTimer) clearInterval(this._statsTimer);
    this._statsTimer = null;
    if (this.dc) {
      this.dc.onclose = null;
      this.dc.onmessage = null;
    }
    if (this.pc) {
      this.pc.onconnectionstatechange = null;
      this.pc.close();
    }
    // The reply's element lets go of this call's track, not of a newer call's on the same element.
    if (this.audio && this.remoteStream && this.audio.srcObject === this.remoteStream) this.audio.srcObject = null;
  }
}

/** Resolves when ICE gathering is complete, or after `maxMs` (what was gathered then is sent). */
function gathered(pc, maxMs) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      pc.removeEventListener("icegatheringstatechange", check);
      resolve();
    };
    const check = () => { if (pc.iceGatheringState === "complete") done(); };
    const timer = setTimeout(done, maxMs);
    pc.addEventListener("icegatheringstatechange", check);
  });
}
