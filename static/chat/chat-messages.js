// The chat as the page shows it: the list of entries (the user's messages and clips, the
// assistant's answers, tool cards), found by the server's item id where they have one. Every
// change is told to `onChange({entry, added | removed})`, which the session turns into its
// "message" event; `transcript()` is what Save & share posts.

let nextId = 1;

export class ChatMessages {
  constructor(onChange) {
    this.onChange = onChange;
    // {id, role: user|assistant|tool, text, at, kind, image, status, note, itemId, clipMs};
    // tool entries: kind "call" ({name, callId, arguments}) or "result" ({name, callId, output, isError});
    // MCP: "call"/"result" with `server` (the server ran it), "list" ({server, tools, error}: the
    // server's listing) and "approval" ({server, name, arguments, itemId}; status pending |
    // approving | declining | approved | declined | failed | expired)
    this.list = [];
    this._byItem = new Map(); // server item id -> entry
  }

  add(fields) {
    const entry = { id: nextId++, at: new Date().toISOString(), image: null, status: "done", note: "", ...fields };
    this.list.push(entry);
    this.onChange({ entry, added: true });
    return entry;
  }

  remove(entry) {
    const i = this.list.indexOf(entry);
    if (i >= 0) this.list.splice(i, 1);
    this.onChange({ entry, removed: true });
  }

  update(entry, patch) {
    Object.assign(entry, patch);
    this.onChange({ entry });
  }

  /** The entry of a server item, if there is one. */
  byItem(itemId) {
    return this._byItem.get(itemId);
  }

  /** From now on the server's item `itemId` is `entry`. */
  track(itemId, entry) {
    this._byItem.set(itemId, entry);
  }

  /** Forget everything (New chat). */
  clear() {
    this.list = [];
    this._byItem.clear();
  }

  /** The conversation as shown, minus turns that never reached the model. */
  transcript() {
    return this.list
      .filter((m) => m.role !== "tool" && m.status !== "failed" && ((m.text && m.text.trim()) || m.image))
      .map((m) => ({ role: m.role, text: m.text || "", at: m.at, ...(m.image ? { image: m.image } : {}) }));
  }
}
