// How the chat transcript shows what an MCP server did (entries made by ChatSession): the
// server's listing (its tools, or why it failed), each call the server ran and its result (the
// demo tools' "tool" card style), and an approval request with Approve / Decline buttons.

/** Whether an entry is one of the MCP cards this module words. */
export function isMcpEntry(entry) {
  return entry.role === "tool" && (entry.kind === "list" || entry.kind === "approval" || entry.server !== undefined);
}

/** The card's text: `callText` words a call's name and arguments (the page's own helper). */
export function mcpText(entry, callText) {
  if (entry.kind === "list") {
    if (entry.error) return `${entry.refused ? "Refused" : "Listing failed"}: ${entry.error}`;
    if (entry.status === "failed") return "Listing failed";
    if (entry.status === "streaming") return "Listing the tools…";
    return entry.tools && entry.tools.length ? `Tools: ${entry.tools.join(", ")}` : "No tools offered";
  }
  return callText(entry);
}

const APPROVAL_META = {
  streaming: (server) => `${server} asks for approval…`,
  pending: (server) => `${server} wants to run this. Allow it?`,
  approving: (server) => `${server}: approved, sending…`,
  declining: (server) => `${server}: declined, sending…`,
  approved: (server) => `${server}: approved`,
  declined: (server) => `${server}: declined`,
  failed: (server) => `${server}: the answer was not sent`,
  expired: (server) => `${server}: not answered`,
};

/** The card's small line: which server, what happened. */
export function mcpMeta(entry) {
  const server = entry.server || "MCP";
  if (entry.kind === "list") return entry.refused ? `MCP server ${server}` : `MCP tools from ${server}`;
  if (entry.kind === "approval") {
    const line = APPROVAL_META[entry.status] ? APPROVAL_META[entry.status](server) : `${server}: ${entry.status}`;
    return entry.note ? `${line} · ${entry.note}` : line;
  }
  if (entry.kind === "call") {
    const step = entry.status === "streaming" ? "…" : entry.status === "running" ? ", running…" : "";
    return `MCP call on ${server}${step}`;
  }
  return `${entry.name} result from ${server}`;
}

/** Approve / Decline under a pending request; `answer(approve)` sends it. Re-rendering replaces them. */
export function renderApproval(entry, el, answer) {
  let box = el.querySelector(".approval-actions");
  if (entry.kind !== "approval" || entry.status !== "pending") {
    if (box) box.remove();
    return;
  }
  if (box) return;
  box = document.createElement("div");
  box.className = "approval-actions";
  box.innerHTML = `<button type="button" class="accent" data-approve="1">Approve</button>
    <button type="button" data-approve="0">Decline</button>`;
  box.addEventListener("click", (e) => {
    const button = e.target.closest("button");
    if (!button) return;
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    answer(button.dataset.approve === "1");
  });
  el.appendChild(box);
}
