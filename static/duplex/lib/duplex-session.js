// One audio duplex session, composed of parts chosen once, in the constructor:
// - a transport: WebRTCTransport (the default: a call whose tracks carry the microphone, camera
//   and reply, and whose gateway plays and cuts the reply) or WebSocketTransport (PCM16 frames as
//   events, the reply played, echo-guarded, held and truncated by the page);
// - a dialect adapter: RealtimeDialect (OpenAI Realtime GA) or LiveDialect (/v1/live/sessions),
//   which translates the events both ways and knows its path, start and close;
// - the audio graph (duplex-audio.js), and the barge-in (barge-in.js), given the transport as
//   the reply's output, the mic's levels and `send`.
// The session itself follows the server's Realtime events (the state, queue, transcripts, metrics)
// and wires the parts. UI-free: it emits events and keeps its state in plain fields and getters
// so the page (and tests, through window.omni) can read them.
import { echoCancelled, openMic } from "../../shared/microphone.js";
import { BargeIn } from "./barge-in.js";
import { DuplexAudio, RATE } from "./duplex-audio.js";
import { LiveDialect } from "./live-dialect.js";
import { RealtimeDialect } from "./realtime-dialect.js";
import { WebRTCTransport } from "./webrtc-transport.js";
import { WebSocketTransport } from "./websocket-transport.js";

const TRANSPORT_PARTS = { webrtc: WebRTCTransport, websocket: WebSocketTransport };
const DIALECT_PARTS = { realtime: RealtimeDialect, live: LiveDialect };
export const TRANSPORTS = Object.keys(TRANSPORT_PARTS);
export const DIALECTS = Object.keys(DIALECT_PARTS);

/** The `turn_detection` object for a mode: "semantic_vad" (a wait that follows an end-of-turn
 * score of what was said; `eagerness` low/medium/high/auto) or "server_vad" (a fixed silence). */
export function turnDetectionFor({ turnDetection = "semantic_vad", eagerness = "auto", silenceMs = 500 } = {}) {
  if (turnDetection === "server_vad") return { type: "server_vad", silence_duration_ms: silenceMs };
  return { type: "semantic_vad", eagerness, create_response: true, interrupt_response: true };
}

export class DuplexSession extends EventTarget {
  constructor({ url, model = "omniduplex-cascade", turnDetection = "semantic_vad", eagerness = "auto",
                silenceMs = 500, chimes = true, app = "audio_duplex", record = true, transport = "webrtc",
                audio = null, videoTrack = null, dialect = "realtime", instructions = "" } = {}) {
    super();
    this.transport = Object.hasOwn(TRANSPORT_PARTS, transport) ? transport : "webrtc";
    this.dialect = Object.hasOwn(DIALECT_PARTS, dialect) ? dialect : "realtime";
    this.model = model;
    this.instructions = instructions; // Live: sent in session.start
    this.videoTrack = videoTrack; // webrtc: the camera's track, sent on the call
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
    this.error = null;
    this.live = false; // session.created seen: audio goes to a worker, not into the queue
    this.framesAcked = 0; // camera frames the worker confirmed
    this.micLevel = 0; // the last mic frame's RMS
    this._assistant = new Map(); // item id -> transcript entry

    this.adapter = new DIALECT_PARTS[this.dialect](this._dialectHost(), { model, instructions });
    const Transport = TRANSPORT_PARTS[this.transport];
    // extensions=all: queue position, the recording's share link, metrics, pause acks; resume: the token
    // that brings the session back after a dropped socket (issue 72).
    const query = new URLSearchParams({ model, app, record: record ? "true" : "false", extensions: "all,resume" });
    this.url = url || Transport.url(this.adapter.path || Transport.PATH, this.adapter.query(query));
    this.link = new Transport({ url: this.url, audio, host: this._transportHost() });
    this.graph = new DuplexAudio({ chimes, onFrame: (frame) => this._onFrame(frame) });
    this.bargeIn = new BargeIn({ output: this.link, send: (e) => this._send(e),
      localHold: this.link.pagePlays && this.adapter.localHold });
    for (const type of ["bargein", "log"]) this.bargeIn.addEventListener(type, (e) => this._emit(type, e.detail));
  }

  /** What the transport tells the session. */
  _transportHost() {
    return {
      receive: (ev) => this.adapter.receive(ev),
      opened: () => this.adapter.opened(),
      send: (ev) => this._send(ev),
      progress: (stats) => this._onProgress(stats),
      log: (detail) => this._emit("log", detail),
      closed: (code, reason, extra) => this._closed(code, reason, extra),
      reconnecting: () => this._set("reconnecting"),
      lastError: () => this.error,
    };
  }

  /** What the dialect adapter asks of the session (Live: live-dialect.js). */
  _dialectHost() {
    return {
      onEvent: (ev) => this._onEvent(ev),
      send: (ev) => this._send(ev),
      started: (session) => {
        this._nowLive();
        this._emit("session", session);
      },
      userWords: (text, join) => this._userWords(text, join),
      endItem: (item) => this.link.end(item),
      quiet: () => this.link.quiet(),
      pagePlays: () => this.link.pagePlays,
      isLive: () => this.live,
      state: () => this.state,
      setState: (state) => this._set(state),
      stop: () => this.stop(),
    };
  }

  _set(state, detail = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...detail } }));
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // ------------------------------------------------------------------ read by the page and tests

  /** Reply audio played so far (ms): what the player worklet played, or on a call the time the
   * call's remote track carried sound here (the gateway sends digital silence between replies and
   * while a reply's next audio is late, which is not counted). */
  get playedMs() { return this.link.playedMs; }
  /** Audio held ahead of the speaker: the player's queue, or on a call the jitter buffer's delay. */
  get bufferedMs() { return this.link.bufferedMs; }
  /** Underruns of the player, or on a call the jitter buffer's concealment events (lost audio). */
  get gaps() { return this.link.gaps; }
  /** Audio clock minus wall clock since start (ms): a drifting sound card shows here. */
  get driftMs() { return this.graph.driftMs; }
  /** Momentary loudness (LUFS) of the mic as sent and of the assistant as played. */
  get levels() { return this.graph.levels; }
  get call() { return this.link.call || null; } // webrtc: the RealtimeCall
  get ws() { return this.link.ws || null; } // websocket: the socket
  get callId() { return this.call ? this.call.callId : null; }
  get audio() { return this.link.audio || null; } // webrtc: the <audio> element that plays the reply
  get stream() { return this.graph.stream; } // the microphone's
  get chimes() { return this.graph.chimes; }
  get mixer() { return this.graph.mixer; }
  get micMeter() { return this.graph.micMeter; }
  get bargeIns() { return this.bargeIn.bargeIns; } // {stopMs, via}: user speech over the reply -> silent
  get truncates() { return this.bargeIn.truncates; } // {item_id, audio_end_ms}
  get framesSent() { return this.link.framesSent; } // mic frames sent as events (WebSocket)
  get framesGated() { return this.link.framesGated; } // ... of them as silence (probable echo)
  get liveDropped() { return this.adapter.dropped; } // Live: client event type -> how many were not sent
  get liveClosed() { return this.adapter.closed; } // Live: session.closed's reason

  // ------------------------------------------------------------------ controls

  /** Mic first (so a refusal is reported before we take a queue slot), then the connection. */
  async start() {
    this._set("starting");
    const stream = await openMic({ button: "Start" });
    await this.graph.start(stream);
    await this.link.prepare(this.graph);
    this._set("connecting");
    try {
      await this.link.connect({ videoTrack: this.videoTrack, callSession: this.adapter.callSession() });
    } catch (e) {
      this._stopAudio();
      throw e;
    }
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

  /** Mixer setting: "mic" 0..2 or "output" 0..1 (on a call, the <audio> element's volume). */
  setLevel(channel, value) {
    if (this.graph.setLevel(channel, value) && channel === "output") this.link.setVolume(this.graph.outputLevel);
  }

  /** Send a client event (e.g. a camera frame) once the session is live; false if not sent. */
  send(event) {
    return this.live && !this.paused ? this._send(event) : false;
  }

  pause() {
    this._send({ type: "session.pause" });
    this.paused = true; // stop sending at once; the server confirms with session.paused
    this.graph.micEnabled(false);
  }

  resume() {
    this._send({ type: "session.resume" });
    this.graph.micEnabled(true);
  }

  /** Flip camera on a call: the new track replaces the old one. */
  async setVideoTrack(track) {
    this.videoTrack = track;
    await this.link.replaceVideoTrack(track);
  }

  stop() {
    if (this.adapter.close()) return; // Live: session.close first, then as below
    if (!this.link.close()) this._stopAudio(); // else the connection's close ends it
  }

  // ------------------------------------------------------------------ wiring

  _send(event) {
    const out = this.adapter.out(event);
    if (!out) return false;
    const sent = this.link.send(out);
    if (sent) this.sentEvents[out.type] = (this.sentEvents[out.type] || 0) + 1;
    return sent;
  }

  /** A mic frame: to the transport, then its level to the barge-in. Nothing is sent while
   * queued: nobody listens yet, and the gateway keeps only a few events. */
  _onFrame(frame) {
    if (!this.live || this.paused) return;
    const now = performance.now();
    const passed = this.link.sendMic(frame, now);
    if (passed == null) return;
    this.micLevel = frame.rms;
    this.bargeIn.micLevel(frame.rms, passed, now);
  }

  /** The page's player reported (`stats`), or a call's statistics were read (null). */
  _onProgress(stats) {
    if (stats) {
      const audible = stats.playing || stats.buffered > 0;
      if (this.state === "speaking" && !audible && !this.bargeIn.streaming) this._set("listening");
      else if (audible && (this.state === "listening" || this.state === "thinking")) this._set("speaking");
    }
    this._emit("progress", stats || {});
  }

  _closed(code, reason, extra = {}) {
    this._stopAudio();
    this._set("closed", { code, reason });
    this._emit("closed", { code, reason, ...extra });
  }

  _stopAudio() {
    this.live = false;
    this.bargeIn.stop();
    this.link.stopAudio();
    this.graph.stop();
  }

  /** The session is live (session.created, or Live's session.started): audio flows from now on. */
  _nowLive() {
    this.live = true;
    this.graph.chimes.ready();
    this._set("listening");
    this._emit("live", {});
  }

  /** The user's words: a new entry, or (`join`) more of the last one if it is the user's. */
  _userWords(text, join) {
    const last = this.transcripts[this.transcripts.length - 1];
    if (join && last && last.role === "user") last.text += text;
    else this.transcripts.push({ role: "user", text: text.trimStart(), item: null });
    this._emit("transcript", { role: "user" });
  }

  // ------------------------------------------------------------------ the server's events (Realtime)

  _onEvent(ev) {
    switch (ev.type) {
      case "queue.position": {
        const before = this.queue && this.queue.position;
        this.queue = { position: ev.position, queue_length: ev.queue_length, eta_s: ev.eta_s, at: performance.now() };
        if (ev.position === 1 && before !== 1) this.graph.chimes.waiting();
        this._set("queued", this.queue);
        break;
      }
      case "session.recording":
        this.recording = { session_id: ev.session_id, share_url: ev.share_url };
        this._emit("recording", this.recording);
        break;
      case "queue.assigned":
        if (this.queue) this.graph.chimes.assigned(); // only worth a sound after a wait
        this.queue = null;
        this._set("assigned", { worker_id: ev.worker_id, queued_s: ev.queued_s });
        break;
      case "session.created":
        this.link.inputStarted(performance.now());
        this._send({
          type: "session.update",
          session: {
            type: "realtime",
            audio: { input: {
              format: { type: "audio/pcm", rate: RATE },
              turn_detection: this.turnDetectionConfig(),
              // The browser cancelled the echo already: the server's canceller (our extension,
              // on by default over a WebSocket) would only cost time.
              ...(echoCancelled(this.graph.stream) ? { echo_cancellation: null } : {}),
            } },
          },
        });
        this._nowLive();
        break;
      case "session.updated": {
        const sess = ev.session || {};
        const input = (sess.audio && sess.audio.input) || {};
        if ("turn_detection" in input) this.serverTurnDetection = input.turn_detection;
        else if ("turn_detection" in sess) this.serverTurnDetection = sess.turn_detection;
        this._emit("session", sess);
        break;
      }
      case "input_audio_buffer.speech_started":
        this.bargeIn.speechStarted(this.link.capturedAt(ev.audio_start_ms));
        this._set("hearing");
        break;
      case "input_image_buffer.appended":
        this.framesAcked = ev.frames_received;
        this._emit("frames", { acked: this.framesAcked });
        break;
      case "input_audio_buffer.speech_stopped":
        this.bargeIn.speechStopped();
        this._set("thinking");
        break;
      case "conversation.item.input_audio_transcription.completed":
        this.transcripts.push({ role: "user", text: ev.transcript || "", item: ev.item_id });
        this._emit("transcript", { role: "user" });
        break;
      case "response.created":
        this.bargeIn.replyStarted();
        break;
      case "response.output_item.added":
        if (ev.item && ev.item.id) this.bargeIn.replyItem(ev.item.id);
        break;
      case "response.output_audio.delta":
        // Deltas already in flight when the user barged in must not start playing again.
        if (this.bargeIn.dropsLate(ev.item_id)) break;
        this.bargeIn.replyItem(ev.item_id);
        this.link.push(ev.item_id, ev.delta);
        if (this.state !== "speaking" && this.state !== "hearing") this._set("speaking");
        break;
      case "response.output_audio.done":
        this.link.end(ev.item_id);
        break;
      // A call's reply plays at the gateway, which says when (WebRTC only).
      case "output_audio_buffer.started":
        this.link.replyPlaying(true);
        if (this.state !== "hearing") this._set("speaking");
        break;
      case "output_audio_buffer.stopped":
      case "output_audio_buffer.cleared":
        this.link.replyPlaying(false);
        if (this.state === "speaking") this._set("listening");
        break;
      case "conversation.item.truncated":
        // On a call the gateway truncated the reply to what it played.
        if (this.bargeIn.truncatedByServer(ev.item_id, ev.audio_end_ms)) {
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
        this.bargeIn.replyDone();
        const r = ev.response || {};
        if (r.status === "cancelled") {
          this.bargeIn.cancelled();
          const entry = (r.output || []).map((o) => this._assistant.get(o.id)).find(Boolean);
          if (entry) entry.interrupted = true;
          this._emit("transcript", { role: "assistant" });
        } else {
          for (const o of r.output || []) this.link.end(o.id);
        }
        if (!this.bargeIn.userSpeaking && this.state === "thinking") this._set("listening");
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
        this._emit("log", { level: "error", text: `${this.error.code || "error"}: ${this.error.message || ""}` });
        break;
      default:
        break;
    }
  }
}
