// Preset picker for any page: fills a <select> from GET /api/presets and reports the chosen
// preset ({id, name, instructions, voice, temperature, max_output_tokens, output_audio}).
// The last choice is remembered per browser.

// Used only if the gateway cannot be asked: the page still works with sensible settings.
const FALLBACK = [{
  id: "assistant", name: "Helpful assistant", instructions: "", voice: "joe",
  temperature: 0.3, max_output_tokens: 160, output_audio: true,
}];

export async function fetchPresets() {
  const r = await fetch("/api/presets", { cache: "no-store" });
  if (!r.ok) throw new Error(`the server answered HTTP ${r.status}`);
  const body = await r.json();
  if (!body || !Array.isArray(body.presets) || !body.presets.length) throw new Error("no presets in the answer");
  return body.presets;
}

export class PresetSelector extends EventTarget {
  /** `select`: the <select> to fill. Emits "change" with detail {preset}. */
  constructor(select, { storageKey = "omniduplex.preset" } = {}) {
    super();
    this.select = select;
    this.storageKey = storageKey;
    this.presets = [];
    select.addEventListener("change", () => {
      this._remember(select.value);
      this._emit();
    });
  }

  get preset() {
    return this.presets.find((p) => p.id === this.select.value) || this.presets[0] || null;
  }

  /** Fetch and fill; resolves with the selected preset. A failed fetch leaves a usable default. */
  async load() {
    let error = null;
    try {
      this.presets = await fetchPresets();
    } catch (e) {
      error = e;
      this.presets = FALLBACK;
    }
    this.select.replaceChildren(...this.presets.map((p) => {
      const o = document.createElement("option");
      o.value = p.id;
      o.textContent = p.name;
      return o;
    }));
    const stored = this._stored();
    if (stored && this.presets.some((p) => p.id === stored)) this.select.value = stored;
    if (error) this.dispatchEvent(new CustomEvent("error", { detail: { message: `Presets could not be loaded (${error.message}); using defaults.` } }));
    this._emit();
    return this.preset;
  }

  _emit() {
    this.dispatchEvent(new CustomEvent("change", { detail: { preset: this.preset } }));
  }

  _stored() {
    try {
      return localStorage.getItem(this.storageKey);
    } catch {
      return null; // storage blocked (private mode, policies): just no memory
    }
  }

  _remember(id) {
    try {
      localStorage.setItem(this.storageKey, id);
    } catch {
      /* see _stored */
    }
  }
}
