// Levels panel: LUFS meters for the mic (as sent) and the assistant (as played), and the
// mixer's two sliders. Works before a session exists (sliders only; meters read "silent").
import { formatLufs, lufsFraction } from "../lib/lufs.js";
import { savedMixer, saveMixer } from "../lib/mixer-controller.js";

const CHANNELS = [
  ["mic", "Microphone", 2],
  ["output", "Assistant volume", 1],
];

export class LevelMeters {
  constructor(root, getSession) {
    this.getSession = getSession;
    this.rows = {};
    root.classList.add("levels");
    const saved = savedMixer();
    for (const [key, label, max] of CHANNELS) {
      const row = document.createElement("div");
      row.className = "level-row";
      row.innerHTML = `
        <label for="gain-${key}">${label}</label>
        <div class="meter" role="meter" aria-label="${label} loudness" aria-valuemin="-60" aria-valuemax="0">
          <div class="meter-fill"></div></div>
        <span class="meter-text" data-lufs="${key}">silent</span>
        <input id="gain-${key}" type="range" min="0" max="${max}" step="0.05" value="${saved[key]}">`;
      root.appendChild(row);
      const input = row.querySelector("input");
      input.addEventListener("input", () => {
        const s = this.getSession();
        if (s && s.mixer) s.setLevel(key, input.value);
        else saveMixer(key, Number(input.value));
      });
      this.rows[key] = { fill: row.querySelector(".meter-fill"), text: row.querySelector(".meter-text"),
                         meter: row.querySelector(".meter") };
    }
    this.values = { mic: -Infinity, output: -Infinity };
    this._timer = setInterval(() => this.update(), 100);
  }

  update() {
    const s = this.getSession();
    const levels = s && s.micMeter ? s.levels : { mic: -Infinity, output: -Infinity };
    this.values = levels;
    for (const key of Object.keys(this.rows)) {
      const { fill, text, meter } = this.rows[key];
      fill.style.width = `${(lufsFraction(levels[key]) * 100).toFixed(1)}%`;
      text.textContent = formatLufs(levels[key]);
      meter.setAttribute("aria-valuenow", Number.isFinite(levels[key]) ? levels[key].toFixed(0) : "-60");
    }
  }
}
