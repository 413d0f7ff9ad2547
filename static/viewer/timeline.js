// Multitrack timeline: lanes of frames, waveforms and labels on one time axis, turn-taking markers
// across all lanes (barge-in red, backchannel amber dashed, resumed reply green), a playhead, and
// click-to-seek. Plain DOM + canvas; long sessions scroll.
const MIN_PX_PER_S = 24;
const MIN_CHIP_PX = 48; // chips nearer than this to the one before take another row
const ROW_PX = 26; // a labels lane's extra row

export class Timeline {
  constructor(root, { durationS, onSeek }) {
    this.root = root;
    this.durationS = Math.max(0.1, durationS);
    this.onSeek = onSeek;
    this.laneNames = [];
    const fit = root.clientWidth || 800;
    this.width = Math.max(fit, Math.ceil(this.durationS * MIN_PX_PER_S));
    this.inner = document.createElement("div");
    this.inner.className = "timeline-inner";
    this.inner.style.width = `${this.width}px`;
    this.axis();
    this.playhead = document.createElement("div");
    this.playhead.className = "playhead";
    root.replaceChildren(this.inner);
    this.inner.append(this.playhead);
    this.inner.addEventListener("click", (e) => {
      const x = e.clientX - this.inner.getBoundingClientRect().left;
      this.onSeek(Math.max(0, Math.min(this.durationS, (x / this.width) * this.durationS)));
    });
  }

  x(t) {
    return (t / this.durationS) * this.width;
  }

  lane(name, cls) {
    const lane = document.createElement("div");
    lane.className = `lane ${cls}`;
    lane.dataset.lane = name;
    const label = document.createElement("span");
    label.className = "lane-label";
    label.textContent = name;
    lane.append(label);
    this.inner.insertBefore(lane, this.playhead);
    this.laneNames.push(name);
    return lane;
  }

  axis() {
    const lane = document.createElement("div");
    lane.className = "lane axis";
    const step = this.durationS > 300 ? 60 : this.durationS > 60 ? 10 : this.durationS > 15 ? 5 : 1;
    for (let t = 0; t <= this.durationS; t += step) {
      const tick = document.createElement("span");
      tick.className = "tick";
      tick.style.left = `${this.x(t)}px`;
      tick.textContent = `${Math.floor(t / 60)}:${String(Math.floor(t % 60)).padStart(2, "0")}`;
      lane.append(tick);
    }
    this.inner.append(lane);
  }

  frames(list) {
    if (!list.length) return;
    const lane = this.lane("Camera", "frames");
    for (const f of list) {
      const img = document.createElement("img");
      img.loading = "lazy";
      img.src = f.src;
      img.alt = `frame at ${f.t.toFixed(1)} s`;
      img.style.left = `${this.x(f.t)}px`;
      lane.append(img);
    }
  }

  waveform(name, samples, rate, cls) {
    const lane = this.lane(name, `wave ${cls}`);
    const canvas = document.createElement("canvas");
    const h = 48;
    canvas.width = this.width;
    canvas.height = h;
    canvas.style.width = `${this.width}px`;
    const g = canvas.getContext("2d");
    g.fillStyle = getComputedStyle(document.documentElement).getPropertyValue(cls === "user" ? "--accent" : "--accent-2") || "#4f8cff";
    const per = Math.max(1, Math.floor(samples.length / this.width));
    for (let x = 0; x < this.width; x++) {
      let peak = 0;
      const end = Math.min(samples.length, (x + 1) * per);
      for (let i = x * per; i < end; i++) {
        const v = Math.abs(samples[i]);
        if (v > peak) peak = v;
      }
      const bar = Math.max(1, Math.min(1, peak * 2.5) * (h - 4));
      if (peak > 0.002) g.fillRect(x, (h - bar) / 2, 1, bar);
    }
    lane.append(canvas);
  }

  labels(name, list, cls = "") {
    const lane = this.lane(name, `labels ${cls}`);
    const sorted = list.slice().sort((a, b) => a.t - b.t);
    // Chips closer than MIN_CHIP_PX (a tool call right after its approval) go on another row of
    // the lane, so none is cut to nothing or drawn over another.
    const rows = []; // per row: the indexes of its chips
    const rowOf = sorted.map((l, i) => {
      const left = this.x(l.t);
      let r = rows.findIndex((row) => left - this.x(sorted[row[row.length - 1]].t) >= MIN_CHIP_PX);
      if (r < 0) r = rows.push([]) - 1;
      rows[r].push(i);
      return r;
    });
    if (rows.length > 1) lane.style.height = `${34 + (rows.length - 1) * ROW_PX}px`;
    sorted.forEach((l, i) => {
      const chip = document.createElement("button");
      chip.type = "button";
      chip.className = `chip ${l.kind}`;
      const left = this.x(l.t);
      chip.style.left = `${left}px`;
      if (rowOf[i]) chip.style.top = `${5 + rowOf[i] * ROW_PX}px`;
      // A chip never runs into the next one in its row: it is cut (ellipsis) where that begins.
      const row = rows[rowOf[i]];
      const after = row[row.indexOf(i) + 1];
      const next = after !== undefined ? this.x(sorted[after].t) : this.width;
      chip.style.maxWidth = `${Math.max(14, Math.min(220, next - left - 4))}px`;
      chip.textContent = l.text;
      chip.title = l.title || l.text;
      chip.addEventListener("click", (e) => {
        e.stopPropagation();
        this.onSeek(l.t);
      });
      lane.append(chip);
    });
  }

  // Marks across all lanes: numbers (seconds) are barge-ins; else {t, kind, title} with kind
  // "barge" | "backchannel" | "resumed", or a tool's: "tool-call" | "tool-failed" | "tool-list" |
  // "tool-list-failed" | "tool-approval" (the tooltip says which).
  markers(list) {
    for (const item of list) {
      const { t, kind = "barge", title } = typeof item === "number" ? { t: item } : item;
      const m = document.createElement("div");
      m.className = kind === "barge" ? "barge-marker" : `turn-marker ${kind}`;
      m.dataset.kind = kind;
      m.style.left = `${this.x(t)}px`;
      m.title = title || `barge-in at ${t.toFixed(1)} s`;
      this.inner.append(m);
    }
  }

  setPlayhead(t) {
    this.playhead.style.left = `${this.x(t || 0)}px`;
  }
}
