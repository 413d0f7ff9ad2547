// DuplexSession in OpenAI's Live dialect (/v1/live/sessions; docs/protocol.md "Live dialect"):
// methods of DuplexSession, installed on it by duplex-session.js. They map between Live and the
// Realtime events the session already handles, so the rest of it (player, meters, queue,
// transcripts, metrics) works unchanged:
// - in: session.started starts the session (no session.update: the model decides the turns);
//   session.output_audio.delta / output_transcript.delta become the reply's audio and transcript,
//   under an item id of our own (a Live stream has none): a new one after a pause in the output
//   or after the user spoke; session.input_transcript.delta accumulates into the user's entry;
//   muted/unmuted are the pause and resume; queue, recording and metrics extensions pass as they are.
// - out: the microphone as session.input_audio.append, Pause as mute; everything else the session
//   would send in Realtime (session.update, conversation.item.truncate, response.cancel,
//   output_audio_buffer.clear, ...) is never sent: the server paces the reply ~200 ms ahead and
//   stops sending when the user takes the floor, so the page plays all it gets, never flushes.
// - Stop: session.close, then up to CLOSE_WAIT_MS for session.closed, then the connection closes.
//   The server lets the reply being spoken finish first (at most 9 s, docs/protocol.md "Live
//   dialect"); the page is quiet from Stop on and drops that drained output.

const OUTPUT_PAUSE_MS = 1000; // no reply audio or text for this long: the next output is a new entry
const USER_PAUSE_MS = 1500; // user transcript deltas further apart than this are separate turns
const CLOSE_WAIT_MS = 10000; // Stop waits this long for session.closed (the server drains <= 9 s, as Pipecat waits)

// What a Realtime event of the session becomes in Live (the Live events it sends itself pass).
const LIVE_OUT = {
  "input_audio_buffer.append": (e) => ({ type: "session.input_audio.append", audio: e.audio }),
  "session.pause": () => ({ type: "session.input_audio.mute" }),
  "session.resume": () => ({ type: "session.input_audio.unmute" }),
};
const LIVE_OWN = new Set(["session.start", "session.close"]);

export class LiveDialect {
  /** The session.start's session (also the body of a Live WebRTC call). */
  _liveConfig() {
    return { model: this.model, ...(this.instructions ? { instructions: this.instructions } : {}) };
  }

  /** The socket is open: start the session (the gateway holds it while the session is queued). */
  _liveStart() {
    this._send({ type: "session.start", session: this._liveConfig() });
  }

  /** The Live event for a client event of the session, or null: not sent in Live. */
  _liveOut(event) {
    if (this._liveClosing) return null; // after session.close the server takes nothing more
    if (LIVE_OWN.has(event.type)) return event;
    const map = LIVE_OUT[event.type];
    if (map) return map(event);
    this.liveDropped[event.type] = (this.liveDropped[event.type] || 0) + 1;
    return null;
  }

  _onLiveEvent(ev) {
    switch (ev.type) {
      case "session.started":
        this.live = true;
        this.chimes.ready();
        this._set("listening");
        this._emit("live", {});
        this._emit("session", ev.session || {});
        break;
      case "session.output_audio.delta": // on a call the audio rides the track
        if (!this.player || this._liveClosing) break; // after Stop, what the server drains is not played
        this._onEvent({ type: "response.output_audio.delta", item_id: this._liveOutput(), delta: ev.delta });
        break;
      case "session.output_transcript.delta":
        if (this._liveClosing) break;
        this._onEvent({ type: "response.output_audio_transcript.delta", item_id: this._liveOutput(), delta: ev.delta });
        break;
      case "session.input_transcript.delta":
        this._liveUser(ev);
        break;
      case "session.input_audio.muted":
        this._onEvent({ type: "session.paused" });
        break;
      case "session.input_audio.unmuted":
        this._onEvent({ type: "session.resumed" });
        break;
      case "session.closed":
        this.liveClosed = ev.reason || "closed";
        if (this._liveClosing) this._liveEnd(); // ours: done; the server's: its close code says why
        break;
      default: // error (the same shape), queue.*, session.recording, session.metrics; the rest is ignored
        this._onEvent(ev);
    }
  }

  /** The item id the reply's output goes under now; its entry ends after OUTPUT_PAUSE_MS without output. */
  _liveOutput() {
    if (!this._liveItem) this._liveItem = `live_out_${++this._liveItems}`;
    clearTimeout(this._livePause);
    this._livePause = setTimeout(() => this._liveOutputEnded(), OUTPUT_PAUSE_MS);
    // On a call the reply plays on the track (no output_audio_buffer.* in Live): its text marks it.
    if (this.call && this.state === "listening") this._set("speaking");
    return this._liveItem;
  }

  _liveOutputEnded() {
    clearTimeout(this._livePause);
    const item = this._liveItem;
    this._liveItem = null;
    if (item && this.player) this.player.end(item); // play out the tail, even below the prebuffer
    if (this.call && this.state === "speaking") this._set("listening");
  }

  /** The user's words (Live sends them with a leading space): they close the reply's entry. */
  _liveUser(ev) {
    if (this._liveItem) this._liveOutputEnded();
    const last = this.transcripts[this.transcripts.length - 1];
    const gap = ev.start_ms != null && this._liveUserEnd != null ? ev.start_ms - this._liveUserEnd : 0;
    if (last && last.role === "user" && gap <= USER_PAUSE_MS) last.text += ev.delta || "";
    else this.transcripts.push({ role: "user", text: (ev.delta || "").trimStart(), item: null });
    this._liveUserEnd = ev.end_ms != null ? ev.end_ms : this._liveUserEnd;
    this._emit("transcript", { role: "user" });
  }

  /** Stop: session.close and silence here; true if the close was sent (else close at once). */
  _liveClose() {
    if (!this.live || this._liveClosing) return false;
    this._send({ type: "session.close" });
    this._liveClosing = true;
    this._liveOutputEnded();
    if (this.player) this.player.stop(); // Stop means quiet now, whatever the server drains
    if (this.call && this.audio) this.audio.srcObject = null;
    this._set("closing");
    this._liveWait = setTimeout(() => this._liveEnd(), CLOSE_WAIT_MS);
    return true;
  }

  _liveEnd() {
    clearTimeout(this._liveWait);
    if (this.state !== "closed") this.stop();
  }
}
