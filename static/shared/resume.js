// Coming back after a dropped connection (issue 72): the server sends `session.resume_token` to a
// client that asked for it (`extensions=resume`: not part of `all`); when the socket dies without a deliberate close,
// a new socket to the same URL plus `resume_token=` brings back the same session within its grace
// period (a WebRTC call: a new offer to the same URL plus `resume_token=`, its endings given the
// close code a socket would have). `Resume` keeps the token and says when and where to try again:
// after 0.25, 0.5, 1, 2 s... while the grace lasts. The transcript stays on the page; nothing is
// sent twice.

// Closes that end a session on purpose (normal, going away, no code, not reading), or that say
// it cannot come back (taken over by another connection, expired, refused): no retry.
const FINAL_CLOSES = new Set([1000, 1001, 1005, 1008, 4001, 4002, 4003, 4004, 4009, 4010]);
const FIRST_DELAY_MS = 250;
const MAX_DELAY_MS = 4000;
// The grace assumed for a token whose grace was not said yet (a call's answer carries the token
// alone; its `session.resume_token` says the grace): the server's default. A token past the real
// grace is refused anyway (410), which ends the retries.
const DEFAULT_GRACE_S = 30;

export class Resume {
  constructor() {
    this.token = null;
    this.graceS = 0;
    this.droppedAt = null; // performance.now() of the drop being retried, else null
    this.attempts = 0;
  }

  /** A `session.resume_token` event: the session can come back. */
  issued(ev) {
    this.token = ev.resume_token || null;
    this.graceS = Number(ev.grace_s) || 0;
  }

  /** A token from elsewhere than the event (a call's answer, `X-Resume-Token`): kept with the
   * grace said so far, else the server's default until `session.resume_token` says it. */
  known(token) {
    if (!token) return;
    this.token = token;
    if (!this.graceS) this.graceS = DEFAULT_GRACE_S;
  }

  /** The socket closed with `code`: whether to try again (within the grace, with a token). */
  retries(code) {
    if (!this.token || FINAL_CLOSES.has(code)) return false;
    if (this.droppedAt == null) {
      this.droppedAt = performance.now();
      this.attempts = 0;
    }
    return performance.now() - this.droppedAt < this.graceS * 1000;
  }

  /** Wait before the next attempt (ms). */
  nextDelayMs() {
    return Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** this.attempts++);
  }

  /** `url` with the token: the socket that brings the session back. */
  url(url) {
    const u = new URL(url, location.href);
    u.searchParams.set("resume_token", this.token);
    return u.toString();
  }

  /** The session is back (its `session.created` arrived): the next drop starts afresh. */
  back() {
    this.droppedAt = null;
    this.attempts = 0;
  }

  /** The session ended or could not come back: nothing to resume any more. */
  forget() {
    this.token = null;
    this.droppedAt = null;
  }

  get retrying() {
    return this.droppedAt != null;
  }
}

/** Calls `offline()` when the browser says the network went (a socket can hang on without
 * noticing for minutes: the browser knows first) and `online()` when it is back; returns the
 * function that stops watching. */
export function watchNetwork({ offline, online }) {
  window.addEventListener("offline", offline);
  window.addEventListener("online", online);
  return () => {
    window.removeEventListener("offline", offline);
    window.removeEventListener("online", online);
  };
}
