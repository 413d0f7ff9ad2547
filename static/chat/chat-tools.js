// The chat's function calls and MCP items. A function call runs here, in the page, through the
// session's `toolHandler`, and its output goes back as a function_call_output; MCP tools are run
// by the server, which lists them, runs the model's calls and speaks the results by itself: here
// their listings, calls and results become cards, and approval requests are answered.
// Given the chat's messages (the cards), its settings and `host`, what it asks of the session:
// busy(), session() (the open session's number, or null), beginTurn(fresh), isTurn(turn),
// endTurn(turn), failTurn(err), createItem(item) (a promise), respond(extra), mcpRefused(reason),
// handler() (the function runner, or null).
import { friendlyError, mcpReason } from "./chat-errors.js";

const MAX_TOOL_ROUNDS = 3; // answers to function calls in a row; the next reply may not call again

export class ChatToolCalls {
  constructor({ messages, settings, host }) {
    this.messages = messages;
    this.settings = settings;
    this.host = host;
    this._rounds = 0; // function outputs answered since the user's last message
  }

  /** A call's progress inside a reply: its arguments as they stream, an MCP call running, an
   * MCP item done. */
  onCallEvent(ev) {
    const { messages } = this;
    const entry = ev.item_id ? messages.byItem(ev.item_id) : null;
    switch (ev.type) {
      case "response.mcp_call_arguments.delta":
      case "response.function_call_arguments.delta":
        if (entry && entry.kind === "call") messages.update(entry, { arguments: entry.arguments + (ev.delta || "") });
        break;
      case "response.mcp_call_arguments.done":
      case "response.function_call_arguments.done":
        if (entry && entry.kind === "call") {
          messages.update(entry, { name: ev.name || entry.name, arguments: ev.arguments ?? entry.arguments, status: "done" });
        }
        break;
      case "response.mcp_call.in_progress":
        if (entry) messages.update(entry, { status: "running" });
        break;
      case "response.output_item.done":
        if (ev.item && (ev.item.type === "mcp_call" || ev.item.type === "mcp_approval_request")) this.mcpItemDone(ev.item);
        break;
      default:
    }
  }

  /** The user spoke: function calls may run again. */
  newTurn() {
    this._rounds = 0;
  }

  /** Answer an MCP approval request (an "approval" entry): send the mcp_approval_response, then
   * ask for the reply, in which the server runs an approved call first. */
  async answerApproval(entry, approve, reason = "") {
    const { host, messages } = this;
    if (!entry || entry.kind !== "approval" || entry.status !== "pending" || host.busy()) return;
    if (host.session() !== entry.session) {
      messages.update(entry, { status: "expired", note: "That session has ended: ask again to get a new request." });
      return;
    }
    messages.update(entry, { status: approve ? "approving" : "declining", note: "" });
    const turn = host.beginTurn(true);
    const item = { type: "mcp_approval_response", approval_request_id: entry.itemId, approve: Boolean(approve) };
    if (reason) item.reason = reason;
    try {
      await host.createItem(item);
    } catch (err) {
      messages.update(entry, { status: "failed", note: friendlyError(err) });
      host.endTurn(turn);
      return;
    }
    messages.update(entry, { status: approve ? "approved" : "declined" });
    if (!host.isTurn(turn)) return; // Stop or a closed socket meanwhile
    // A forced tool call would only ask again: this reply may use the result (or the refusal).
    host.respond(this.settings.toolChoice === "required" ? { tool_choice: "auto" } : {});
  }

  /** The reply called functions: run each, send its function_call_output, then ask for the answer. */
  async run(calls) {
    const { host, messages } = this;
    const turn = host.beginTurn(false);
    for (const call of calls) {
      const entry = messages.byItem(call.id) || this.addCall(call);
      messages.update(entry, { name: call.name, arguments: call.arguments || "", status: "done" });
      let output;
      try {
        const handler = host.handler();
        output = handler ? await handler(call.name, call.arguments || "") : { error: "this page has no tools" };
      } catch (e) {
        output = { error: String((e && e.message) || e) };
      }
      if (output === undefined || output === null) output = {};
      if (!host.isTurn(turn)) return; // Stop, New chat or a closed socket while it ran
      const isError = Boolean(output && typeof output === "object" && "error" in output);
      const result = messages.add({ role: "tool", kind: "result", name: call.name, callId: call.call_id, output, isError,
        text: "", status: "sending" });
      turn.entry = result;
      try {
        await host.createItem({ type: "function_call_output", call_id: call.call_id, output: JSON.stringify(output) });
      } catch (err) {
        if (host.isTurn(turn)) host.failTurn(err);
        return;
      }
      messages.update(result, { status: "done" });
    }
    if (!host.isTurn(turn)) return;
    this._rounds++;
    // After a forced call the answer may use the result; after a few rounds it must answer in words.
    let choice = null;
    if (this._rounds >= MAX_TOOL_ROUNDS) choice = "none";
    else if (this.settings.toolChoice === "required") choice = "auto";
    host.respond(choice ? { tool_choice: choice } : {});
  }

  /** An MCP server's listing: "listing" (started) or "done" (with its tools, or failed). */
  listing(item, phase) {
    const { messages } = this;
    let entry = messages.byItem(item.id);
    if (!entry) {
      entry = messages.add({ role: "tool", kind: "list", server: item.server_label || "", tools: [], itemId: item.id,
        text: "", status: "streaming" });
      messages.track(item.id, entry);
    }
    if (phase === "done") {
      const failed = entry.status === "failed";
      messages.update(entry, { tools: (item.tools || []).map((t) => t.name), status: failed ? "failed" : "done", isError: failed });
    }
  }

  /** The server refused or failed an MCP server: a failed listing card that says why. */
  mcpFailed(err) {
    const { messages } = this;
    const reason = mcpReason(err.message);
    const pending = [...messages.list].reverse().find((m) => m.kind === "list" && m.status === "failed" && !m.error);
    if (pending) messages.update(pending, { error: reason });
    else if (err.code === "mcp_server_not_allowed") {
      messages.add({ role: "tool", kind: "list", server: this.settings.mcp ? this.settings.mcp.server_label : "", tools: [],
        error: reason, refused: true, isError: true, text: "", status: "failed" });
      // The whole session.update was refused: send it again without the server, so the other
      // settings apply; the page leaves the server out until its fields change.
      this.settings.mcp = null;
      this.host.mcpRefused(reason);
    }
  }

  /** An MCP call's result (the server ran it), or an approval request waiting for the user. */
  mcpItemDone(item) {
    const { messages } = this;
    const entry = messages.byItem(item.id) || this.addCall(item);
    if (item.type === "mcp_approval_request") {
      messages.update(entry, { name: item.name || entry.name, arguments: item.arguments ?? entry.arguments, status: "pending",
        session: this.host.session() });
      return;
    }
    messages.update(entry, { name: item.name || entry.name, arguments: item.arguments ?? entry.arguments, status: "done" });
    const err = item.error;
    const output = err ? { error: (err && err.message) || String(err) } : item.output ?? "";
    messages.add({ role: "tool", kind: "result", name: item.name || entry.name, server: item.server_label || entry.server,
      output, isError: Boolean(err), text: "", status: "done" });
  }

  /** A card for a function call, an MCP call or an approval request, as the reply adds it. */
  addCall(item) {
    const mcp = item.type === "mcp_call" || item.type === "mcp_approval_request";
    const entry = this.messages.add({ role: "tool", kind: item.type === "mcp_approval_request" ? "approval" : "call",
      name: item.name || "", callId: item.call_id, arguments: item.arguments || "", itemId: item.id, text: "",
      status: "streaming", ...(mcp ? { server: item.server_label || "" } : {}) });
    if (item.id) this.messages.track(item.id, entry);
    return entry;
  }
}
