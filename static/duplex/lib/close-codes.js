// How a duplex session ended, in words: a WebSocket close code, or for a call (which has no close
// code) the code the same ending has on a socket, found from the last error event.

// An error event's code -> the WebSocket close code the same ending has.
const ENDING_CODES = {
  queue_full: 1013, queue_timeout: 1013, cluster_unavailable: 1013, no_capable_worker: 1008,
  idle_timeout: 4001, pause_timeout: 4002, session_expired: 4003,
  session_ended_by_operator: 4004, queue_cancelled: 4004, worker_failed: 1011, worker_unavailable: 1011,
};

const KNOWN = {
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

/** The close code for an ending the server announced with this error ({code}), or undefined. */
export function endingCode(error) {
  return error ? ENDING_CODES[error.code] : undefined;
}

export function closeReason(code, reason) {
  return `${KNOWN[code] || `Closed (${code}).`}${reason ? ` ${reason}` : ""}`;
}
