// A duplex session's dialect adapter for OpenAI's Realtime GA API (/v1/realtime, or a call to
// /v1/realtime/calls): the session's own language, so events pass as they are both ways. Its
// counterpart for Live is live-dialect.js; both answer the same questions for the session.

export class RealtimeDialect {
  /** `host.onEvent(event)`: the session's handler of Realtime events. */
  constructor(host) {
    this.host = host;
    this.path = null; // the transport's own (/v1/realtime or /v1/realtime/calls)
    this.localHold = true; // the page may hold its player on a loud onset
    this.dropped = {}; // client event type -> how many were not sent: none here
    this.closed = null; // Live's session.closed reason: none here
  }

  /** The URL's query: the model is named there. */
  query(params) {
    return params;
  }

  /** A call's session config, sent with the offer: none (the session.update follows session.created). */
  callSession() {
    return null;
  }

  /** The socket is open: the server starts the session by itself (session.created). */
  opened() {}

  out(event) {
    return event;
  }

  receive(event) {
    this.host.onEvent(event);
  }

  /** Stop: nothing to say first (false: close at once). */
  close() {
    return false;
  }
}
