// Save & share for any chat-like page: POST the visible conversation to /api/shares, show the
// link (copied to the clipboard when the browser allows), and load a shared one back.

export class ShareError extends Error {}

async function reason(r) {
  try {
    const body = await r.json();
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail) && body.detail.length) {
      const d = body.detail[0];
      return `${(d.loc || []).slice(1).join(".") || "body"}: ${d.msg}`;
    }
  } catch {
    /* not JSON: fall through */
  }
  return `HTTP ${r.status}`;
}

/** `conversation`: {title?, preset?, messages: [{role, text, at, image?}]} -> {id, url, absoluteUrl}. */
export async function saveShare(conversation) {
  let r;
  try {
    // With API keys configured, saving needs one: the key this browser stored (shared/app-gate.js).
    let key = "";
    try { key = localStorage.getItem("omniduplex.apiKey") || ""; } catch { key = ""; }
    const headers = { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) };
    r = await fetch("/api/shares", { method: "POST", headers, body: JSON.stringify(conversation) });
  } catch {
    throw new ShareError("The server could not be reached to save the conversation. Check the connection and try again.");
  }
  if (r.status === 413) throw new ShareError(`This conversation is too large to share: ${await reason(r)}.`);
  if (r.status === 401) throw new ShareError("Saving a share needs an API key on this server: enter it on the start page first.");
  if (r.status === 429) throw new ShareError(`Too many shares saved just now: ${await reason(r)}.`);
  if (!r.ok) throw new ShareError(`The conversation could not be saved (${await reason(r)}).`);
  const body = await r.json();
  return { ...body, absoluteUrl: new URL(body.url, location.origin).href };
}

/** The saved conversation {id, created_at, title, messages}; ShareError if it does not exist. */
export async function loadShare(id) {
  let r;
  try {
    r = await fetch(`/api/shares/${encodeURIComponent(id)}`);
  } catch {
    throw new ShareError("The server could not be reached to load this shared conversation.");
  }
  if (r.status === 404) throw new ShareError("This shared conversation was not found. The link may be incomplete, or it was removed.");
  if (!r.ok) throw new ShareError(`The shared conversation could not be loaded (${await reason(r)}).`);
  return r.json();
}

export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    /* permission refused or no focus: fall back */
  }
  // Older path: select a hidden textarea and copy (works without the async clipboard API).
  const ta = document.createElement("textarea");
  ta.value = text;
  ta.setAttribute("readonly", "");
  ta.style.cssText = "position:fixed;top:0;left:0;width:1px;height:1px;opacity:0";
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  ta.remove();
  return ok;
}

/**
 * Wire a "Save & share" button. `box` receives the link (a read-only input and a Copy button);
 * `getConversation()` returns what to save; `onError(text)` shows a failure.
 */
export function mountSaveShare({ button, box, getConversation, onError }) {
  const label = button.textContent;
  const link = document.createElement("input");
  link.type = "text";
  link.readOnly = true;
  link.className = "share-link";
  link.setAttribute("aria-label", "Link to the shared conversation");
  link.addEventListener("focus", () => link.select());
  const copy = document.createElement("button");
  copy.type = "button";
  copy.textContent = "Copy";
  const note = document.createElement("span");
  note.className = "share-note";
  note.setAttribute("aria-live", "polite");
  box.replaceChildren(note, link, copy);
  box.hidden = true;

  copy.addEventListener("click", async () => {
    note.textContent = (await copyText(link.value)) ? "Link copied." : "Select the link and copy it.";
  });

  button.addEventListener("click", async () => {
    const conversation = getConversation();
    if (!conversation.messages.length) {
      onError("There is nothing to share yet: send a message first.");
      return;
    }
    button.disabled = true;
    button.textContent = "Saving…";
    try {
      const saved = await saveShare(conversation);
      link.value = saved.absoluteUrl;
      box.hidden = false;
      box.dataset.shareId = saved.id;
      note.textContent = (await copyText(saved.absoluteUrl)) ? "Saved. Link copied:" : "Saved. Share this link:";
    } catch (e) {
      onError(e instanceof ShareError ? e.message : `Saving failed: ${e.message || e}`);
    } finally {
      button.disabled = false;
      button.textContent = label;
    }
  });

  return { hide: () => { box.hidden = true; } };
}
