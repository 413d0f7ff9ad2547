// Small hand-drawn line charts on canvas: no library, redrawn on every poll.
const COLORS = ["#4f8cff", "#f0a020"];

export function lineChart(canvas, seriesList, { minMax = 1, unit = "" } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
  if (canvas.width !== Math.round(w * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr); }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const values = seriesList.flat().filter((v) => typeof v === "number");
  const max = Math.max(minMax, ...values) * 1.1;
  const left = 34, bottom = h - 14, top = 6, right = w - 4;
  ctx.strokeStyle = "#262b36"; ctx.fillStyle = "#9aa3b2"; ctx.font = "10px system-ui"; ctx.lineWidth = 1;
  for (const frac of [0, 0.5, 1]) {
    const y = bottom - frac * (bottom - top);
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
    ctx.fillText(fmt(max / 1.1 * frac) + unit, 2, y + 3);
  }
  seriesList.forEach((series, k) => {
    const n = series.length;
    if (n === 0) return;
    ctx.strokeStyle = COLORS[k % COLORS.length]; ctx.lineWidth = 2; ctx.beginPath();
    let pen = false;
    series.forEach((v, i) => {
      if (typeof v !== "number") { pen = false; return; }
      const x = left + (n === 1 ? right - left : (i / (n - 1)) * (right - left));
      const y = bottom - (v / max) * (bottom - top);
      if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      pen = true;
    });
    ctx.stroke();
  });
  const last = seriesList.map((s) => s.length ? s[s.length - 1] : null);
  ctx.fillStyle = "#e7e9ee";
  ctx.fillText(last.map((v) => (typeof v === "number" ? fmt(v) : "–")).join(" / "), right - 70, top + 10);
}

function fmt(v) { return v >= 100 ? Math.round(v).toString() : (Math.round(v * 10) / 10).toString(); }
