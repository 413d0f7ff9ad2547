// What the chat says when the server refuses or fails something: text for the server's error
// codes and for the socket's close codes (ChatSession's message notes and alerts).

// Friendly text for the server's error codes; anything else shows the server's own message.
export const ERROR_TEXT = {
  queue_full: "The service is busy: the waiting queue is full. Please try again in a minute.",
  queue_timeout: "Waited too long in the queue. Please try again in a moment.",
  no_capable_worker: "No model worker can serve this chat right now.",
  worker_failed: "The model worker stopped during the answer. Send your message again to start a new session.",
  worker_unavailable: "The model worker could not be reached. Send your message again to retry.",
  session_expired: "The session reached its maximum length. Your next message starts a new one.",
  input_audio_buffer_commit_empty: "The voice clip was too short. Hold Record while you speak.",
  conversation_already_has_active_response: "Wait for the current answer to finish, or press Stop.",
  transcription_failed: "The voice clip could not be transcribed. Please try again.",
  queue_overflow: "Too much was sent while waiting in the queue; please wait for a worker.",
  resume_token_expired: "The connection dropped and the session could not be brought back in time. Your next message starts a new one (the chat so far is sent along).",
};

export const CLOSE_TEXT = {
  1006: "The connection to the server was lost.",
  1008: "The server refused this session (no capable worker, or the page was too slow to read).",
  1011: "The model worker failed.",
  1013: "The service is busy (queue full or waited too long). Please try again in a moment.",
  4002: "The session was paused for too long.",
  4003: "The session reached its maximum length.",
  4009: "This chat was reopened in another tab or connection.",
  4010: "The connection dropped and the session could not be brought back in time.",
};

/** What to say when the socket closed with `code` (after `lastError`, the last error event's, if any). */
export function closedText(code, lastError) {
  if (lastError && lastError.code && ERROR_TEXT[lastError.code]) return ERROR_TEXT[lastError.code];
  return `${CLOSE_TEXT[code] || `The connection closed (code ${code}).`} Send your message again to retry.`;
}

export function friendlyError(err) {
  if (!err) return "";
  const code = err.code || "";
  if (ERROR_TEXT[code]) return ERROR_TEXT[code];
  if (code === "invalid_image") return `That image could not be used: ${err.message || "unsupported image"}.`;
  if (code === "mcp_server_not_allowed") return `The MCP server was refused: ${mcpReason(err.message)}`;
  if (code === "mcp_list_tools_failed") return `The MCP server's tools could not be listed: ${mcpReason(err.message)}`;
  const msg = String(err.message || "something went wrong").replace(/\s+/g, " ").trim();
  return `The server said: ${msg.charAt(0).toUpperCase()}${msg.slice(1)}`;
}

/** An MCP error message without its "session.tools.0.server_url: " prefix. */
export function mcpReason(message) {
  return String(message || "no reason given").replace(/^session\.tools(\.\d+)?(\.[a-z_]+)?:\s*/, "").trim();
}
