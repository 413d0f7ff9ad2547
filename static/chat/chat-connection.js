// The chat's socket: one WebSocket per server session, opened when the session asks (lazily, on
// the first message: a worker slot is exclusive, so an idle page must not hold one). Events are
// sent at once; while it connects they wait here, in order. A close it did not ask for is told
// to `onClose(event)`; one it asked for (New chat, leaving the page) is not. Between a dropped
// socket and the one that brings the session back (`open(resumeUrl)`), events wait here too. `sessionUpdate` is
// the session.update the chat's settings make.
import { watchNetwork } from "../shared/resume.js";
import { onEvents } from "../shared/wire.js";

export const RATE = 24000; // PCM16 mono, both directions

export class ChatConnection {
  constructor({ url, onEvent, onClose, onOnline = () => {} }) {
    this.url = url;
    this.onEvent = onEvent;
    this.onClose = onClose;
    // The browser knows first when the network goes: the socket is dropped then, not minutes later.
    watchNetwork({ offline: () => this._lost(), online: () => onOnline() });
    this.ws = null;
    this.sessions = 0; // sockets opened so far (each a new server session)
    this._outbox = [];
  }

  /** A socket is open or opening. */
  get connected() {
    return Boolean(this.ws);
  }

  /** A new socket: a new session, or with `url` (the resume token's) the same one brought back. */
  open(url = null) {
    if (!url) {
      this.sessions++;
      this._outbox = []; // a new session: nothing of the old one is for it
    }
    const ws = (this.ws = new WebSocket(url || this.url));
    ws.onopen = () => {
      for (const data of this._outbox.splice(0)) ws.send(data);
    };
    onEvents(ws, (ev) => this.onEvent(ev));
    ws.onclose = (e) => {
      if (ws !== this.ws) return; // an old socket we closed on purpose
      this.ws = null;
      this.onClose(e); // the outbox waits for a socket that brings the session back, or is dropped
    };
  }

  /** The network went: the socket is given up as dropped (1006), and closed in the background. */
  _lost() {
    const ws = this.ws;
    if (!ws) return;
    this.ws = null;
    try { ws.close(4000, "network lost"); } catch { /* closing already */ }
    this.onClose({ code: 1006, reason: "network lost" });
  }

  send(event) {
    const data = JSON.stringify(event);
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(data);
    else if (!this.ws || this.ws.readyState === WebSocket.CONNECTING) this._outbox.push(data);
  }

  /** Forget what waits for a socket (the session ended). */
  drop() {
    this._outbox = [];
  }

  /** Close on purpose (not an error to report); false when no socket was open. */
  close(reason) {
    const ws = this.ws;
    if (!ws) return false;
    this.ws = null; // detach first: its close event is ours
    this._outbox = [];
    if (ws.readyState <= WebSocket.OPEN) ws.close(1000, reason);
    return true;
  }
}

/** The session.update for the chat's settings (manual turns: turn_detection null). */
export function sessionUpdate(s) {
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
