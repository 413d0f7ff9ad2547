// ChatSession's function calls and MCP items: methods of ChatSession, installed on it by
// chat-session.js (they share its state). A function call runs here, in the page, through
// `toolHandler`, and its output goes back as a function_call_output; MCP tools are run by the
// server, which lists them, runs the model's calls and speaks the results by itself: here their
// listings, calls and results become cards, and approval requests are answered.
import { friendlyError, mcpReason } from "./chat-errors.js";

const MAX_TOOL_ROUNDS = 3; // answers to function calls in a row; the next reply may not call again

export class ChatToolCalls {
  /** Answer an MCP approval request (an "approval" entry): send the mcp_approval_response, then
   * ask for the reply, in which the server runs an approved call first. */
  async answerApproval(entry, approve, reason = "") {
    if (!entry || entry.kind !== "approval" || entry.status !== "pending" || this.busy) return;
    if (!this.ws || entry.session !== this.sessions) {
      this._update(entry, { status: "expired", note: "That session has ended: ask again to get a new request." });
      return;
    }
    this._update(entry, { status: approve ? "approving" : "declining", note: "" });
    const turn = (this._turn = { entry: null, kind: "tool" });
    this.error = null;
    this.deltaCount = 0;
    this._emitState();
    const item = { type: "mcp_approval_response", approval_request_id: entry.itemId, approve: Boolean(approve) };
    if (reason) item.reason = reason;
    try {
      await this._createRawItem(item);
    } catch (err) {
      this._update(entry, { status: "failed", note: friendlyError(err) });
      if (this._turn === turn) this._turn = null;
      this._emitState();
      return;
    }
    this._update(entry, { status: approve ? "approved" : "declined" });
    if (this._turn !== turn) return; // Stop or a closed socket meanwhile
    // A forced tool call would only ask again: this reply may use the result (or the refusal).
    this._createResponse(this.settings.toolChoice === "required" ? { tool_choice: "auto" } : {});
  }

  /** The reply called functions: run each, send its function_call_output, then ask for the answer. */
  async _runCalls(calls) {
    const turn = (this._turn = { entry: null, kind: "tool" });
    this._emitState();
    for (const call of calls) {
      const entry = this._byItem.get(call.id) || this._addCall(call);
      this._update(entry, { name: call.name, arguments: call.arguments || "", status: "done" });
      let output;
      try {
        output = this.toolHandler ? await this.toolHandler(call.name, call.arguments || "") : { error: "this page has no tools" };
      } catch (e) {
        output = { error: String((e && e.message) || e) };
      }
      if (output === undefined || output === null) output = {};
      if (this._turn !== turn) return; // Stop, New chat or a closed socket while it ran
      const isError = Boolean(output && typeof output === "object" && "error" in output);
      const result = this._add({ role: "tool", kind: "result", name: call.name, callId: call.call_id, output, isError,
        text: "", status: "sending" });
      turn.entry = result;
      try {
        await this._createRawItem({ type: "function_call_output", call_id: call.call_id, output: JSON.stringify(output) });
      } catch (err) {
        if (this._turn === turn) this._failTurn(err);
        return;
      }
      this._update(result, { status: "done" });
    }
    if (this._turn !== turn) return;
    this._toolRounds++;
    // After a forced call the answer may use the result; after a few rounds it must answer in words.
    let choice = null;
    if (this._toolRounds >= MAX_TOOL_ROUNDS) choice = "none";
    else if (this.settings.toolChoice === "required") choice = "auto";
    this._createResponse(choice ? { tool_choice: choice } : {});
  }

  /** An MCP server's listing: "listing" (started) or "done" (with its tools, or failed). */
  _onListing(item, phase) {
    let entry = this._byItem.get(item.id);
    if (!entry) {
      entry = this._add({ role: "tool", kind: "list", server: item.server_label || "", tools: [], itemId: item.id,
        text: "", status: "streaming" });
      this._byItem.set(item.id, entry);
    }
    if (phase === "done") {
      const failed = entry.status === "failed";
      this._update(entry, { tools: (item.tools || []).map((t) => t.name), status: failed ? "failed" : "done", isError: failed });
    }
  }

  /** The server refused or failed an MCP server: a failed listing card that says why. */
  _mcpFailed(err) {
    const reason = mcpReason(err.message);
    const pending = [...this.messages].reverse().find((m) => m.kind === "list" && m.status === "failed" && !m.error);
    if (pending) this._update(pending, { error: reason });
    else if (err.code === "mcp_server_not_allowed") {
      this._add({ role: "tool", kind: "list", server: this.settings.mcp ? this.settings.mcp.server_label : "", tools: [],
        error: reason, refused: true, isError: true, text: "", status: "failed" });
      // The whole session.update was refused: send it again without the server, so the other
      // settings apply; the page leaves the server out until its fields change.
      this.settings.mcp = null;
      this._emit("mcp-refused", { message: reason });
      this._send(this._sessionUpdate());
    }
  }

  /** An MCP call's result (the server ran it), or an approval request waiting for the user. */
  _onMcpItemDone(item) {
    const entry = this._byItem.get(item.id) || this._addCall(item);
    if (item.type === "mcp_approval_request") {
      this._update(entry, { name: item.name || entry.name, arguments: item.arguments ?? entry.arguments, status: "pending",
        session: this.sessions });
      return;
    }
    this._update(entry, { name: item.name || entry.name, arguments: item.arguments ?? entry.arguments, status: "done" });
    const err = item.error;
    const output = err ? { error: (err && err.message) || String(err) } : item.output ?? "";
    this._add({ role: "tool", kind: "result", name: item.name || entry.name, server: item.server_label || entry.server,
      output, isError: Boolean(err), text: "", status: "done" });
  }

  _onCallAdded(item) {
    // The placeholder bubble opened at response.created belongs after the call: drop it while
    // it is still empty (a message that follows opens a new one).
    const placeholder = this._response.entry;
    if (placeholder && !placeholder.text && !placeholder.itemId) {
      this._remove(placeholder);
      this._response.entry = null;
    }
    this._addCall(item);
  }

  _addCall(item) {
    const mcp = item.type === "mcp_call" || item.type === "mcp_approval_request";
    const entry = this._add({ role: "tool", kind: item.type === "mcp_approval_request" ? "approval" : "call",
      name: item.name || "", callId: item.call_id, arguments: item.arguments || "", itemId: item.id, text: "",
      status: "streaming", ...(mcp ? { server: item.server_label || "" } : {}) });
    if (item.id) this._byItem.set(item.id, entry);
    return entry;
  }
}
