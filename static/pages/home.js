// The entry module of / (an inline script would need 'unsafe-inline' in the CSP).
import { renderNav } from "/static/shared/app-nav.js";
import { clearRecentSessions, recentSessions } from "/static/duplex/lib/recent-sessions.js";
renderNav();

function renderRecent() {
  const list = recentSessions();
  const ul = document.getElementById("recent");
  ul.replaceChildren(...list.map((e) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = e.href || "/";
    a.textContent = e.app || "Session";
    const when = document.createElement("div");
    when.className = "when";
    const mins = Math.floor((e.durationS || 0) / 60), secs = (e.durationS || 0) % 60;
    when.textContent = `${new Date(e.startedAt).toLocaleString()} · ${mins ? `${mins} min ` : ""}${secs} s · ` +
      `${e.turns || 0} turn${e.turns === 1 ? "" : "s"}`;
    const preview = document.createElement("div");
    preview.textContent = e.preview ? `“${e.preview}”` : "";
    li.append(a);
    if (e.link) {
      const replay = document.createElement("a");
      replay.href = e.link;
      replay.className = "replay-link";
      replay.textContent = "Watch the replay";
      li.append(" · ", replay);
    }
    li.append(when, preview);
    return li;
  }));
  document.getElementById("recent-empty").hidden = list.length > 0;
  document.getElementById("recent-clear").hidden = list.length === 0;
}
document.getElementById("recent-clear").addEventListener("click", () => { clearRecentSessions(); renderRecent(); });
renderRecent();

// Live service status from the gateway's /health, refreshed every 3 s.
const live = document.getElementById("live");
const liveText = document.getElementById("live-text");
async function refresh() {
  try {
    const r = await fetch("/health", { cache: "no-store" });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const h = await r.json();
    const free = Math.max(0, h.slots_total - h.slots_busy);
    const ready = h.workers_healthy;
    live.dataset.state = ready === 0 ? "thinking" : free > 0 ? "listening" : "queued";
    liveText.textContent = ready === 0
      ? `No worker ready yet (${h.workers_total} starting)`
      : `${ready} worker${ready === 1 ? "" : "s"} ready · ${h.slots_busy} busy · ` +
        `${h.queue_length} waiting in the queue`;
  } catch (err) {
    live.dataset.state = "error";
    liveText.textContent = "The service is not reachable right now; retrying…";
  }
}
refresh();
setInterval(refresh, 3000);
