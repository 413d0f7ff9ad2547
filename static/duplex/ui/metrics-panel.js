// Metrics panel: last turn's latencies (from session.metrics) and live playback health.
const FIELDS = [
  ["v2v", "Voice-to-voice", "ms"],
  ["ttfp", "First audio packet", "ms"],
  ["buffered", "Buffered ahead", "ms"],
  ["played", "Played", "s"],
  ["gaps", "Gaps", ""],
];

export class MetricsPanel {
  constructor(root) {
    this.root = root;
    this.cells = {};
    root.classList.add("metrics");
    for (const [key, label, unit] of FIELDS) {
      const box = document.createElement("div");
      box.className = "metric";
      box.innerHTML = `<span class="metric-value" data-metric="${key}">–</span><span class="metric-unit">${unit}</span><span class="metric-label">${label}</span>`;
      root.appendChild(box);
      this.cells[key] = box.querySelector(".metric-value");
    }
  }

  _put(key, value) {
    this.cells[key].textContent = value;
  }

  /** `m` is the session.metrics payload (v2v_ms, ttfp_ms, ...). */
  setTurn(m) {
    const fmt = (v) => (typeof v === "number" ? Math.round(v).toString() : "–");
    this._put("v2v", fmt(m && m.v2v_ms));
    this._put("ttfp", fmt(m && m.ttfp_ms));
  }

  setPlayback({ bufferedMs, playedMs, gaps }) {
    this._put("buffered", Math.round(bufferedMs).toString());
    this._put("played", (playedMs / 1000).toFixed(1));
    this._put("gaps", String(gaps));
  }
}
