// Recent sessions of this browser (localStorage, newest first): what the home page lists.
// Kept on the user's machine only; the server lists sessions to admins alone.

const KEY = "omniduplex.recent";
const MAX = 20;

export function recentSessions() {
  try {
    const list = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

/** entry: {app, href, startedAt (ms epoch), durationS, turns, preview, link?} */
export function rememberSession(entry) {
  const list = recentSessions().filter((e) => e.startedAt !== entry.startedAt);
  list.unshift(entry);
  try {
    localStorage.setItem(KEY, JSON.stringify(list.slice(0, MAX)));
  } catch { /* storage full or disabled: nothing to keep */ }
}

export function clearRecentSessions() {
  try { localStorage.removeItem(KEY); } catch { /* nothing */ }
}
