// A duplex session's dialect adapter for OpenAI's Live API (/v1/live/sessions; docs/protocol.md
// "Live dialect"). It maps between Live and the Realtime events the session already handles, so
// the rest of it (player, meters, queue, transcripts, metrics) works unchanged:
// - in: session.started starts the session (no session.update: the model decides the turns);
//   session.output_audio.delta / output_transcript.delta become the reply's audio and transcript,
//   under an item id of our own (a Live stream has none): a new one after a pause in the output
//   or after the user spoke; session.input_transcript.delta accumulates into the user's entry;
//   muted/unmuted are the pause and resume; queue, recording and metrics extensions pass as they are.
// - out: the microphone as session.input_audio.append, Pause as mute; everything else the session
//   would send in Realtime (session.update, conversation.item.truncate, response.cancel,
//   output_audio_buffer.clear, ...) is never sent: the server paces the reply ~200 ms ahead and
//   stops sending when the user takes the floor, so the page plays all it gets, never holds or flushes.
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
  /**
   * `host`: what it asks of the session: onEvent(realtimeEvent), send(event), started(session),
   * userWords(text, join), endItem(item), quiet(), pagePlays(), isLive(), state(), setState(state),
   * stop(). `model`, `instructions`: the session.start's.
   */
  constructor(host, { model, instructions = "" }) {
    this.host = host;
    this.path = "/v1/live/sessions";
    this.localHold = false;
    this.dropped = {}; // client event type -> how many were not sent (no Live form)
    this.closed = null; // session.closed's reason
    this._config = { model, ...(instructions ? { instructions } : {}) };
    this._items = 0;
    this._item = null; // the item id the reply's output goes under now
    this._pause = null;
    this._userEnd = null;
    this._closing = false;
    this._wait = null;
  }

  /** The URL's query: Live names the model in session.start (or a call's offer). */
  query(params) {
    params.delete("model");
    return params;
  }

  /** The session.start's session, also the body of a Live WebRTC call. */
  callSession() {
    return { ...this._config };
  }

  /** The socket is open: start the session (the gateway holds it while the session is queued). */
  opened() {
    this.host.send({ type: "session.start", session: this.callSession() });
  }

  /** The Live event for a client event of the session, or null: not sent in Live. */
  out(event) {
    if (this._closing) return null; // after session.close the server takes nothing more
    if (LIVE_OWN.has(event.type)) return event;
    const map = LIVE_OUT[event.type];
    if (map) return map(event);
    this.dropped[event.type] = (this.dropped[event.type] || 0) + 1;
    return null;
  }

  receive(ev) {
    const host = this.host;
    switch (ev.type) {
      case "session.started":
        host.started(ev.session || {});
        break;
      case "session.output_audio.delta": // on a call the audio rides the track
        if (!host.pagePlays() || this._closing) break; // after Stop, what the server drains is not played
        host.onEvent({ type: "response.output_audio.delta", item_id: this._output(), delta: ev.delta });
        break;
      case "session.output_transcript.delta":
        if (this._closing) break;
        host.onEvent({ type: "response.output_audio_transcript.delta", item_id: this._output(), delta: ev.delta });
        break;
      case "session.input_transcript.delta":
        this._user(ev);
        break;
      case "session.input_audio.muted":
        host.onEvent({ type: "session.paused" });
        break;
      case "session.input_audio.unmuted":
        host.onEvent({ type: "session.resumed" });
        break;
      case "session.closed":
        this.closed = ev.reason || "closed";
        if (this._closing) this._end(); // ours: done; the server's: its close code says why
        break;
      default: // error (the same shape), queue.*, session.recording, session.metrics; the rest is ignored
        host.onEvent(ev);
    }
  }

  /** The item id the reply's output goes under now; its entry ends after OUTPUT_PAUSE_MS without output. */
  _output() {
    if (!this._item) this._item = `live_out_${++this._items}`;
    clearTimeout(this._pause);
    this._pause = setTimeout(() => this._outputEnded(), OUTPUT_PAUSE_MS);
    // On a call the reply plays on the track (no output_audio_buffer.* in Live): its text marks it.
    if (!this.host.pagePlays() && this.host.state() === "listening") this.host.setState("speaking");
    return this._item;
  }

  _outputEnded() {
    clearTimeout(this._pause);
    const item = this._item;
    this._item = null;
    if (item) this.host.endItem(item); // play out the tail, even below the prebuffer
    if (!this.host.pagePlays() && this.host.state() === "speaking") this.host.setState("listening");
  }

  /** The user's words (Live sends them with a leading space): they close the reply's entry. */
  _user(ev) {
    if (this._item) this._outputEnded();
    const gap = ev.start_ms != null && this._userEnd != null ? ev.start_ms - this._userEnd : 0;
    this.host.userWords(ev.delta || "", gap <= USER_PAUSE_MS);
    this._userEnd = ev.end_ms != null ? ev.end_ms : this._userEnd;
  }

  /** Stop: session.close and silence here; true if the close was sent (else close at once). */
  close() {
    if (!this.host.isLive() || this._closing) return false;
    this.host.send({ type: "session.close" });
    this._closing = true;
    this._outputEnded();
    this.host.quiet(); // Stop means quiet now, whatever the server drains
    this.host.setState("closing");
    this._wait = setTimeout(() => this._end(), CLOSE_WAIT_MS);
    return true;
  }

  _end() {
    clearTimeout(this._wait);
    if (this.host.state() !== "closed") this.host.stop();
  }
}
