// Admin API calls. The page is signed in with an HttpOnly SameSite=Strict cookie, so fetch
// sends it on its own; a 401 means the sign-in expired: back to the sign-in page.
export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export async function api(path, { method = "GET", json, body } = {}) {
  const init = { method, credentials: "same-origin", cache: "no-store", headers: {} };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (body !== undefined) {
    init.body = body;
  }
  const r = await fetch(path, init);
  if (r.status === 401) {
    location.href = "/admin";
    throw new ApiError(401, "signed out");
  }
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!r.ok) throw new ApiError(r.status, readable(data) || `HTTP ${r.status}`);
  return data;
}

function readable(data) {
  const d = data && data.detail;
  if (typeof d === "string") return d;
  if (Array.isArray(d)) return d.map((e) => `${(e.loc || []).slice(1).join(".")}: ${e.msg}`).join("; ");
  return "";
}
