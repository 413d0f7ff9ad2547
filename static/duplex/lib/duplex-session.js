// One audio duplex session (OpenAI Realtime GA dialect), over either transport:
// - "webrtc" (the default): the microphone (and camera) as tracks of a WebRTC call, the reply's
//   audio on the call's remote track played by an <audio> element, events on the "oai-events"
//   data channel (realtime-call.js). The browser's echo canceller hears the reply, its jitter
//   buffer plays it, and the gateway plays out and truncates on barge-in (it knows what was heard).
// - "websocket": mic -> capture worklet -> PCM16 over the WebSocket -> player worklet; the page
//   guards against echo, holds and flushes its player and truncates what was not played.
// UI-free: it emits events and keeps its state in plain fields so the page (and tests, through
// window.omni) can read them.
// Its methods are in files by job: the audio graph (microphone, worklets, mixer, meters) in
// duplex-audio.js; the echo guard, local barge-in and the stop stopwatch in barge-in.js; the
// Live dialect (/v1/live/sessions, `dialect: "live"`) in live-dialect.js.
import { onEvents } from "../../shared/wire.js";
import { addMethods } from "../../shared/mixin.js";
import { BargeIn } from "./barge-in.js";
import { DuplexAudio, RATE } from "./duplex-audio.js";
import { LiveDialect } from "./live-dialect.js";
import { CallError, RealtimeCall } from "./realtime-call.js";

export const TRANSPORTS = ["webrtc", "websocket"];
export const DIALECTS = ["realtime", "live"];

/** The `turn_detection` object for a mode: "semantic_vad" (a wait that follows an end-of-turn
 * score of what was said; `eagerness` low/medium/high/auto) or "server_vad" (a fixed silence). */
export function turnDetectionFor({ turnDetection = "semantic_vad", eagerness = "auto", silenceMs = 500 } = {}) {
  if (turnDetection === "server_vad") return { type: "server_vad", silence_duration_ms: silenceMs };
  return { type: "semantic_vad", eagerness, create_response: true, interrupt_response: true };
}

// A call's input audio starts with what the microphone said in the last 3 s before session.created
// (the gateway keeps that much while the call waits), then goes on without a gap.
const CALL_PREROLL_MS = 3000;

// An error event's code -> the WebSocket close code the same ending has (a call has no close code).
const ENDING_CODES = {
  queue_full: 1013, queue_timeout: 1013, cluster_unavailable: 1013, no_capable_worker: 1008,
  idle_timeout: 4001, pause_timeout: 4002, session_expired: 4003,
  session_ended_by_operator: 4004, queue_cancelled: 4004, worker_failed: 1011, worker_unavailable: 1011,
};

export class MicError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

export class DuplexSession extends EventTarget {
  constructor({ url, model = "omniduplex-cascade", turnDetection = "semantic_vad", eagerness = "auto",
                silenceMs = 500, chimes = true, app = "audio_duplex", record = true, transport = "webrtc",
                audio = null, videoTrack = null, dialect = "realtime", instructions = "" } = {}) {
    super();
    this.chimesEnabled = chimes;
    this.transport = transport === "websocket" ? "websocket" : "webrtc";
    this.dialect = dialect === "live" ? "live" : "realtime";
    this.model = model;
    this.instructions = instructions; // Live: sent in session.start
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    // extensions=all: queue position, the recording's share link, metrics, pause acks.
    const query = new URLSearchParams({ model, app, record: record ? "true" : "false", extensions: "all" });
    if (this.dialect === "live") query.delete("model"); // Live names it in session.start
    const path = this.dialect === "live" ? "/v1/live/sessions"
      : this.transport === "webrtc" ? "/v1/realtime/calls" : "/v1/realtime";
    this.url = url || (this.transport === "webrtc" ? `${path}?${query}` : `${proto}//${location.host}${path}?${query}`);
    this.liveDropped = {}; // Live: client event type -> how many were not sent (no Live form)
    this.liveClosed = null; // Live: session.closed's reason
    this._liveItems = 0;
    this.audio = audio; // webrtc: the <audio> element that plays the reply (one is made if null)
    this.videoTrack = videoTrack; // webrtc: the camera's track, sent on the call
    this.call = null; // webrtc: the RealtimeCall
    this._playing = false; // webrtc: output_audio_buffer.started seen, not yet stopped or cleared
    this._heardMs = 0; // webrtc: time the remote track carried sound (not the idle silence frames)
    this._heardTimer = null;
    this._lastError = null;
    this.sentEvents = {}; // client event type -> how many were sent (for tests)
    this.recording = null; // {session_id, share_url} when the server records this session
    this.turnDetection = turnDetection; // "semantic_vad" | "server_vad"
    this.eagerness = eagerness; // semantic_vad only
    this.silenceMs = silenceMs; // server_vad only
    this.serverTurnDetection = null; // turn_detection as the server last reported it (session.updated)
    this.state = "idle";
    this.queue = null; // {position, queue_length, eta_s}
    this.transcripts = []; // {role, text, item}
    this.lastMetrics = null;
    this.paused = false;
    this.framesSent = 0;
    this.framesGated = 0;
    this.error = null;
    this._assistant = new Map(); // item id -> transcript entry
    this._truncated = new Set(); // items we already sent conversation.item.truncate for
    this._interrupted = new Set(); // items cut off by the user: late deltas are dropped
    this.truncates = []; // {item_id, audio_end_ms}, for display and tests
    this._currentItem = null; // assistant item whose audio is playing/streaming
    this._lastLoudPlayback = 0;
    this._playLevel = 0;
    this._userSpeaking = false;
    this.live = false; // session.created seen: audio goes to a worker, not into the queue
    this.framesAcked = 0; // camera frames the worker confirmed
    this.bargeIns = []; // {stopMs, via}: user speech over the reply -> playback silent, measured here
    this._loudRun = 0;
    this._onsetAt = null; // capture time of the current loud run's first sample
    this._inaudibleAt = 0; // last frame at which nothing was playing
    this._hold = null; // {at, timer} while playback is held on a local onset
    this._frameLog = []; // [inputAudioEndMs, capturedAt] of recent frames, to place server onsets
    this._sentMs = 0;
  }

  _set(state, detail = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...detail } }));
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  /** Reply audio played so far (ms): what the player worklet played, or on a call the time the
   * call's remote track carried sound here (the gateway sends digital silence between replies and
   * while a reply's next audio is late, which is not counted). */
  get playedMs() {
    if (this.transport === "webrtc") return this._heardMs;
    return this.player ? this.player.totalPlayedMs : 0;
  }

  /** Audio held ahead of the speaker: the player's queue, or on a call the jitter buffer's delay. */
  get bufferedMs() {
    if (this.transport === "webrtc") return this.call ? this.call.stats.bufferedMs : 0;
    return this.player ? this.player.bufferedMs : 0;
  }

  /** Underruns of the player, or on a call the jitter buffer's concealment events (lost audio). */
  get gaps() {
    if (this.transport === "webrtc") return this.call ? this.call.stats.gaps : 0;
    return this.player ? this.player.stats.gaps : 0;
  }

  get callId() {
    return this.call ? this.call.callId : null;
  }

  /** Audio clock minus wall clock since start (ms): a drifting sound card shows here. */
  get driftMs() {
    if (!this.ctx || this._clock0 == null || this.ctx.state !== "running") return 0;
    return (this.ctx.currentTime - this._clock0) * 1000 - (performance.now() - this._perf0);
  }

  /** Momentary loudness (LUFS) of the mic as sent and of the assistant as played. */
  get levels() {
    return {
      mic: this.micMeter ? this.micMeter.read() : -Infinity,
      output: this.outMeter ? this.outMeter.read() : -Infinity,
    };
  }

  /** Mic first (so a refusal is reported before we take a queue slot), then the connection. */
  async start() {
    this._set("starting");
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new MicError("insecure", "This browser gives no microphone access here. Open the page over HTTPS or from localhost.");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
      });
    } catch (e) {
      const name = e && e.name;
      if (name === "NotAllowedError" || name === "SecurityError") {
        throw new MicError("denied", "Microphone permission was denied. Allow the microphone for this site (the icon in the address bar) and press Start again.");
      }
      if (name === "NotFoundError" || name === "OverconstrainedError") {
        throw new MicError("missing", "No microphone was found. Plug one in (or enable it in system settings) and press Start again.");
      }
      if (name === "NotReadableError") {
        throw new MicError("busy", "The microphone is in use by another application or could not be opened. Close the other app and press Start again.");
      }
      throw new MicError("other", `Could not open the microphone: ${e && e.message ? e.message : e}`);
    }
    await this._startAudio();
    if (this.transport === "webrtc") await this._call();
    else this._connect();
  }

  /** Whether the browser applied its echo canceller to the microphone (getUserMedia's echoCancellation). */
  _browserCancelsEcho() {
    const track = this.stream && this.stream.getAudioTracks()[0];
    const settings = track && track.getSettings ? track.getSettings() : {};
    return settings.echoCancellation === true;
  }

  /** The `turn_detection` this session asks for. */
  turnDetectionConfig() {
    return turnDetectionFor({ turnDetection: this.turnDetection, eagerness: this.eagerness, silenceMs: this.silenceMs });
  }

  /** Change how turns end; a live session is told at once with a `session.update`. */
  setTurnDetection({ turnDetection = this.turnDetection, eagerness = this.eagerness, silenceMs = this.silenceMs } = {}) {
    Object.assign(this, { turnDetection, eagerness, silenceMs });
    if (!this.live) return false; // sent with the first session.update
    return this._send({
      type: "session.update",
      session: { type: "realtime", audio: { input: { turn_detection: this.turnDetectionConfig() } } },
    });
  }

  _send(event) {
    if (this.dialect === "live" && !(event = this._liveOut(event))) return false;
    let sent = false;
    if (this.call) sent = this.call.send(event);
    else if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(event));
      sent = true;
    }
    if (sent) this.sentEvents[event.type] = (this.sentEvents[event.type] || 0) + 1;
    return sent;
  }

  /** Send a client event (e.g. a camera frame) once the session is live; false if not sent. */
  send(event) {
    return this.live && !this.paused ? this._send(event) : false;
  }

  /** WebRTC: offer the mic (and camera) tracks; the events drive the same state as the socket's. */
  async _call() {
    this._set("connecting");
    if (!this.audio) this.audio = new Audio();
    this.audio.autoplay = true;
    this.audio.volume = this.mixer.outputLevel;
    const call = (this.call = new RealtimeCall({
      url: this.url, micTrack: this.micOut.stream.getAudioTracks()[0], videoTrack: this.videoTrack, audio: this.audio,
      liveSession: this.dialect === "live" ? this._liveConfig() : null,
    }));
    call.addEventListener("event", (e) => this._receive(e.detail));
    call.addEventListener("remote", (e) => this._meterRemote(e.detail.stream));
    call.addEventListener("stats", () => this._emit("progress", {}));
    call.addEventListener("log", (e) => this._emit("log", e.detail));
    call.addEventListener("closed", (e) => this._callClosed(e.detail.code));
    try {
      await call.connect();
    } catch (e) {
      if (!(e instanceof CallError)) {
        this._stopAudio();
        throw e;
      }
      const code = e.status === 429 && e.code !== "queue_full" ? 4029
        : { 0: 1006, 401: 1008, 403: 1008, 429: 1013 }[e.status] || 1011;
      this._closed(code, e.message, { keyRefused: e.status === 401 });
      return;
    }
    this._emit("log", { level: "info", text: `WebRTC call ${call.callId} answered` });
  }

  /** The call ended: by Stop (1000), or by the gateway, whose last error event says why. */
  _callClosed(code) {
    if (code === 1000) return this._closed(1000, closeReason(1000, ""));
    const err = this._lastError;
    const ending = err && ENDING_CODES[err.code];
    return ending ? this._closed(ending, closeReason(ending, "")) : this._closed(code, closeReason(code, ""));
  }

  _closed(code, reason, extra = {}) {
    this._stopAudio();
    this._set("closed", { code, reason });
    this._emit("closed", { code, reason, ...extra });
  }

  _connect() {
    this._set("connecting");
    const ws = (this.ws = new WebSocket(this.url));
    if (this.dialect === "live") ws.onopen = () => this._liveStart();
    onEvents(ws, (ev) => this._receive(ev));
    ws.onclose = (e) => this._closed(e.code, closeReason(e.code, e.reason));
    ws.onerror = () => this._emit("log", { level: "error", text: "WebSocket error" });
  }

  _receive(ev) {
    if (this.dialect === "live") this._onLiveEvent(ev);
    else this._onEvent(ev);
  }

  _onEvent(ev) {
    switch (ev.type) {
      case "queue.position": {
        const before = this.queue && this.queue.position;
        this.queue = { position: ev.position, queue_length: ev.queue_length, eta_s: ev.eta_s, at: performance.now() };
        if (ev.position === 1 && before !== 1) this.chimes.waiting();
        this._set("queued", this.queue);
        break;
      }
      case "session.recording":
        this.recording = { session_id: ev.session_id, share_url: ev.share_url };
        this._emit("recording", this.recording);
        break;
      case "queue.assigned":
        if (this.queue) this.chimes.assigned(); // only worth a sound after a wait
        this.queue = null;
        this._set("assigned", { worker_id: ev.worker_id, queued_s: ev.queued_s });
        break;
      case "session.created": {
        const now = performance.now();
        const flowing = this.call && this.call.connectedAt != null ? now - this.call.connectedAt : 0;
        this._inputStartAt = now - Math.min(CALL_PREROLL_MS, flowing);
        this._send({
          type: "session.update",
          session: {
            type: "realtime",
            audio: { input: {
              format: { type: "audio/pcm", rate: RATE },
              turn_detection: this.turnDetectionConfig(),
              // The browser cancelled the echo already: the server's canceller (our extension,
              // on by default over a WebSocket) would only cost time.
              ...(this._browserCancelsEcho() ? { echo_cancellation: null } : {}),
            } },
          },
        });
        this.live = true;
        this.chimes.ready();
        this._set("listening");
        this._emit("live", {});
        break;
      }
      case "session.updated": {
        const sess = ev.session || {};
        const input = (sess.audio && sess.audio.input) || {};
        if ("turn_detection" in input) this.serverTurnDetection = input.turn_detection;
        else if ("turn_detection" in sess) this.serverTurnDetection = sess.turn_detection;
        this._emit("session", sess);
        break;
      }
      case "input_audio_buffer.speech_started": {
        this._userSpeaking = true;
        const wasAudible = this._audible();
        const held = this._hold;
        if (held) {
          clearTimeout(held.timer);
          this._hold = null;
        }
        const onsets = [this._onsetAt, this._capturedAt(ev.audio_start_ms)].filter((t) => t != null);
        const overlapAt = onsets.length ? this._overlapStart(Math.min(...onsets)) : null;
        if (this.transport === "webrtc") {
          // The gateway stops the reply now (output_audio_buffer.cleared) and truncates it to what
          // it played; what is measured here is when the reply went quiet at this end.
          if (wasAudible) this._whenReplySilent().then((at) => { if (at != null) this._recordStop(overlapAt, "server", at); });
          this._set("hearing");
          break;
        }
        this._bargeIn().then(() => {
          // Already measured when held locally; otherwise the server's VAD stopped it.
          if (wasAudible && !held) this._recordStop(overlapAt, "server");
        });
        this._set("hearing");
        break;
      }
      case "input_image_buffer.appended":
        this.framesAcked = ev.frames_received;
        this._emit("frames", { acked: this.framesAcked });
        break;
      case "input_audio_buffer.speech_stopped":
        this._userSpeaking = false;
        this._set("thinking");
        break;
      case "conversation.item.input_audio_transcription.completed":
        this.transcripts.push({ role: "user", text: ev.transcript || "", item: ev.item_id });
        this._emit("transcript", { role: "user" });
        break;
      case "response.created":
        this._streaming = true;
        this._currentItem = null; // the previous reply is history now
        break;
      case "response.output_item.added":
        if (ev.item && ev.item.id) this._currentItem = ev.item.id;
        break;
      case "response.output_audio.delta":
        // Deltas already in flight when the user barged in must not start playing again.
        if (this._truncated.has(ev.item_id) || this._interrupted.has(ev.item_id)) break;
        this._currentItem = ev.item_id;
        this.player.push(ev.item_id, ev.delta);
        if (this.state !== "speaking" && this.state !== "hearing") this._set("speaking");
        break;
      case "response.output_audio.done":
        if (this.player) this.player.end(ev.item_id);
        break;
      // A call's reply plays at the gateway, which says when (WebRTC only).
      case "output_audio_buffer.started":
        this._playing = true;
        if (this.state !== "hearing") this._set("speaking");
        break;
      case "output_audio_buffer.stopped":
      case "output_audio_buffer.cleared":
        this._playing = false;
        if (this.state === "speaking") this._set("listening");
        break;
      case "conversation.item.truncated":
        // On a call the gateway truncated the reply to what it played (the page's own truncates
        // are counted when sent).
        if (this.transport === "webrtc" && !this._truncated.has(ev.item_id)) {
          this._truncated.add(ev.item_id);
          this.truncates.push({ item_id: ev.item_id, audio_end_ms: ev.audio_end_ms });
          const entry = this._assistant.get(ev.item_id);
          if (entry) entry.interrupted = true;
          this._emit("transcript", { role: "assistant" });
          this._emit("log", { level: "info", text: `interrupted: ${ev.item_id} truncated at ${ev.audio_end_ms} ms (what was played)` });
        }
        break;
      case "response.output_audio_transcript.delta":
      case "response.output_text.delta": {
        let entry = this._assistant.get(ev.item_id);
        if (!entry) {
          entry = { role: "assistant", text: "", item: ev.item_id };
          this._assistant.set(ev.item_id, entry);
          this.transcripts.push(entry);
        }
        entry.text += ev.delta || "";
        this._emit("transcript", { role: "assistant" });
        break;
      }
      case "response.done": {
        this._streaming = false;
        const r = ev.response || {};
        if (r.status === "cancelled") {
          if (this._hold) {
            clearTimeout(this._hold.timer);
            this._hold = null;
          }
          this._bargeIn();
          const entry = (r.output || []).map((o) => this._assistant.get(o.id)).find(Boolean);
          if (entry) entry.interrupted = true;
          this._emit("transcript", { role: "assistant" });
        } else if (this.player) {
          for (const o of r.output || []) this.player.end(o.id);
        }
        if (!this._userSpeaking && this.state === "thinking") this._set("listening");
        break;
      }
      case "session.metrics":
        this.lastMetrics = ev.metrics || ev;
        this._emit("metrics", this.lastMetrics);
        break;
      case "session.paused":
        this.paused = true;
        this._set("paused", { pause_timeout_s: ev.pause_timeout_s });
        break;
      case "session.resumed":
        this.paused = false;
        this._set("listening");
        break;
      case "error":
        this.error = ev.error || ev;
        this._lastError = this.error;
        this._emit("log", { level: "error", text: `${this.error.code || "error"}: ${this.error.message || ""}` });
        break;
      default:
        break;
    }
  }

  pause() {
    this._send({ type: "session.pause" });
    this.paused = true; // stop sending at once; the server confirms with session.paused
    this._micEnabled(false);
  }

  resume() {
    this._send({ type: "session.resume" });
    this._micEnabled(true);
  }

  /** Flip camera on a call: the new track replaces the old one. */
  async setVideoTrack(track) {
    this.videoTrack = track;
    if (this.call) await this.call.replaceVideoTrack(track);
  }

  stop() {
    if (this.dialect === "live" && this._liveClose()) return; // session.close first, then as below
    if (this.call) {
      if (!this.call.ended) this.call.hangup();
      else this._stopAudio();
    } else if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "client stop");
    else this._stopAudio();
  }
}

// The audio graph (duplex-audio.js), the echo guard and barge-in (barge-in.js), Live (live-dialect.js).
addMethods(DuplexSession, DuplexAudio, BargeIn, LiveDialect);

function closeReason(code, reason) {
  const known = {
    1000: "Session ended.",
    1006: "Connection lost.",
    1008: "The server refused this session (no capable worker, or the client was too slow).",
    1011: "The model worker failed. Press Start to reconnect.",
    1013: "The server is busy (queue full or wait exceeded). Try again in a moment.",
    4001: "Closed after being idle.",
    4002: "Closed: paused for too long.",
    4003: "Maximum session length reached.",
    4004: "The operator ended this session.",
    4029: "Too many sessions just now. Try again in a moment.",
  };
  return `${known[code] || `Closed (${code}).`}${reason ? ` ${reason}` : ""}`;
}
