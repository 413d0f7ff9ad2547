// Each turn's waterfall: where its time went, stage after stage from the end of the user's voice
// (end of turn -> ASR -> LLM -> TTS), from the `stages` of the recording's turn_metrics (the
// worker's session.metrics). One time scale for all turns, so bars compare across turns; a stage
// that did not happen (a typed turn has no end of turn or ASR) has no segment. The network to the
// client is not measured server-side, so it is not drawn. Plain DOM; widths are set through CSSOM
// (allowed by the CSP, unlike style attributes in markup).
export const STAGES = [
  { key: "end_of_turn", name: "End of turn", title: "your voice's end until the turn was decided" },
  { key: "asr", name: "ASR", title: "recognition: the turn decided until its transcript" },
  { key: "llm", name: "LLM", title: "the reply's start until its first words" },
  { key: "tts", name: "TTS", title: "the first words until the first audio" },
];

const num = (v) => typeof v === "number" && Number.isFinite(v) && v >= 0;

/** The stages of one turn_metrics event's metrics, in order, or null when it has none. */
export function turnStages(metrics) {
  const s = (metrics && metrics.stages) || {};
  const out = {};
  let any = false;
  for (const { key } of STAGES) {
    const v = s[`${key}_ms`];
    out[key] = num(v) ? v : null;
    any = any || num(v);
  }
  return any ? out : null;
}

function node(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Draws the waterfalls of `turns` (turn_metrics events, numbered as the turns table numbers
 * them) into `box`; returns [{response_id, turn, stages, interrupted, total_ms}] for what it drew. */
export function renderWaterfalls(box, turns, clock) {
  const rows = [];
  turns.forEach((e, i) => {
    const m = e.metrics || {};
    const stages = turnStages(m);
    if (!stages) return;
    const total = STAGES.reduce((a, { key }) => a + (stages[key] || 0), 0);
    rows.push({ response_id: m.response_id || null, turn: i + 1, at: e.t, stages, total_ms: total,
      interrupted: m.interrupted === true });
  });
  if (!rows.length) {
    box.replaceChildren(node("p", "muted", "No stage times were recorded for these turns."));
    return rows;
  }
  const scale = Math.max(1, ...rows.map((r) => r.total_ms));
  const list = node("div", "waterfalls");
  for (const r of rows) {
    const row = node("div", `wf-row${r.interrupted ? " interrupted" : ""}`);
    row.dataset.responseId = r.response_id || "";
    row.dataset.turn = String(r.turn);
    const head = node("div", "wf-head");
    head.append(node("span", "wf-turn", `#${r.turn}`), node("span", "wf-at", clock(r.at / 1000)),
      node("span", "wf-total", `${Math.round(r.total_ms)} ms`));
    if (r.interrupted) {
      const cut = node("span", "wf-interrupted", "interrupted");
      cut.title = "The user spoke over this reply: it was cut (a barge-in)";
      head.append(cut);
    }
    const bar = node("div", "wf-bar");
    bar.title = STAGES.filter(({ key }) => r.stages[key] !== null)
      .map(({ key, name }) => `${name} ${Math.round(r.stages[key])} ms`).join(" → ");
    for (const { key, name, title } of STAGES) {
      const v = r.stages[key];
      if (v === null) continue;
      const seg = node("div", `wf-seg ${key}`);
      seg.dataset.stage = key;
      seg.dataset.ms = String(v);
      seg.style.width = `${(v / scale) * 100}%`;
      seg.title = `${name}: ${Math.round(v)} ms (${title})`;
      seg.append(node("span", "wf-label", `${Math.round(v)}`));
      bar.append(seg);
    }
    const track = node("div", "wf-track");
    track.append(bar);
    row.append(head, track);
    list.append(row);
  }
  const legend = node("p", "muted wf-legend");
  for (const { key, name, title } of STAGES) {
    const item = node("span", "wf-key");
    item.title = title;
    item.append(node("span", `wf-swatch ${key}`), name);
    legend.append(item);
  }
  const mark = node("span", "wf-key");
  mark.append(node("span", "wf-swatch interrupted"), "Interrupted");
  legend.append(mark);
  const note = node("p", "muted wf-note",
    "Milliseconds, one scale for all turns, from the end of your voice (a typed turn starts at the LLM). " +
    "The network to your device is not measured.");
  box.replaceChildren(list, legend, note);
  fitLabels(list);
  if (typeof ResizeObserver === "function") new ResizeObserver(() => fitLabels(list)).observe(list);
  return rows;
}

// A segment too narrow for its number keeps it in its tooltip only (no clipped digits).
function fitLabels(list) {
  for (const label of list.querySelectorAll(".wf-label")) {
    label.classList.remove("wf-clipped");
    if (label.offsetWidth > label.parentElement.clientWidth) label.classList.add("wf-clipped");
  }
}
