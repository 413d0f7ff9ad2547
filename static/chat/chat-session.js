// One turn-based chat over the OpenAI Realtime GA protocol (manual turns: turn_detection null).
// UI-free: it keeps the conversation in `messages`, emits "state", "message" and "error"
// events, and plays spoken replies (chat-reply-audio.js). The socket opens lazily on
// the first message (a worker slot is exclusive, so an idle page must not hold one) and events
// are sent at once: the gateway keeps what arrives while we are queued and delivers it in order.
// MCP tools (settings.mcp) are run by the server: it lists them, runs the model's calls and speaks
// the results by itself; this class shows those items and answers approval requests. They exist
// only in the GA dialect, which is the only one this class speaks.
// It is composed of parts, each in its own file: the socket (chat-connection.js), the messages
// as shown (chat-messages.js), function calls and MCP items (chat-tools.js), the replies' audio
// (chat-reply-audio.js); the texts for error and close codes are in chat-errors.js.
import { b64 } from "../shared/wire.js";
import { ChatConnection, RATE, sessionUpdate } from "./chat-connection.js";
import { closedText, friendlyError } from "./chat-errors.js";
import { Resume } from "../shared/resume.js";
import { ChatMessages } from "./chat-messages.js";
import { ChatReplyAudio } from "./chat-reply-audio.js";
import { ChatToolCalls } from "./chat-tools.js";

export { RATE };
export { friendlyError };
const CLIP_CHUNK_BYTES = RATE * 2; // one second per input_audio_buffer.append
const REPLAY_MAX = 16; // the worker keeps 16 history messages by default

let nextEventId = 1;
const FOLLOW_UP_WAIT_MS = 10000; // after MCP calls the server starts the reply that speaks them

export class ChatSession extends EventTarget {
  constructor({ model = "omniduplex-cascade", url } = {}) {
    super();
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    this.url = url || `${proto}//${location.host}/v1/realtime?model=${encodeURIComponent(model)}&extensions=all,resume`;
    this.connection = new ChatConnection({ url: this.url, onEvent: (ev) => this._onEvent(ev), onClose: (e) => this._onClose(e),
      onOnline: () => this._retryNow() });
    this.thread = new ChatMessages((detail) => this._emit("message", detail));
    // tools: function declarations for session.update; toolChoice: auto | required | none;
    // mcp: one session.tools entry of type "mcp" (the server lists and runs its tools), or null.
    this.settings = { instructions: "", temperature: 0.3, maxOutputTokens: 160, outputAudio: true, voice: "joe",
      tools: [], toolChoice: "auto", mcp: null };
    // Runs a function call: (name, argumentsJson) -> output object (or a promise of one).
    this.toolHandler = null;
    this.tools = new ChatToolCalls({ messages: this.thread, settings: this.settings, host: this._toolsHost() });
    this.state = "idle";
    this.queue = null; // {position, queue_length, eta_s} while queued
    this.error = null; // last error {code, message} (raw, for tests and logs)
    this.lastMetrics = null;
    this.recording = null; // {session_id, share_url} when the server records this session
    this.deltaCount = 0; // text deltas of the current/last reply: >1 proves it streamed
    this._conn = "none"; // none | connecting | queued | assigned | open
    this._acks = []; // pending conversation.item.create: {eventId, resolve, reject}
    this._turn = null; // the user message being answered: {entry, kind}
    this._response = null; // {id, entry}
    this.audio = new ChatReplyAudio({ rate: RATE, onAudible: () => this._emitState(),
      onProgress: (stats) => this._emit("progress", stats) });
    this._followUp = 0; // timer: waiting for the server's reply to MCP results
    this.resume = new Resume(); // the session's resume token: a dropped socket comes back to it
    this._retry = 0; // timer: the next attempt to bring the session back
    this.reconnects = 0; // sessions brought back after a drop (for tests)
  }

  /** What the function calls and MCP items (chat-tools.js) ask of the session. */
  _toolsHost() {
    return {
      busy: () => this.busy,
      session: () => (this.connection.connected ? this.sessions : null),
      beginTurn: (fresh) => {
        const turn = (this._turn = { entry: null, kind: "tool" });
        if (fresh) {
          this.error = null;
          this.deltaCount = 0;
        }
        this._emitState();
        return turn;
      },
      isTurn: (turn) => this._turn === turn,
      endTurn: (turn) => {
        if (this._turn === turn) this._turn = null;
        this._emitState();
      },
      failTurn: (err) => this._failTurn(err),
      createItem: (item) => this._createRawItem(item),
      respond: (extra) => this._createResponse(extra),
      mcpRefused: (message) => {
        this._emit("mcp-refused", { message });
        this._send(sessionUpdate(this.settings));
      },
      handler: () => this.toolHandler,
    };
  }

  // ------------------------------------------------------------------ public

  get playedMs() { return this.audio.playedMs; }
  /** The conversation as shown (chat-messages.js has the entries' fields). */
  get messages() { return this.thread.list; }
  /** Sessions opened so far (a reconnect re-sends the history). */
  get sessions() { return this.connection.sessions; }
  get busy() { return Boolean(this._turn || this._response); }
  get responding() { return Boolean(this._response); }
  get speaking() { return this.audio.audible; }

  /** Create the AudioContext and player. Call from a click/keypress so autoplay is allowed. */
  ensureAudio() {
    return this.audio.ensure();
  }

  /** Settings apply to the open session at once and to every later reply. */
  applySettings(s) {
    const voiceWasOn = this.settings.outputAudio;
    Object.assign(this.settings, s);
    if (voiceWasOn && !this.settings.outputAudio) this._silence();
    if (this.connection.connected) this._send(sessionUpdate(this.settings));
  }

  /** Send a typed message, optionally with an image ({dataUrl, thumb}). */
  async sendMessage(text, image = null) {
    text = (text || "").trim();
    if (!text && !image) return;
    const entry = this.thread.add({ role: "user", text, kind: image ? "image" : "text", image: image ? image.thumb : null });
    const content = [];
    if (image) content.push({ type: "input_image", image_url: image.dataUrl });
    if (text) content.push({ type: "input_text", text });
    await this._beginTurn(entry, "text");
    try {
      await this._createItem("user", content);
    } catch (err) {
      return this._failTurn(err);
    }
    this.thread.update(entry, { status: "sent" });
    this._createResponse();
  }

  /** Send a recorded clip (PCM16 24 kHz bytes): append chunks, commit, then answer its transcript. */
  async sendClip(pcm, ms) {
    const entry = this.thread.add({ role: "user", text: "", kind: "voice", status: "transcribing", clipMs: ms });
    await this._beginTurn(entry, "voice");
    for (let i = 0; i < pcm.length; i += CLIP_CHUNK_BYTES) {
      this._send({ type: "input_audio_buffer.append", audio: b64(pcm.subarray(i, i + CLIP_CHUNK_BYTES)) });
    }
    this._send({ type: "input_audio_buffer.commit", event_id: this._turn.eventId });
    this._emitState();
    // The reply is requested when the transcript arrives (see _onTranscript): an empty one
    // means no speech was heard, and answering the old context instead would be confusing.
  }

  /** Stop the running reply (and any audio still playing). */
  async stop() {
    if (this._response) {
      this._send({ type: "response.cancel" });
      if (this._response.entry) this.audio.mute(this._response.entry.itemId);
    }
    if (this._turn && this._turn.kind === "tool") {
      this._turn = null; // function outputs not sent yet stay unsent; no answer is asked for
      this._emitState();
    }
    await this._silence();
  }

  /** Forget everything and close the session; the next message starts a new one. */
  newChat() {
    this._closeSocket("new chat");
    this._silence();
    this.thread.clear();
    this.error = null;
    this._emit("message", { reset: true });
    this._emitState();
  }

  close() {
    this._closeSocket("page closed");
    this.audio.close();
  }

  /** The conversation as shown, minus turns that never reached the model: what Save & share posts. */
  transcript() {
    return this.thread.transcript();
  }

  /** Answer an MCP approval request (an "approval" entry); see chat-tools.js. */
  answerApproval(entry, approve, reason = "") {
    return this.tools.answerApproval(entry, approve, reason);
  }

  // ------------------------------------------------------------------ turns

  async _beginTurn(entry, kind) {
    if (this.audio.audible) await this._silence(); // the user moved on
    this.deltaCount = 0;
    this.tools.newTurn();
    this.error = null;
    this._turn = { entry, kind, eventId: `evt_${Date.now().toString(36)}_${nextEventId++}` };
    this._ensureConnected();
    this._emitState();
  }

  _failTurn(err) {
    if (this._turn && this._turn.entry) this.thread.update(this._turn.entry, { status: "failed", note: friendlyError(err) });
    this._turn = null;
    this._emitState();
  }

  _createItem(role, content) {
    return this._createRawItem({ type: "message", role, content });
  }

  _createRawItem(item) {
    const eventId = `evt_${Date.now().toString(36)}_${nextEventId++}`;
    return new Promise((resolve, reject) => {
      this._acks.push({ eventId, type: item.type, resolve, reject });
      this._send({ type: "conversation.item.create", event_id: eventId, item });
    });
  }

  _createResponse(extra = {}) {
    const s = this.settings;
    this._send({
      type: "response.create",
      response: { output_modalities: [s.outputAudio ? "audio" : "text"], max_output_tokens: s.maxOutputTokens, ...extra },
    });
  }

  _onTranscript(ev) {
    const turn = this._turn;
    const entry = this.thread.byItem(ev.item_id) || (turn && turn.kind === "voice" ? turn.entry : null);
    if (!entry) return;
    const text = (ev.transcript || "").trim();
    if (!text) {
      this.thread.update(entry, { status: "failed", note: "No speech was heard in that clip. Hold Record while you speak, close to the microphone." });
      if (turn && turn.entry === entry) this._turn = null;
      this._emitState();
      return;
    }
    this.thread.update(entry, { text, status: "sent" });
    if (turn && turn.entry === entry) this._createResponse();
  }

  // ------------------------------------------------------------------ events

  _onEvent(ev) {
    switch (ev.type) {
      case "queue.position":
        this._conn = "queued";
        this.queue = { position: ev.position, queue_length: ev.queue_length, eta_s: ev.eta_s };
        break;
      case "queue.assigned":
        this._conn = "assigned";
        this.queue = null;
        break;
      case "session.created":
        this._conn = "open";
        this.queue = null;
        if (this.resume.retrying) {
          this.resume.back();
          this.reconnects++;
          this._emit("notice", { text: "Reconnected: the conversation goes on." });
        }
        break;
      case "session.resume_token":
        this.resume.issued(ev);
        break;
      case "session.recording":
        this.recording = { session_id: ev.session_id, share_url: ev.share_url };
        break;
      case "conversation.item.added":
        if (ev.item && ev.item.type === "mcp_list_tools") {
          this.tools.listing(ev.item, "listing");
          break;
        }
        // Items are created one at a time, in order: the next "added" of the same type (outside
        // a reply) acknowledges the oldest pending conversation.item.create.
        if (!this._response && this._acks.length && ev.item && ev.item.status !== "in_progress"
          && (!this._acks[0].type || this._acks[0].type === ev.item.type)) {
          this._acks.shift().resolve(ev.item);
        }
        break;
      case "conversation.item.done":
        if (ev.item && ev.item.type === "mcp_list_tools") this.tools.listing(ev.item, "done");
        break;
      case "mcp_list_tools.failed": {
        const entry = this.thread.byItem(ev.item_id);
        if (entry) this.thread.update(entry, { status: "failed", isError: true });
        break;
      }
      case "input_audio_buffer.committed":
        if (this._turn && this._turn.kind === "voice") {
          this._turn.entry.itemId = ev.item_id;
          this.thread.track(ev.item_id, this._turn.entry);
        }
        break;
      case "conversation.item.input_audio_transcription.completed":
        this._onTranscript(ev);
        break;
      case "response.created": {
        clearTimeout(this._followUp);
        const entry = this.thread.add({ role: "assistant", text: "", kind: "text", status: "streaming" });
        this._response = { id: ev.response && ev.response.id, entry };
        if (this._turn && this._turn.kind !== "tool") this.thread.update(this._turn.entry, { status: "sent" });
        this._turn = null;
        break;
      }
      case "response.output_item.added":
        if (this._response && ev.item && ["function_call", "mcp_call", "mcp_approval_request"].includes(ev.item.type)) {
          this._onCallAdded(ev.item);
        } else if (this._response && ev.item && ev.item.id) {
          if (!this._response.entry) this._response.entry = this.thread.add({ role: "assistant", text: "", kind: "text", status: "streaming" });
          this._response.entry.itemId = ev.item.id;
          this.thread.track(ev.item.id, this._response.entry);
        }
        break;
      case "response.mcp_call_arguments.delta":
      case "response.function_call_arguments.delta":
      case "response.mcp_call_arguments.done":
      case "response.function_call_arguments.done":
      case "response.mcp_call.in_progress":
      case "response.output_item.done":
        this.tools.onCallEvent(ev);
        break;
      case "response.output_audio_transcript.delta":
      case "response.output_text.delta": {
        const entry = this.thread.byItem(ev.item_id) || (this._response && this._response.entry);
        if (!entry) break;
        this.deltaCount++;
        this.thread.update(entry, { text: entry.text + (ev.delta || "") });
        break;
      }
      case "response.output_audio.delta":
        if (this.settings.outputAudio) this.audio.push(ev.item_id, ev.delta);
        break;
      case "response.output_audio.done":
        this.audio.end(ev.item_id);
        break;
      case "response.done":
        this._onResponseDone(ev.response || {});
        break;
      case "session.metrics":
        this.lastMetrics = ev.metrics || null;
        break;
      case "error":
        this._onError(ev.error || {});
        break;
      default:
        return;
    }
    this._emitState();
  }

  _onResponseDone(r) {
    const entry = this._response ? this._response.entry : null;
    this._response = null;
    const calls = (r.output || []).filter((o) => o.type === "function_call");
    for (const call of calls) {
      const callEntry = this.thread.byItem(call.id);
      if (callEntry) this.thread.update(callEntry, { status: r.status === "completed" ? "done" : r.status || "done" });
    }
    for (const item of (r.output || []).filter((o) => o.type === "mcp_call")) {
      const callEntry = this.thread.byItem(item.id);
      if (callEntry && (callEntry.status === "streaming" || callEntry.status === "running")) {
        this.thread.update(callEntry, { status: r.status === "completed" ? "done" : r.status || "done" });
      }
    }
    if (r.status === "completed" && calls.length) this.tools.run(calls);
    const last = (r.output || [])[(r.output || []).length - 1];
    if (r.status === "completed" && last && last.type === "mcp_call" && !this._turn) {
      // The server speaks MCP results in a reply of its own: wait for it (a while, at most).
      const turn = (this._turn = { entry: null, kind: "tool" });
      clearTimeout(this._followUp);
      this._followUp = setTimeout(() => {
        if (this._turn === turn) {
          this._turn = null;
          this._emitState();
        }
      }, FOLLOW_UP_WAIT_MS);
    }
    if (!entry) return;
    const message = (r.output || []).find((o) => o.type === "message") || {};
    const part = message.content || [];
    const final = part.length ? (part[0].transcript ?? part[0].text) : null;
    const reason = r.status_details && r.status_details.reason;
    const patch = { status: r.status === "completed" ? "done" : r.status || "done" };
    if (typeof final === "string" && final.length >= entry.text.length) patch.text = final;
    if (r.status === "cancelled") patch.note = "Stopped";
    else if (r.status === "incomplete" && reason === "max_output_tokens") patch.note = "Cut off at the max tokens setting";
    else if (r.status === "failed") patch.note = "The answer failed";
    this.thread.update(entry, patch);
    this.audio.end(entry.itemId);
  }

  _onError(err) {
    this.error = { code: err.code || "error", message: err.message || "" };
    if (err.code === "response_cancel_not_active") return; // Stop raced the end of the reply
    const head = this._acks[0];
    // session.* errors answer the session.update, never a pending item (they carry no event_id)
    const ofSession = typeof err.param === "string" && err.param.startsWith("session.");
    if (err.code === "mcp_server_not_allowed" || err.code === "mcp_list_tools_failed") this.tools.mcpFailed(err);
    if (head && !ofSession && (err.event_id === head.eventId || (!err.event_id && err.type === "invalid_request_error"))) {
      this._acks.shift().reject(err);
      return; // the turn's own failure: shown on its message
    }
    if (this._turn && err.event_id && err.event_id === this._turn.eventId) {
      return this._failTurn(err); // the clip's commit was refused
    }
    if (err.code === "transcription_failed" && this._turn && this._turn.kind === "voice") this._failTurn(err);
    if (err.code === "idle_timeout") return; // the close that follows says it calmly
    this._emit("error", { text: friendlyError(err), code: err.code });
  }

  // ------------------------------------------------------------------ audio

  _silence() {
    return this.audio.silence(this.messages.filter((m) => m.role === "assistant" && m.itemId).map((m) => m.itemId));
  }

  _onCallAdded(item) {
    // The placeholder bubble opened at response.created belongs after the call: drop it while
    // it is still empty (a message that follows opens a new one).
    const placeholder = this._response.entry;
    if (placeholder && !placeholder.text && !placeholder.itemId) {
      this.thread.remove(placeholder);
      this._response.entry = null;
    }
    this.tools.addCall(item);
  }

  // ------------------------------------------------------------------ the socket

  /** Open a session if none is: the settings first, then the conversation so far, as text. */
  _ensureConnected() {
    if (this.connection.connected || this._conn === "reconnecting") return; // events wait for the socket
    const replay = this.messages
      .filter((m) => (m.role === "user" || m.role === "assistant") && m.text && m.status !== "failed"
        && m !== (this._turn && this._turn.entry))
      .slice(-REPLAY_MAX);
    this._conn = "connecting";
    this.connection.open();
    this._send(sessionUpdate(this.settings));
    // A new session after a reconnect: give the model the conversation so far, as text.
    for (const m of replay) {
      this._createItem(m.role, [{ type: m.role === "user" ? "input_text" : "output_text", text: m.text }]).catch(() => {});
    }
  }

  _send(event) {
    this.connection.send(event);
  }

  _closeSocket(reason) {
    clearTimeout(this._retry);
    const retrying = this.resume.retrying;
    this.resume.forget();
    if (this.connection.close(reason) || retrying) this._reset(); // this close is ours, not an error to report
  }

  _reset() {
    this._conn = "none";
    this.connection.drop();
    this.recording = null;
    clearTimeout(this._followUp);
    this.queue = null;
    for (const a of this._acks.splice(0)) a.reject({ code: "closed", message: "the session closed" });
    if (this._response && this._response.entry) this.thread.update(this._response.entry, { status: "stopped" });
    this._response = null;
    this._turn = null;
  }

  /** The network is back: while bringing the session back, try at once instead of after the wait. */
  _retryNow() {
    if (this._conn !== "reconnecting" || this.connection.connected) return;
    clearTimeout(this._retry);
    this.connection.open(this.resume.url(this.url));
  }

  /** The server closed the session: a calm end, or an error to show. */
  _onClose(e) {
    if (this.resume.retries(e.code)) {
      // Dropped, not ended: the page keeps everything and a new socket brings the session back.
      this._conn = "reconnecting";
      this.audio.stopped();
      clearTimeout(this._retry);
      this._retry = setTimeout(() => this.connection.open(this.resume.url(this.url)), this.resume.nextDelayMs());
      this._emitState();
      return;
    }
    this.resume.forget();
    const pending = this._turn || this._response;
    const entry = this._turn ? this._turn.entry : null;
    const lastError = this.error;
    this._reset();
    if (e.code === 1000 || e.code === 4001) {
      // Normal end or idle timeout: nothing broke; the next message opens a new session.
      this._emit("notice", { text: "Session ended. Your next message starts a new one (the chat so far is sent along)." });
    } else {
      const text = closedText(e.code, lastError);
      if (!lastError) this.error = { code: `close_${e.code}`, message: text };
      if (entry) this.thread.update(entry, { status: "failed", note: text });
      this._emit("error", { text, code: e.code, during: Boolean(pending) });
    }
    this._emitState();
  }

  // ------------------------------------------------------------------ state

  _computeState() {
    if (this._conn === "connecting") return "connecting";
    if (this._conn === "reconnecting") return "reconnecting";
    if (this._conn === "queued") return "queued";
    if (this._conn === "assigned") return "assigned";
    if (this._response) return "responding";
    if (this._turn) return this._turn.kind === "voice" && this._turn.entry.status === "transcribing" ? "transcribing" : "thinking";
    if (this.audio.audible) return "speaking";
    return this._conn === "open" ? "ready" : "idle";
  }

  _emitState() {
    const state = this._computeState();
    const key = `${state}:${this.queue ? `${this.queue.position}/${this.queue.queue_length}` : ""}`;
    this.state = state;
    if (key === this._lastStateKey) return;
    this._lastStateKey = key;
    this._emit("state", { state, queue: this.queue });
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}
