// The admin page: polls /api/admin/overview every second and renders workers, sessions, queue,
// apps, ETA and charts; buttons call the admin API. Everything from the server is written with
// textContent (worker URLs and errors are not ours to trust).
import { api } from "/static/admin/api.js";
import { lineChart } from "/static/admin/charts.js";

const $ = (id) => document.getElementById(id);
const state = { overview: null, error: null, polls: 0 };
window.admin = state; // for tests and the curious

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "onclick") e.addEventListener("click", v);
    else if (v !== undefined && v !== null) e[k] = v;
  }
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

function showError(message) {
  const a = $("alert");
  a.textContent = message;
  a.hidden = !message;
}

async function act(label, fn) {
  try {
    showError("");
    await fn();
    await refresh();
  } catch (err) {
    if (err.status !== 401) showError(`${label}: ${err.message}`);
  }
}

function secs(s) {
  if (s === null || s === undefined) return "–";
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// ------------------------------------------------------------------ workers

function workerCard(w) {
  const lp = w.load_progress;
  const loading = w.state === "LOADING" && lp;
  const sessions = w.sessions.length
    ? w.sessions.map((s) => el("div", {},
        el("span", { className: "mono", textContent: (s.session_id || s.ticket).slice(0, 22) }),
        ` · ${s.app} · ${secs(s.running_s)} `,
        s.session_id ? el("button", { type: "button", textContent: "End", className: "danger",
          dataset: { action: "end", session: s.session_id },
          onclick: () => endSession(s.session_id) }) : null))
    : [el("span", { className: "muted", textContent: "none" })];
  const actions = el("div", { className: "actions" });
  const button = (action, text, cls = "") => el("button", {
    type: "button", textContent: text, className: cls, dataset: { action, worker: w.id },
    onclick: () => workerAction(w.id, action),
  });
  if (w.health === "disabled" || w.health === "dead") actions.append(button("enable", "Enable"));
  else actions.append(button("disable", "Drain"));
  if (w.health !== "dead") actions.append(button("dead", "Mark dead", "danger"));
  actions.append(button("remove", "Remove", "danger"));
  return el("article", { className: "worker", dataset: { worker: w.id, health: w.health } },
    el("div", { className: "worker-title" },
      el("strong", { textContent: w.id }),
      el("span", { className: "badge", textContent: w.health, dataset: { health: w.health } })),
    el("div", { className: "muted mono", textContent: w.url }),
    el("dl", {},
      el("dt", { textContent: "State" }), el("dd", { textContent: w.state || "not reported yet", className: "w-state" }),
      el("dt", { textContent: "Load" }), el("dd", {},
        loading ? `${lp.stage} ${Math.round(lp.fraction * 100)}%` : (w.state ? "loaded" : "–"),
        loading ? el("div", { className: "progress" }, el("div", { style: `width:${Math.round(lp.fraction * 100)}%` })) : null),
      el("dt", { textContent: "Slots" }), el("dd", { textContent: `${w.busy} / ${w.slots} busy` }),
      el("dt", { textContent: "Session" }), el("dd", {}, ...sessions),
      el("dt", { textContent: "Uptime" }), el("dd", { textContent: secs(w.uptime_s) }),
      el("dt", { textContent: "Failures" }), el("dd", { textContent:
        `${w.failures_total}${w.last_error ? ` · last: ${w.last_error}` : ""}` }),
      el("dt", { textContent: "Can do" }), el("dd", { textContent: w.capabilities.join(", ") || "–" })),
    actions);
}

async function workerAction(id, action) {
  if (action === "remove") {
    if (!confirm(`Remove worker ${id}? Running sessions finish; it gets no new ones.`)) return;
    return act("Remove", () => api(`/api/admin/workers/${encodeURIComponent(id)}`, { method: "DELETE" }));
  }
  if (action === "dead" && !confirm(`Mark ${id} dead? Probes will not bring it back; Enable will.`)) return;
  return act(action, () => api(`/api/admin/workers/${encodeURIComponent(id)}/${action}`, { method: "POST" }));
}

function endSession(id) {
  return act("End session", () => api(`/api/admin/sessions/${encodeURIComponent(id)}/end`, { method: "POST" }));
}

// ------------------------------------------------------------------ tables

// Several gateways (Redis): each session and queue entry names the gateway that holds it.
const via = (client, gateway) => (gateway ? `${client} via ${gateway}` : client);

function renderLive(live) {
  const body = $("live").tBodies[0];
  body.replaceChildren(...live.map((s) => el("tr", { dataset: { ticket: s.ticket } },
    el("td", { className: "mono", textContent: (s.session_id || s.ticket).slice(0, 26) }),
    el("td", { textContent: s.app }),
    el("td", { textContent: s.state }),
    el("td", { textContent: s.worker_id || "–" }),
    el("td", { textContent: secs(s.age_s) }),
    el("td", { textContent: via(s.client, s.gateway) }),
    el("td", {}, el("button", { type: "button", className: "danger", textContent: "End",
      dataset: { action: "end", session: s.session_id || s.ticket },
      onclick: () => endSession(s.session_id || s.ticket) })))));
  $("live-empty").hidden = live.length > 0;
}

function renderQueue(queue) {
  const body = $("queue").tBodies[0];
  body.replaceChildren(...queue.map((q) => el("tr", {},
    el("td", { textContent: String(q.position) }),
    el("td", { className: "mono", textContent: q.ticket }),
    el("td", { textContent: q.app }),
    el("td", { textContent: q.requirements.join(", ") || "–" }),
    el("td", { textContent: secs(q.waited_s) }),
    el("td", { textContent: via(q.client || "–", q.gateway) }),
    el("td", {}, el("button", { type: "button", textContent: "Cancel", dataset: { action: "cancel", ticket: q.ticket },
      onclick: () => act("Cancel", () => api(`/api/admin/queue/${encodeURIComponent(q.ticket)}`, { method: "DELETE" })) })))));
  $("queue-empty").hidden = queue.length > 0;
}

function renderApps(apps) {
  const box = $("apps");
  if (box.dataset.rendered === JSON.stringify(apps)) return;
  box.dataset.rendered = JSON.stringify(apps);
  box.replaceChildren(...apps.map((a) => {
    const input = el("input", { type: "checkbox", checked: a.enabled, dataset: { app: a.id } });
    input.addEventListener("change", () => act("App", () =>
      api(`/api/admin/apps/${a.id}`, { method: "PUT", json: { enabled: input.checked } })));
    return el("label", { className: "app-row" }, input, a.name);
  }));
}

let etaTouched = false;
function renderEta(eta) {
  $("eta-now").textContent = `Learned average session: ${secs(eta.learned_avg_s)}` +
    (eta.session_s ? ` · ETAs use a fixed ${secs(eta.session_s)}` : " · ETAs use the learned average");
  if (!etaTouched) {
    $("eta-auto").checked = eta.session_s === null;
    $("eta-s").value = eta.session_s ?? Math.round(eta.learned_avg_s);
    $("eta-s").disabled = eta.session_s === null;
  }
}

function renderCharts(series) {
  lineChart($("chart-queue"), [series.map((p) => p.queue)]);
  lineChart($("chart-active"), [series.map((p) => p.active)]);
  lineChart($("chart-v2v"), [series.map((p) => p.v2v_p50), series.map((p) => p.v2v_p90)], { minMax: 100 });
}

// The last hour's p50/p90 per stage of a turn (gateway/metrics.py StageWindow).
const STAGE_NAMES = { end_of_turn: "End of turn", asr: "ASR", llm: "LLM", tts: "TTS" };
const ms = (v) => (typeof v === "number" ? String(Math.round(v)) : "–");

function renderStages(stages) {
  $("stages").tBodies[0].replaceChildren(...(stages || []).map((s) => el("tr", { dataset: { stage: s.stage } },
    el("td", { textContent: STAGE_NAMES[s.stage] || s.stage }),
    el("td", { className: "num", textContent: ms(s.p50_ms) }),
    el("td", { className: "num", textContent: ms(s.p90_ms) }),
    el("td", { className: "num", textContent: String(s.count) }))));
}

function render(o) {
  const t = o.totals;
  const summary = $("summary");
  summary.dataset.state = t.healthy === 0 ? "thinking" : t.queue_length > 0 ? "queued" : "listening";
  $("summary-text").textContent = `${t.healthy} of ${t.workers} workers healthy · ${t.busy} of ${t.slots} slots busy · ` +
    `${t.queue_length} waiting (capacity ${t.capacity}) · ${o.live.length} open sessions`;
  $("workers").replaceChildren(...o.workers.map(workerCard));
  renderLive(o.live);
  renderQueue(o.queue);
  renderApps(o.apps);
  renderEta(o.eta);
  renderCharts(o.series);
  renderStages(o.stages);
}

async function refresh() {
  try {
    const o = await api("/api/admin/overview");
    state.overview = o;
    state.polls += 1;
    state.error = null;
    render(o);
  } catch (err) {
    state.error = err.message;
    if (err.status !== 401) {
      $("summary").dataset.state = "error";
      $("summary-text").textContent = `The gateway is not answering (${err.message}); retrying…`;
    }
  }
}

// ------------------------------------------------------------------ forms

$("add-worker").addEventListener("submit", (e) => {
  e.preventDefault();
  act("Add worker", async () => {
    await api("/api/admin/workers", { method: "POST", json: { url: $("add-url").value.trim(),
      slots: Number($("add-slots").value) || 1 } });
    $("add-url").value = "";
  });
});

$("eta-auto").addEventListener("change", () => { etaTouched = true; $("eta-s").disabled = $("eta-auto").checked; });
$("eta-s").addEventListener("input", () => { etaTouched = true; });
$("eta-form").addEventListener("submit", (e) => {
  e.preventDefault();
  act("ETA", async () => {
    const session_s = $("eta-auto").checked ? null : Number($("eta-s").value);
    await api("/api/admin/eta", { method: "PUT", json: { session_s } });
    etaTouched = false;
  });
});

async function loadPresets() {
  const p = await api("/api/admin/presets");
  $("presets-text").value = JSON.stringify(p.presets, null, 1);
  $("presets-source").textContent = p.source === "file"
    ? "From data/presets.json (edited here or by hand)." : "The built-in presets (no data/presets.json).";
}
$("presets-save").addEventListener("click", () => act("Presets", async () => {
  let parsed;
  try { parsed = JSON.parse($("presets-text").value); } catch (err) { throw new Error(`not valid JSON: ${err.message}`); }
  await api("/api/admin/presets", { method: "PUT", json: { presets: parsed } });
  await loadPresets();
}));
$("presets-reset").addEventListener("click", () => act("Presets", async () => {
  await api("/api/admin/presets", { method: "DELETE" });
  await loadPresets();
}));

async function loadVoices() {
  const v = await api("/api/admin/voices");
  $("voice-form").hidden = !v.supported;
  $("voices-note").textContent = v.supported
    ? `Workers with reference voices: ${v.workers.join(", ")}.`
    : "This backend has no reference voices: it speaks with its one built-in voice.";
  $("voices").replaceChildren(...v.voices.map((name) => el("li", {}, name, " ",
    el("button", { type: "button", className: "danger", textContent: "Delete",
      onclick: () => act("Voice", async () => { await api(`/api/admin/voices/${encodeURIComponent(name)}`, { method: "DELETE" }); await loadVoices(); }) }))));
}
$("voice-form").addEventListener("submit", (e) => {
  e.preventDefault();
  act("Voice", async () => {
    const form = new FormData();
    form.append("name", $("voice-name").value);
    form.append("file", $("voice-file").files[0]);
    await api("/api/admin/voices", { method: "POST", body: form });
    await loadVoices();
  });
});

refresh();
setInterval(refresh, 1000);
loadPresets().catch((err) => showError(`Presets: ${err.message}`));
loadVoices().catch((err) => showError(`Voices: ${err.message}`));
