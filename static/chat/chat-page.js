// The turn-based chat page: wires ChatSession, the voice recorder, images, presets and
// Save & share to the markup in turnbased.html. `?share=<id>` shows a saved chat read-only.
import { renderNav } from "/static/shared/app-nav.js";
import { PresetSelector } from "/static/shared/preset-selector.js";
import { loadShare, mountSaveShare } from "/static/shared/save-share.js";
import { ChatSession } from "/static/chat/chat-session.js";
import { DEMO_TOOLS, runDemoTool } from "/static/chat/demo-tools.js";
import { ImageError, prepareImage } from "/static/chat/image-input.js";
import { isMcpEntry, mcpMeta, mcpText, renderApproval } from "/static/chat/mcp-cards.js";
import { mountMcpSettings } from "/static/chat/mcp-settings.js";
import { VoiceRecorder } from "/static/chat/voice-recorder.js";

renderNav();
const $ = (id) => document.getElementById(id);
const HOLD_MS = 350; // a press longer than this is push-to-talk; shorter toggles recording
const MIN_CLIP_MS = 400;

const chat = new ChatSession();
chat.toolHandler = runDemoTool;
const recorder = new VoiceRecorder();
let attachment = null; // a prepared image waiting for Send
let shared = null; // the saved conversation in read-only view
let rec = null; // {downAt, starting, stopWanted}: a recording being started or running
let recTimer = 0;
let pageError = null;

// Test hooks: read-only views of the page (the browser tests poll these).
window.omni = Object.freeze({
  get state() { return shared ? "shared" : recorder.recording ? "recording" : chat.state; },
  get messages() {
    return (shared ? shared.messages : chat.messages).map((m) => (m.role === "tool"
      ? { role: m.role, text: cardText(m), kind: m.kind, name: m.name, arguments: m.arguments, output: m.output,
        ...(isMcpEntry(m) ? { server: m.server, status: m.status, tools: m.tools, error: m.error || null } : {}) }
      : { role: m.role, text: m.text }));
  },
  get recording() { return chat.recording; },
  get playedMs() { return chat.playedMs; },
  get error() { return pageError || chat.error; },
  get queue() { return chat.queue; },
  get deltaCount() { return chat.deltaCount; },
  get sessions() { return chat.sessions; },
  get reconnects() { return chat.reconnects; },
  get lastMetrics() { return chat.lastMetrics; },
  get alert() { return $("alert").hidden ? "" : $("alert-text").textContent; },
  get shareUrl() { return $("share-result").hidden ? "" : ($("share-result").querySelector("input") || {}).value || ""; },
});

// ------------------------------------------------------------------ alert and status

function showAlert(text) {
  $("alert-text").textContent = text || "";
  $("alert").hidden = !text;
}
$("alert-close").addEventListener("click", () => showAlert(""));

const LABELS = {
  idle: () => "Ready",
  connecting: () => "Connecting…",
  reconnecting: () => "Connection lost: reconnecting…",
  queued: (q) => (q ? `Queued: position ${q.position} of ${q.queue_length}` + (q.eta_s != null ? `, about ${Math.max(1, Math.ceil(q.eta_s))} s` : "") : "Queued…"),
  assigned: () => "Starting the session…",
  ready: () => "Connected",
  recording: () => `Recording ${clock(recorder.ms)}`,
  transcribing: () => "Transcribing your clip…",
  thinking: () => "Thinking…",
  responding: () => "Answering…",
  speaking: () => "Speaking…",
};

function clock(ms) {
  const s = Math.floor(ms / 1000);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function refreshControls() {
  const state = window.omni.state;
  $("status").dataset.state = state === "ready" ? "listening" : state === "recording" ? "hearing" : state;
  $("status-text").textContent = (LABELS[state] || (() => state))(chat.queue);
  const recording = Boolean(rec);
  const hasInput = Boolean($("input").value.trim() || attachment);
  $("send").hidden = chat.responding;
  $("send").disabled = chat.busy || recording || !hasInput;
  $("stop").hidden = !(chat.responding || chat.speaking);
  $("record").disabled = chat.busy && !recording;
  $("record").classList.toggle("recording", recording);
  $("record").textContent = recording ? `Send clip ${clock(recorder.ms)}` : "Record";
  $("hint").textContent = recording
    ? "Recording: release (or click again) to send it, Esc to discard."
    : "Hold Record while you speak, or click it once to start and again to send.";
  $("save-share").disabled = !chat.transcript().length;
}

// ------------------------------------------------------------------ messages

const bubbles = new Map(); // entry id -> element

function isPinned() {
  const doc = document.documentElement;
  return window.innerHeight + window.scrollY >= doc.scrollHeight - 80;
}

function scrollToEnd() {
  window.scrollTo({ top: document.documentElement.scrollHeight });
}

// ------------------------------------------------------------------ function calls (demo tools)

/** A value as the card shows it: strings quoted, everything else as JSON, never a raw JSON object. */
function shortValue(v) {
  if (v && typeof v === "object") {
    return Array.isArray(v) ? v.map(shortValue).join(", ") : Object.entries(v).map(([k, x]) => `${k}: ${shortValue(x)}`).join(", ");
  }
  return typeof v === "string" ? v : String(v);
}

function toolLine(entry) {
  if (entry.kind === "call" || entry.kind === "approval") {
    let args = null;
    try {
      args = entry.arguments ? JSON.parse(entry.arguments) : {};
    } catch { /* still streaming */ }
    if (!args || typeof args !== "object") return `${entry.name || "function"}(…)`;
    const list = Object.entries(args).map(([k, v]) => `${k}: ${typeof v === "string" ? JSON.stringify(v) : shortValue(v)}`);
    return `${entry.name}(${list.join(", ")})`;
  }
  const out = entry.output;
  if (out && typeof out === "object" && "error" in out) return `Error: ${shortValue(out.error)}`;
  return shortValue(out);
}

const cardText = (entry) => (isMcpEntry(entry) ? mcpText(entry, toolLine) : toolLine(entry));

function renderTool(entry, el) {
  const mcp = isMcpEntry(entry);
  el.className = `bubble tool ${entry.kind}${mcp ? " mcp" : ""} status-${entry.status || "done"}${entry.isError ? " tool-error" : ""}`;
  const text = el.querySelector(".text");
  text.textContent = cardText(entry);
  text.hidden = false;
  el.querySelector(".thumb").hidden = true;
  const label = mcp ? mcpMeta(entry) : entry.kind === "call" ? `function call${entry.status === "streaming" ? "…" : ""}`
    : entry.status === "sending" ? `${entry.name} result, sending…` : `${entry.name} result`;
  el.querySelector(".meta").textContent = label;
  renderApproval(entry, el, (approve) => answerApproval(entry, approve));
  return el;
}

async function answerApproval(entry, approve) {
  showAlert("");
  await audioOn(); // a click: the reply that follows may speak
  await chat.answerApproval(entry, approve);
}

function renderEntry(entry) {
  let el = bubbles.get(entry.id);
  if (!el) {
    el = document.createElement("div");
    el.innerHTML = `<img class="thumb" alt="" hidden><div class="text"></div><div class="meta"></div>`;
    bubbles.set(entry.id, el);
    $("messages").appendChild(el);
  }
  if (entry.role === "tool") return renderTool(entry, el);
  el.className = `bubble ${entry.role} status-${entry.status || "done"}`;
  const img = el.querySelector(".thumb");
  if (entry.image && img.getAttribute("src") !== entry.image) {
    img.src = entry.image;
    img.alt = entry.role === "user" ? "Image you sent" : "Image";
  }
  img.hidden = !entry.image;
  const text = el.querySelector(".text");
  let shown = entry.text || "";
  if (!shown && entry.status === "transcribing") shown = "Transcribing…";
  else if (!shown && entry.status === "streaming") shown = "…";
  text.textContent = shown;
  text.hidden = !shown;
  const time = entry.at ? new Date(entry.at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : "";
  const parts = [time];
  if (entry.kind === "voice") parts.push(`voice clip, ${((entry.clipMs || 0) / 1000).toFixed(1)} s`);
  if (entry.note) parts.push(entry.note);
  el.querySelector(".meta").textContent = parts.filter(Boolean).join(" · ");
  return el;
}

function renderAll(entries) {
  bubbles.clear();
  $("messages").querySelectorAll(".bubble, .chat-notice").forEach((b) => b.remove());
  entries.forEach((e) => renderEntry(e));
  $("empty").hidden = entries.length > 0;
}

chat.addEventListener("message", (e) => {
  const pinned = isPinned();
  if (e.detail.reset) renderAll(chat.messages);
  else if (e.detail.removed) {
    const el = bubbles.get(e.detail.entry.id);
    if (el) el.remove();
    bubbles.delete(e.detail.entry.id);
  } else renderEntry(e.detail.entry);
  $("empty").hidden = chat.messages.length > 0;
  if (pinned || (e.detail.added && e.detail.entry.role === "user")) scrollToEnd();
  refreshControls();
});
chat.addEventListener("state", refreshControls);
chat.addEventListener("error", (e) => {
  pageError = null;
  showAlert(e.detail.text);
});
chat.addEventListener("notice", (e) => {
  // Not a message: never shared or re-sent, just tells the reader what happened.
  const note = document.createElement("div");
  note.className = "chat-notice";
  note.textContent = e.detail.text;
  $("messages").appendChild(note);
  refreshControls();
});
// Keep the latest message in view across resizes (rotation, keyboard, window size) if the user
// was reading the end. Scroll events caused by the resize itself must not change that.
let pinned = true;
let lastSize = `${window.innerWidth}x${window.innerHeight}`;
window.addEventListener("scroll", () => {
  if (`${window.innerWidth}x${window.innerHeight}` === lastSize) pinned = isPinned();
}, { passive: true });
window.addEventListener("resize", () => {
  lastSize = `${window.innerWidth}x${window.innerHeight}`;
  if (pinned) scrollToEnd();
});

// ------------------------------------------------------------------ settings and presets

const presets = new PresetSelector($("preset"));

// Demo tools: two functions run by this page (static/chat/demo-tools.js), and an MCP server whose
// tools the server runs (static/chat/mcp-settings.js). Not part of a preset; kept per browser.
// The controls are added here so the page's markup stays as it is.
const TOOLS_KEY = "omni.chat.demoTools";

function mountToolSettings() {
  const box = document.createElement("div");
  box.className = "tool-settings";
  box.innerHTML = `<label class="check"><input id="demo-tools" type="checkbox"> Demo tools (time, calculator)</label>
    <label>Tool use <select id="tool-choice">
      <option value="auto">The model decides</option>
      <option value="required">Always call a tool first</option>
    </select></label>`;
  $("settings-fields").appendChild(box);
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(TOOLS_KEY) || "{}") || {};
  } catch { /* private mode or a bad value: defaults */ }
  $("demo-tools").checked = Boolean(saved.on);
  $("tool-choice").value = saved.choice === "required" ? "required" : "auto";
  let mcp = null;
  const sync = () => {
    $("tool-choice").disabled = !($("demo-tools").checked || Boolean(mcp && mcp.tool));
    try {
      localStorage.setItem(TOOLS_KEY, JSON.stringify({ on: $("demo-tools").checked, choice: $("tool-choice").value }));
    } catch { /* private mode: not kept */ }
  };
  mcp = mountMcpSettings(box, () => {
    sync();
    applyFields();
  });
  sync();
  for (const id of ["demo-tools", "tool-choice"]) $(id).addEventListener("change", sync);
  return mcp;
}

// Tool use applies to the demo tools and the MCP server's alike. A server the worker refused
// (its host is not allowed) is left out of the session until its fields change.
const mcpSettings = mountToolSettings();
chat.addEventListener("mcp-refused", (e) => {
  mcpSettings.refuse(e.detail.message);
  $("tool-choice").disabled = !$("demo-tools").checked;
});

function settingsFromFields() {
  const tokens = Math.round(Number($("max-tokens").value));
  const tools = $("demo-tools").checked;
  const mcp = mcpSettings.tool;
  return {
    instructions: $("instructions").value,
    temperature: Number($("temperature").value),
    maxOutputTokens: Number.isFinite(tokens) ? Math.min(4096, Math.max(1, tokens)) : 160,
    outputAudio: $("voice").checked,
    tools: tools ? DEMO_TOOLS : [],
    toolChoice: tools || mcp ? $("tool-choice").value : "auto",
    mcp,
  };
}
// The tool settings are kept per browser, so they apply before any preset arrives.
{
  const { tools, toolChoice, mcp } = settingsFromFields();
  chat.applySettings({ tools, toolChoice, mcp });
}

function applyFields() {
  $("temperature-value").textContent = Number($("temperature").value).toFixed(2);
  chat.applySettings(settingsFromFields());
}

presets.addEventListener("change", (e) => {
  const p = e.detail.preset;
  if (!p) return;
  $("instructions").value = p.instructions || "";
  $("max-tokens").value = p.max_output_tokens;
  $("temperature").value = p.temperature;
  $("voice").checked = p.output_audio;
  chat.settings.voice = p.voice;
  applyFields();
});
presets.addEventListener("error", (e) => showAlert(e.detail.message));
for (const id of ["instructions", "max-tokens", "temperature", "voice", "demo-tools", "tool-choice"]) {
  $(id).addEventListener(id === "temperature" ? "input" : "change", applyFields);
}
$("max-tokens").addEventListener("blur", () => {
  $("max-tokens").value = settingsFromFields().maxOutputTokens; // show the clamped value
});
// Always shown on wide screens; folded on phones, where the panel sits above the chat (CSS).
$("settings-toggle").addEventListener("click", () => {
  const open = $("settings").classList.toggle("open");
  $("settings-toggle").setAttribute("aria-expanded", String(open));
  $("settings-toggle").textContent = open ? "Hide" : "Show";
});

// ------------------------------------------------------------------ sending

async function send() {
  const text = $("input").value;
  if (chat.busy || rec || (!text.trim() && !attachment)) return;
  showAlert("");
  const image = attachment;
  $("input").value = "";
  autoGrow();
  setAttachment(null);
  await audioOn();
  await chat.sendMessage(text, image);
}

/** The AudioContext must start from a user gesture; without one, replies are text only. */
async function audioOn() {
  try {
    return await chat.ensureAudio();
  } catch (e) {
    showAlert(`Sound is unavailable in this browser (${e.message || e}); answers appear as text.`);
    return null;
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
function autoGrow() {
  const ta = $("input");
  ta.style.height = "auto";
  ta.style.height = `${Math.min(ta.scrollHeight + 2, 180)}px`;
}
$("input").addEventListener("input", () => {
  autoGrow();
  refreshControls();
});
$("stop").addEventListener("click", () => chat.stop());

// ------------------------------------------------------------------ images

function setAttachment(img) {
  attachment = img;
  $("attachment").hidden = !img;
  if (img) {
    $("attachment-thumb").src = img.thumb;
    $("attachment-name").textContent = `${img.name} (${img.width}×${img.height})`;
  } else {
    $("attachment-thumb").removeAttribute("src");
  }
  refreshControls();
}

async function attach(file) {
  try {
    setAttachment(await prepareImage(file));
    showAlert("");
    $("input").focus();
  } catch (e) {
    showAlert(e instanceof ImageError ? e.message : `That image could not be used: ${e.message || e}`);
  }
}

$("image-input").addEventListener("change", () => {
  const file = $("image-input").files[0];
  $("image-input").value = ""; // the same file can be picked again
  if (file) attach(file);
});
$("attachment-remove").addEventListener("click", () => setAttachment(null));
$("input").addEventListener("paste", (e) => {
  const file = [...(e.clipboardData ? e.clipboardData.files : [])].find((f) => f.type.startsWith("image/"));
  if (file) {
    e.preventDefault();
    attach(file);
  }
});
const panel = document.querySelector(".chat-panel");
panel.addEventListener("dragover", (e) => {
  if ([...e.dataTransfer.items].some((i) => i.kind === "file")) e.preventDefault();
});
panel.addEventListener("drop", (e) => {
  const file = [...e.dataTransfer.files].find((f) => f.type.startsWith("image/"));
  if (file) {
    e.preventDefault();
    attach(file);
  }
});

// ------------------------------------------------------------------ voice clips

async function startRecording() {
  if (rec || chat.busy) return;
  showAlert("");
  rec = { downAt: performance.now(), starting: true, stopWanted: null };
  refreshControls();
  const ctx = await audioOn(); // in the gesture: also unlocks playback of the reply
  if (chat.speaking) await chat.stop();
  try {
    await recorder.start(ctx || new AudioContext());
  } catch (e) {
    rec = null;
    pageError = { code: `mic_${e.kind || "error"}`, message: e.message };
    showAlert(e.message || String(e));
    refreshControls();
    return;
  }
  pageError = null;
  rec.starting = false;
  recTimer = setInterval(refreshControls, 250);
  if (rec.stopWanted !== null) finishRecording(rec.stopWanted);
  refreshControls();
}

function finishRecording(sendIt) {
  if (!rec) return;
  if (rec.starting) {
    rec.stopWanted = sendIt; // released before the mic opened: finish once it has
    return;
  }
  clearInterval(recTimer);
  rec = null;
  const clip = recorder.stop();
  refreshControls();
  if (!sendIt) return;
  if (clip.ms < MIN_CLIP_MS) {
    showAlert("That clip was too short. Hold Record while you speak, or click it once, speak, and click again to send.");
    return;
  }
  chat.sendClip(clip.pcm, clip.ms);
}

const recordBtn = $("record");
recordBtn.addEventListener("pointerdown", (e) => {
  if (e.button !== 0) return;
  recordBtn.setPointerCapture(e.pointerId);
  if (rec && !rec.starting) finishRecording(true); // second click of toggle mode
  else startRecording();
});
recordBtn.addEventListener("pointerup", () => {
  // Push-to-talk release. If the mic is still opening (a permission prompt took the press),
  // nothing was recorded yet: carry on in click-to-toggle mode instead of sending nothing.
  if (rec && !rec.starting && performance.now() - rec.downAt > HOLD_MS) finishRecording(true);
});
recordBtn.addEventListener("click", (e) => {
  if (e.detail !== 0) return; // pointer clicks are handled above; this is Enter/Space
  if (rec) finishRecording(true);
  else startRecording();
});
recordBtn.addEventListener("contextmenu", (e) => e.preventDefault()); // long press on touch
recorder.addEventListener("progress", (e) => recordBtn.style.setProperty("--level", Math.min(1, e.detail.level * 6).toFixed(2)));
recorder.addEventListener("limit", () => finishRecording(true));
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && rec) finishRecording(false);
});

// ------------------------------------------------------------------ new chat, save & share

$("new-chat").addEventListener("click", () => {
  if (rec) finishRecording(false);
  chat.newChat();
  setAttachment(null);
  shareBox.hide();
  showAlert("");
  pageError = null;
  $("input").focus();
});

const shareBox = mountSaveShare({
  button: $("save-share"),
  box: $("share-result"),
  getConversation: () => {
    const messages = chat.transcript();
    const first = messages.find((m) => m.role === "user" && m.text);
    return {
      title: first ? first.text.slice(0, 80) : "Chat",
      preset: presets.preset ? presets.preset.name : undefined,
      messages,
    };
  },
  onError: (text) => showAlert(text),
});

window.addEventListener("pagehide", () => chat.close());

// ------------------------------------------------------------------ read-only shared view

async function showShared(id) {
  document.body.classList.add("shared-view");
  for (const id2 of ["toolbar", "composer", "settings"]) $(id2).hidden = true;
  $("share-banner").hidden = false;
  $("lead").textContent = "A saved conversation, read-only.";
  $("share-new").addEventListener("click", () => { location.href = "/turnbased.html"; });
  try {
    const s = await loadShare(id);
    shared = { ...s, messages: s.messages.map((m, i) => ({ id: `s${i}`, status: "done", ...m })) };
    renderAll(shared.messages);
    const when = new Date(s.created_at);
    $("share-banner-text").textContent = `Shared conversation, saved ${when.toLocaleString()}. Read-only.`;
    document.title = `${s.title || "Shared chat"} · OmniDuplex`;
  } catch (e) {
    pageError = { code: "share_not_found", message: e.message };
    $("share-banner-text").textContent = "Nothing to show.";
    $("empty").textContent = "This link does not lead to a saved conversation.";
    showAlert(e.message);
  }
}

const shareId = new URLSearchParams(location.search).get("share");
if (shareId) {
  showShared(shareId);
} else {
  presets.load();
  refreshControls();
}
