// Included by every page as a classic script (before the page's modules):
//   <script src="/static/shared/app-gate.js" data-app="chat"></script>
// 1. Tags this page's realtime sessions with its app id (so the operator's app toggles apply),
//    and, when the service needs an API key, adds the browser key subprotocol
//    `openai-insecure-api-key.<key>` from this browser's storage.
// 2. Asks /api/apps whether this app is on; a disabled app's page says so and its controls stop.
//    On the home page (data-app="home") disabled apps' cards are marked instead.
(() => {
  const script = document.currentScript;
  const appId = (script && script.dataset.app) || "api";
  const KEY_STORE = "omniduplex.apiKey";
  const NativeWebSocket = window.WebSocket;

  function storedKey() {
    try { return localStorage.getItem(KEY_STORE) || ""; } catch { return ""; }
  }

  class GatedWebSocket extends NativeWebSocket {
    constructor(url, protocols) {
      let target = url;
      let protos = protocols === undefined ? [] : [].concat(protocols);
      try {
        const u = new URL(url, location.href);
        if (u.host === location.host && (u.pathname === "/v1/realtime" || u.pathname === "/v1/live/sessions")) {
          if (!u.searchParams.has("app") && appId !== "home") u.searchParams.set("app", appId);
          const key = storedKey();
          if (key && !protos.some((p) => p.startsWith("openai-insecure-api-key."))) {
            protos = ["realtime", ...protos.filter((p) => p !== "realtime"), `openai-insecure-api-key.${key}`];
          }
          target = u.toString();
        }
      } catch { /* not a URL we know: leave it alone */ }
      super(target, protos.length ? protos : undefined);
    }
  }
  window.WebSocket = GatedWebSocket;

  const KEY_PROMPT = "This service needs an API key for conversations. Enter yours (kept only in this browser):";

  function banner(text, withKeyField) {
    const box = document.createElement("div");
    box.className = "alert";
    box.setAttribute("role", "alert");
    box.dataset.gate = appId;
    box.textContent = text;
    if (withKeyField) {
      const form = document.createElement("form");
      form.className = "controls";
      const input = document.createElement("input");
      input.type = "password";
      input.placeholder = "API key";
      input.setAttribute("aria-label", "API key");
      const save = document.createElement("button");
      save.type = "submit";
      save.textContent = "Save key";
      form.append(input, save);
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        try { localStorage.setItem(KEY_STORE, input.value.trim()); } catch { /* private mode */ }
        location.reload();
      });
      box.append(form);
    }
    const main = document.querySelector("main") || document.body;
    const h1 = main.querySelector("h1");
    if (h1) h1.after(box); else main.prepend(box);
    return box;
  }

  async function check() {
    let info;
    try {
      const r = await fetch("/api/apps", { cache: "no-store" });
      if (!r.ok) return;
      info = await r.json();
    } catch { return; }
    window.omniApps = info;
    if (appId === "home") {
      for (const app of info.apps) {
        if (app.enabled || !app.page) continue;
        const card = document.querySelector(`a.card[href="${app.page}"]`);
        if (!card) continue;
        card.setAttribute("aria-disabled", "true");
        card.dataset.disabled = "true";
        card.style.opacity = "0.5";
        const note = document.createElement("p");
        note.className = "disabled-note";
        note.textContent = "Disabled by the operator.";
        card.append(note);
      }
      return;
    }
    const app = info.apps.find((a) => a.id === appId);
    if (app && !app.enabled) {
      banner(`${app.name} is disabled by the operator. Please try again later.`, false);
      document.body.dataset.appDisabled = "true";
      for (const b of document.querySelectorAll("main button, main input, main textarea, main select")) b.disabled = true;
      return;
    }
    if (info.api_key_required && !storedKey()) askKey();
  }

  // The key box; also for a page whose call was refused for its key (a stored key that is wrong).
  function askKey() {
    if (!document.querySelector(`[data-gate="${appId}"] input[type=password]`)) banner(KEY_PROMPT, true);
  }
  window.omniGate = Object.freeze({ askKey });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", check);
  else check();
})();
