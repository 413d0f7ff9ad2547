// The chat page's MCP server setting: a server URL whose tools the *server* lists and runs (a
// session.update `tools` entry of type "mcp"; GA dialect only, which is the one ChatSession
// speaks). Optional: a label, the approval mode ("Ask me" = require_approval "always", OpenAI's
// default; "Never ask" = "never") and the allowed tools (comma-separated). Kept per browser; the
// operator decides which hosts are allowed (tools.mcp.allowed_hosts), so a refusal comes from the
// server and is shown under the fields until they change.

const KEY = "omni.chat.mcp";
const LABEL = /^[A-Za-z][A-Za-z0-9_-]{0,31}$/;
export const DEFAULT_LABEL = "mcp";

/** The session.update entry for these field values: {tool} or {problem} (a reason in words), or {} when no URL. */
export function mcpTool({ url = "", label = "", approval = "always", allowed = "" } = {}) {
  url = url.trim();
  if (!url) return {};
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return { problem: "The MCP server URL is not a valid URL." };
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return { problem: "The MCP server URL must start with http:// or https://." };
  const serverLabel = label.trim() || DEFAULT_LABEL;
  if (!LABEL.test(serverLabel)) {
    return { problem: "The MCP label must start with a letter and use only letters, digits, - and _ (at most 32)." };
  }
  const tool = { type: "mcp", server_label: serverLabel, server_url: url, require_approval: approval === "never" ? "never" : "always" };
  const names = allowed.split(",").map((s) => s.trim()).filter(Boolean);
  if (names.length) tool.allowed_tools = names;
  return { tool };
}

/**
 * Add the MCP controls to `box` (under the tool settings). `onChange()` runs when they change.
 * Returns {tool: the entry or null, refuse(message), label}.
 */
export function mountMcpSettings(box, onChange) {
  // Folded while no server is set, so the settings panel stays as short as it was.
  const fieldset = document.createElement("details");
  fieldset.className = "mcp-settings";
  fieldset.id = "mcp-settings";
  fieldset.innerHTML = `<summary>MCP server</summary>
    <label>URL <input id="mcp-url" type="text" inputmode="url" spellcheck="false"
      placeholder="https://example.com/mcp" maxlength="2048"></label>
    <div class="settings-row">
      <label>Label <input id="mcp-label" type="text" spellcheck="false" maxlength="32" placeholder="${DEFAULT_LABEL}"></label>
      <label>Approval <select id="mcp-approval">
        <option value="always">Ask me</option>
        <option value="never">Never ask</option>
      </select></label>
    </div>
    <label>Allowed tools <input id="mcp-allowed" type="text" spellcheck="false" placeholder="all (or e.g. get_weather, search)"></label>
    <p id="mcp-status" class="mcp-status" role="status" hidden></p>`;
  box.appendChild(fieldset);
  const $ = (id) => fieldset.querySelector(`#${id}`);
  const fields = { url: $("mcp-url"), label: $("mcp-label"), approval: $("mcp-approval"), allowed: $("mcp-allowed") };
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(KEY) || "{}") || {};
  } catch { /* private mode or a bad value: defaults */ }
  fields.url.value = typeof saved.url === "string" ? saved.url : "";
  fields.label.value = typeof saved.label === "string" ? saved.label : "";
  fields.approval.value = saved.approval === "never" ? "never" : "always";
  fields.allowed.value = typeof saved.allowed === "string" ? saved.allowed : "";
  fieldset.open = Boolean(fields.url.value.trim());
  let refused = null; // {key, message}: the server refused exactly these values

  const values = () => ({ url: fields.url.value, label: fields.label.value, approval: fields.approval.value, allowed: fields.allowed.value });
  const status = (text, bad) => {
    const p = $("mcp-status");
    p.textContent = text || "";
    p.hidden = !text;
    p.classList.toggle("bad", Boolean(bad));
  };
  const current = () => {
    const v = values();
    const built = mcpTool(v);
    if (built.problem) return { problem: built.problem };
    if (built.tool && refused && refused.key === JSON.stringify(v)) return { problem: refused.message };
    return built;
  };
  const sync = () => {
    const built = current();
    status(built.problem || "", true);
    try {
      localStorage.setItem(KEY, JSON.stringify(values()));
    } catch { /* private mode: not kept */ }
  };
  sync();
  for (const el of Object.values(fields)) {
    el.addEventListener("change", () => {
      refused = null;
      sync();
      onChange();
    });
  }
  return {
    /** The session.update entry, or null (no URL, a bad one, or one the server refused). */
    get tool() { return current().tool || null; },
    get label() { return (fields.label.value.trim() || DEFAULT_LABEL); },
    /** The server refused these values: left out of the session until the fields change. */
    refuse(message) {
      refused = { key: JSON.stringify(values()), message: `Refused by the server: ${message}` };
      fieldset.open = true;
      sync();
    },
  };
}
