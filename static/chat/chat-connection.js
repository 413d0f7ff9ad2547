// ChatSession's socket: methods of ChatSession, installed on it by chat-session.js (they share
// its state). The socket opens lazily on the first message and replays the conversation so far
// into a new session as text; events are sent at once (kept while it connects); session.update
// is built from the settings; a close is told apart: ours, a calm end, or an error to show.
import { onEvents } from "../shared/wire.js";
import { CLOSE_TEXT, ERROR_TEXT } from "./chat-errors.js";

export const RATE = 24000; // PCM16 mono, both directions
const REPLAY_MAX = 16; // the worker keeps 16 history messages by default

export class ChatConnection {
  _ensureConnected() {
    if (this.ws) return;
    const replay = this.messages
      .filter((m) => (m.role === "user" || m.role === "assistant") && m.text && m.status !== "failed"
        && m !== (this._turn && this._turn.entry))
      .slice(-REPLAY_MAX);
    this.sessions++;
    this._conn = "connecting";
    this._outbox = [];
    const ws = (this.ws = new WebSocket(this.url));
    this._send(this._sessionUpdate());
    // A new session after a reconnect: give the model the conversation so far, as text.
    for (const m of replay) {
      this._createItem(m.role, [{ type: m.role === "user" ? "input_text" : "output_text", text: m.text }]).catch(() => {});
    }
    ws.onopen = () => {
      for (const data of this._outbox.splice(0)) ws.send(data);
    };
    onEvents(ws, (ev) => this._onEvent(ev));
    ws.onclose = (e) => this._onClose(ws, e);
  }

  _send(event) {
    if (!this.ws) return;
    const data = JSON.stringify(event);
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(data);
    else if (this.ws.readyState === WebSocket.CONNECTING) this._outbox.push(data);
  }

  _sessionUpdate() {
    const s = this.settings;
    const tools = [...(s.tools || []), ...(s.mcp ? [s.mcp] : [])];
    return {
      type: "session.update",
      session: {
        type: "realtime",
        instructions: s.instructions || "",
        temperature: s.temperature,
        max_output_tokens: s.maxOutputTokens,
        output_modalities: [s.outputAudio ? "audio" : "text"],
        tools,
        tool_choice: tools.length ? s.toolChoice || "auto" : "auto",
        audio: {
          input: { format: { type: "audio/pcm", rate: RATE }, turn_detection: null },
          output: { voice: s.voice || "joe" },
        },
      },
    };
  }

  _closeSocket(reason) {
    const ws = this.ws;
    if (!ws) return;
    this.ws = null; // detach first: this close is ours, not an error to report
    this._reset();
    if (ws.readyState <= WebSocket.OPEN) ws.close(1000, reason);
  }

  _reset() {
    this._conn = "none";
    this.recording = null;
    clearTimeout(this._followUp);
    this.queue = null;
    this._outbox = [];
    for (const a of this._acks.splice(0)) a.reject({ code: "closed", message: "the session closed" });
    if (this._response && this._response.entry) this._update(this._response.entry, { status: "stopped" });
    this._response = null;
    this._turn = null;
  }

  _onClose(ws, e) {
    if (ws !== this.ws) return; // an old socket we closed on purpose
    const pending = this._turn || this._response;
    const entry = this._turn ? this._turn.entry : null;
    const lastError = this.error;
    this.ws = null;
    this._reset();
    if (e.code === 1000 || e.code === 4001) {
      // Normal end or idle timeout: nothing broke; the next message opens a new session.
      this._emit("notice", { text: "Session ended. Your next message starts a new one (the chat so far is sent along)." });
    } else {
      const text = lastError && lastError.code && ERROR_TEXT[lastError.code]
        ? ERROR_TEXT[lastError.code]
        : `${CLOSE_TEXT[e.code] || `The connection closed (code ${e.code}).`} Send your message again to retry.`;
      if (!lastError) this.error = { code: `close_${e.code}`, message: text };
      if (entry) this._update(entry, { status: "failed", note: text });
      this._emit("error", { text, code: e.code, during: Boolean(pending) });
    }
    this._emitState();
  }
}
