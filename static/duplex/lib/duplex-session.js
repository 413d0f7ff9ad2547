// One audio duplex session: mic -> capture worklet -> WebSocket (OpenAI Realtime GA dialect)
// -> player worklet. UI-free: it emits events and keeps its state in plain fields so the page
// (and tests, through window.omni) can read them.
import { b64, onEvents } from "../../shared/wire.js";
import { AudioPlayer } from "./audio-player.js";
import { LufsMeter } from "./lufs.js";
import { Mixer } from "./mixer-controller.js";
import { QueueChimes } from "./queue-chimes.js";

const RATE = 24000; // the wire rate, both directions
const FRAME_MS = 40;

/** The `turn_detection` object for a mode: "semantic_vad" (a wait that follows an end-of-turn
 * score of what was said; `eagerness` low/medium/high/auto) or "server_vad" (a fixed silence). */
export function turnDetectionFor({ turnDetection = "semantic_vad", eagerness = "auto", silenceMs = 500 } = {}) {
  if (turnDetection === "server_vad") return { type: "server_vad", silence_duration_ms: silenceMs };
  return { type: "semantic_vad", eagerness, create_response: true, interrupt_response: true };
}

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

export class MicError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

export class DuplexSession extends EventTarget {
  constructor({ url, model = "omniduplex-cascade", turnDetection = "semantic_vad", eagerness = "auto",
                silenceMs = 500, chimes = true, app = "audio_duplex", record = true } = {}) {
    super();
    this.chimesEnabled = chimes;
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    // extensions=all: queue position, the recording's share link, metrics, pause acks.
    const query = new URLSearchParams({ model, app, record: record ? "true" : "false", extensions: "all" });
    this.url = url || `${proto}//${location.host}/v1/realtime?${query}`;
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

  get playedMs() {
    return this.player ? this.player.totalPlayedMs : 0;
  }

  get bufferedMs() {
    return this.player ? this.player.bufferedMs : 0;
  }

  get gaps() {
    return this.player ? this.player.stats.gaps : 0;
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

  /** Mic first (so a refusal is reported before we take a queue slot), then the socket. */
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
    this._connect();
  }

  async _startAudio() {
    try {
      this.ctx = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    } catch {
      this.ctx = new AudioContext({ latencyHint: "interactive" }); // the worklets resample
    }
    if (this.ctx.state === "suspended") await this.ctx.resume().catch(() => {});
    this._clock0 = this.ctx.currentTime;
    this._perf0 = performance.now();
    this.chimes = new QueueChimes(this.ctx, { enabled: this.chimesEnabled });
    const base = new URL(".", import.meta.url);
    await this.ctx.audioWorklet.addModule(new URL("capture-processor.js", base));
    this.mixer = new Mixer(this.ctx);
    this.player = new AudioPlayer(this.ctx, { sourceRate: RATE, output: this.mixer.output });
    await this.player.start();
    this.player.addEventListener("progress", (e) => this._onProgress(e.detail));
    let source;
    try {
      source = this.ctx.createMediaStreamSource(this.stream);
    } catch {
      // Some browsers cannot feed a mic into a context at another rate: capture at native rate.
      this.captureCtx = new AudioContext();
      await this.captureCtx.audioWorklet.addModule(new URL("capture-processor.js", base));
      source = this.captureCtx.createMediaStreamSource(this.stream);
    }
    const cctx = this.captureCtx || this.ctx;
    this.capture = new AudioWorkletNode(cctx, "capture-processor", {
      numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit",
      processorOptions: { targetRate: RATE, frameMs: FRAME_MS },
    });
    this.capture.port.onmessage = (e) => this._onFrame(e.data);
    // mic -> gain (the mixer's mic level) -> capture; the meters read after the gains.
    const micGain = cctx === this.ctx ? this.mixer.mic : cctx.createGain();
    if (micGain !== this.mixer.mic) micGain.gain.value = this.mixer.mic.gain.value;
    source.connect(micGain);
    micGain.connect(this.capture);
    this.micMeter = new LufsMeter(cctx, micGain);
    this.outMeter = new LufsMeter(this.ctx, this.mixer.output);
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

  /** Mixer setting: "mic" 0..2 or "output" 0..1. */
  setLevel(channel, value) {
    if (this.mixer) this.mixer.set(channel, value);
  }

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
    if (this._loudRun >= ONSET_FRAMES && audible && !this._hold) this._holdPlayback(this._overlapStart());
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

  /** One barge-in's stop latency: start of the overlap -> worklet silent, plus output latency. */
  _recordStop(onsetAt, via) {
    if (onsetAt == null) return;
    const stopMs = performance.now() - onsetAt + this.player.outputLatencyS * 1000;
    this.bargeIns.push({ stopMs: Math.round(stopMs), via });
    this._emit("bargein", { stopMs, via });
  }

  /** When the mic captured input-audio time `ms` (the server's audio_start_ms), if we know. */
  _capturedAt(ms) {
    for (const [endMs, at] of this._frameLog) {
      if (endMs >= ms) return at - (endMs - ms);
    }
    return null;
  }

  _send(event) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(event));
      return true;
    }
    return false;
  }

  /** Send a client event (e.g. a camera frame) once the session is live; false if not sent. */
  send(event) {
    return this.live && !this.paused ? this._send(event) : false;
  }

  _connect() {
    this._set("connecting");
    const ws = (this.ws = new WebSocket(this.url));
    onEvents(ws, (ev) => this._onEvent(ev));
    ws.onclose = (e) => {
      this._stopAudio();
      const reason = closeReason(e.code, e.reason);
      this._set("closed", { code: e.code, reason });
      this._emit("closed", { code: e.code, reason });
    };
    ws.onerror = () => this._emit("log", { level: "error", text: "WebSocket error" });
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
      case "session.created":
        this._send({
          type: "session.update",
          session: {
            type: "realtime",
            audio: { input: {
              format: { type: "audio/pcm", rate: RATE },
              turn_detection: this.turnDetectionConfig(),
            } },
          },
        });
        this.live = true;
        this.chimes.ready();
        this._set("listening");
        this._emit("live", {});
        break;
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
        this.player.end(ev.item_id);
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
        } else {
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
        this._emit("log", { level: "error", text: `${this.error.code || "error"}: ${this.error.message || ""}` });
        break;
      default:
        break;
    }
  }

  /** Stop playback now and tell the server how much of the reply was heard. */
  async _bargeIn() {
    const item = this._currentItem;
    if (!this.player) return;
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

  pause() {
    this._send({ type: "session.pause" });
    this.paused = true; // stop sending at once; the server confirms with session.paused
  }

  resume() {
    this._send({ type: "session.resume" });
  }

  _stopAudio() {
    this.live = false;
    if (this._hold) clearTimeout(this._hold.timer);
    this._hold = null;
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.capture) this.capture.port.onmessage = null;
    if (this.player) this.player.stop();
    for (const c of [this.ctx, this.captureCtx]) if (c && c.state !== "closed") c.close().catch(() => {});
    this.stream = null;
  }

  stop() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "client stop");
    else this._stopAudio();
  }
}

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
  };
  return `${known[code] || `Closed (${code}).`}${reason ? ` ${reason}` : ""}`;
}
