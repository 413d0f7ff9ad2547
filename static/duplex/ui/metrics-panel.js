// Metrics panel: the queue while waiting (position and a live countdown), the last turn's
// latencies (from session.metrics), the last barge-in's stop time (measured by the page's
// player) and live playback health (buffered audio ahead, gaps, audio-vs-wall-clock drift).
const FIELDS = [
  ["queue", "Queue position", ""],
  ["eta", "Expected wait", "s"],
  ["v2v", "Voice-to-voice", "ms"],
  ["ttfp", "First audio packet", "ms"],
  ["stop", "Barge-in stop", "ms"],
  ["buffered", "Buffered ahead", "ms"],
  ["played", "Played", "s"],
  ["gaps", "Gaps", ""],
  ["drift", "Clock drift", "ms"],
];

export class MetricsPanel {
  constructor(root) {
    this.root = root;
    this.cells = {};
    this.boxes = {};
    root.classList.add("metrics");
    for (const [key, label, unit] of FIELDS) {
      const box = document.createElement("div");
      box.className = "metric";
      box.innerHTML = `<span class="metric-value" data-metric="${key}">–</span><span class="metric-unit">${unit}</span><span class="metric-label">${label}</span>`;
      root.appendChild(box);
      this.cells[key] = box.querySelector(".metric-value");
      this.boxes[key] = box;
    }
    this._queue = null;
    this._tick = setInterval(() => this._renderQueue(), 250);
    this.setQueue(null);
  }

  _put(key, value) {
    this.cells[key].textContent = value;
  }

  /** `q` is {position, queue_length, eta_s, at (performance.now())} or null when not queued. */
  setQueue(q) {
    this._queue = q;
    this.boxes.queue.hidden = !q;
    this.boxes.eta.hidden = !q;
    this._renderQueue();
  }

  _renderQueue() {
    const q = this._queue;
    if (!q) return;
    this._put("queue", `${q.position} / ${q.queue_length}`);
    if (typeof q.eta_s !== "number") return this._put("eta", "–");
    // Count down between the server's updates; never below zero while still waiting.
    const left = Math.max(0, q.eta_s - (performance.now() - q.at) / 1000);
    this._put("eta", Math.ceil(left).toString());
  }

  /** `m` is the session.metrics payload (v2v_ms, ttfp_ms, ...). */
  setTurn(m) {
    this._put("v2v", fmt(m && m.v2v_ms));
    this._put("ttfp", fmt(m && m.ttfp_ms));
  }

  setBargeIn(b) {
    this._put("stop", fmt(b && b.stopMs));
  }

  setPlayback({ bufferedMs, playedMs, gaps, driftMs = 0 }) {
    this._put("buffered", Math.round(bufferedMs).toString());
    this._put("played", (playedMs / 1000).toFixed(1));
    this._put("gaps", String(gaps));
    this._put("drift", Math.round(driftMs).toString());
  }
}

function fmt(v) {
  return typeof v === "number" ? Math.round(v).toString() : "–";
}
