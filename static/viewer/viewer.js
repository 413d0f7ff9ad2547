// Session viewer: meta card, replay player, multitrack timeline, transcript, per-turn metrics and
// each turn's stage waterfall (waterfall.js).
// Everything is fetched with the token from this page's URL (share or admin); the server answers
// 404 to anything else. `window.viewer` exposes what the page rendered, for the browser tests.
import { Timeline } from "./timeline.js";
import { renderWaterfalls } from "./waterfall.js";

const $ = (id) => document.getElementById(id);

export async function mountViewer() {
  const id = location.pathname.split("/").pop();
  const token = new URLSearchParams(location.search).get("token") || "";
  const q = `token=${encodeURIComponent(token)}`;
  const api = `/api/sessions/${encodeURIComponent(id)}`;
  const state = (window.viewer = { ready: false, error: null, events: 0, durationS: 0, lanes: [],
    marks: { bargeIns: 0, paused: 0, backchannels: 0, resumed: 0 }, tools: { calls: 0, failed: 0, lists: 0, approvals: 0 },
    waterfalls: [] });
  let data;
  try {
    const r = await fetch(`${api}?${q}`, { cache: "no-store" });
    if (!r.ok) throw new Error(r.status === 404 ? "This session does not exist or the link is not valid." : `HTTP ${r.status}`);
    data = await r.json();
  } catch (e) {
    return fail(state, e.message || String(e));
  }
  const events = (data.recording.events || []).slice().sort((a, b) => a.t - b.t);
  state.events = events.length;
  renderMeta(data.meta, data.recording);
  $("download").href = `${api}/download.zip?${q}`;

  const video = !!(data.files["merged_replay.mp4"] || (data.meta.replays && data.meta.replays.mp4));
  const media = document.createElement(video ? "video" : "audio");
  media.controls = true;
  media.preload = "auto";
  media.src = `${api}/replay.${video ? "mp4" : "wav"}?${q}`;
  media.className = video ? "replay-video" : "replay-audio";
  $("player").append(media);

  let tracks = null;
  try {
    // The wav carries both tracks (left user, right assistant): decode once for the waveforms.
    const buf = await (await fetch(`${api}/replay.wav?${q}`, { cache: "no-store" })).arrayBuffer();
    const ctx = new OfflineAudioContext(2, 1, 24000);
    const audio = await ctx.decodeAudioData(buf);
    tracks = { user: audio.getChannelData(0), ai: audio.numberOfChannels > 1 ? audio.getChannelData(1) : null,
               rate: audio.sampleRate, durationS: audio.duration };
  } catch (e) {
    showAlert(`The replay audio could not be loaded (${e.message || e}); the timeline shows events only.`);
  }
  const end = events.find((e) => e.type === "session_end");
  const durationS = tracks ? tracks.durationS : (end ? end.t : events.length ? events[events.length - 1].t : 0) / 1000;
  state.durationS = durationS;

  const timeline = new Timeline($("timeline"), { durationS, onSeek: (t) => { media.currentTime = t; } });
  timeline.frames(events.filter((e) => e.type === "user_frame")
    .map((e) => ({ t: e.t / 1000, src: `${api}/files/${e.file}?${q}` })));
  if (tracks) {
    timeline.waveform("You", tracks.user, tracks.rate, "user");
    if (tracks.ai) timeline.waveform("Assistant", tracks.ai, tracks.rate, "ai");
  }
  const lines = transcriptLines(events);
  const chips = (role) => lines.filter((l) => l.role === role).map((l) => ({ t: l.t / 1000, text: l.text, kind: role }));
  timeline.labels("You said", chips("user"));
  timeline.labels("Assistant said", chips("assistant"));
  const marks = turnMarks(events);
  if (marks.length) timeline.labels("Turn-taking", marks.map((m) => ({ t: m.t, text: m.label, title: m.title, kind: m.kind })), "turns");
  timeline.markers(marks);
  const tools = toolMarks(events);
  if (tools.length) timeline.labels("Tools", tools.map((m) => ({ t: m.t, text: m.label, title: m.title, kind: m.kind })), "tools");
  timeline.markers(tools);
  state.tools = {
    calls: tools.filter((m) => m.kind === "tool-call" || m.kind === "tool-failed").length,
    failed: tools.filter((m) => m.kind === "tool-failed").length,
    lists: tools.filter((m) => m.kind === "tool-list" || m.kind === "tool-list-failed").length,
    approvals: tools.filter((m) => m.kind === "tool-approval").length,
  };
  state.marks = {
    bargeIns: marks.filter((m) => m.kind === "barge").length,
    paused: marks.filter((m) => m.kind === "paused").length,
    backchannels: marks.filter((m) => m.kind === "backchannel").length,
    resumed: marks.filter((m) => m.kind === "resumed").length,
  };
  state.lanes = timeline.laneNames;
  const tick = () => {
    timeline.setPlayhead(media.currentTime);
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);

  renderTranscript(lines, (t) => { media.currentTime = t; media.play().catch(() => {}); });
  const turns = events.filter((e) => e.type === "turn_metrics");
  renderTurns(turns);
  state.waterfalls = renderWaterfalls($("waterfall"), turns, clock);
  state.ready = true;
}

function fail(state, message) {
  state.error = message;
  showAlert(message);
  $("meta").innerHTML = "";
  return state;
}

function showAlert(text) {
  $("alert").textContent = text;
  $("alert").hidden = !text;
}

// What happened to the assistant's replies while the user spoke over them (times in seconds): a
// barge-in (the reply was cut and stayed cut), a pause (cut at the user's voice, then resumed: the
// voice was a backchannel or noise; since issue 47 the reply yields at every voice's onset), a
// backchannel (heard, not a turn) and a resumed reply (the rest of a cut one).
function turnMarks(events) {
  const resumedItems = new Set(events.filter((e) => e.type === "resumed").map((e) => e.resumed_item_id));
  const out = [];
  for (const e of events) {
    const at = `at ${clock(e.t / 1000)}`;
    if (e.type === "barge_in") {
      const wasResumed = e.item_id && resumedItems.has(e.item_id);
      const by = e.source === "client" ? "the client cut the reply" : "the server cut the reply";
      out.push(wasResumed
        ? { t: e.t / 1000, kind: "paused", label: "paused",
            title: `Paused ${at}: ${by} at the user's voice; it was not a turn, so the reply resumed` }
        : { t: e.t / 1000, kind: "barge", label: "barge-in", title: `Barge-in ${at}: ${by}` });
    } else if (e.type === "backchannel") {
      const words = (e.transcript || "").trim();
      out.push({ t: e.t / 1000, kind: "backchannel", label: `backchannel${words ? `: ${words}` : ""}`,
        title: `Backchannel ${at}${words ? ` "${words}"` : ""}: heard, not a turn; the reply went on` });
    } else if (e.type === "resumed") {
      const from = typeof e.audio_start_ms === "number" ? ` from ${(e.audio_start_ms / 1000).toFixed(1)} s` : "";
      out.push({ t: e.t / 1000, kind: "resumed", label: "resumed",
        title: `Reply resumed ${at}: the rest of the paused reply${from}, nothing said twice` });
    }
  }
  return out;
}

// What the session's tools did (times in seconds): an MCP server's listing, each call (a function
// call the client ran, an MCP call the server ran, or an approval request) with its arguments and
// its output or error, and the user's answer to an approval request. A failed call or listing is
// its own kind (tool-failed, tool-list-failed), drawn differently.
const TOOLTIP_MAX = 600;

function cut(text) {
  const s = String(text);
  return s.length > TOOLTIP_MAX ? `${s.slice(0, TOOLTIP_MAX)}… (${s.length} characters)` : s;
}

function toolMarks(events) {
  const requests = new Map(); // approval request item id -> its tool_call event
  const out = [];
  for (const e of events) {
    const at = `at ${clock(e.t / 1000)}`;
    const server = e.server_label ? `${e.server_label}.` : "";
    if (e.type === "tool_call") {
      const name = e.name || "function";
      const args = e.arguments ? `\narguments: ${cut(e.arguments)}` : "";
      if (e.kind === "mcp_approval_request") {
        requests.set(e.item_id, e);
        out.push({ t: e.t / 1000, kind: "tool-call", label: `${name}?`,
          title: `Approval asked ${at}: ${server}${name}${args}` });
        continue;
      }
      const err = e.error ? (typeof e.error === "object" ? [e.error.type, e.error.message].filter(Boolean).join(": ") : String(e.error)) : "";
      const what = e.kind === "mcp_call" ? "MCP call" : "Function call";
      const result = err ? `\nerror: ${cut(err)}` : e.output != null ? `\nresult: ${cut(e.output)}`
        : e.kind === "function_call" ? "\n(run by the client)" : "";
      out.push({ t: e.t / 1000, kind: err ? "tool-failed" : "tool-call", label: err ? `${name} failed` : name,
        title: `${what}${err ? " failed" : ""} ${at}: ${server}${name}${args}${result}` });
    } else if (e.type === "tool_list") {
      const names = (e.tools || []).join(", ");
      out.push({ t: e.t / 1000, kind: e.failed ? "tool-list-failed" : "tool-list",
        label: e.failed ? `${e.server_label || "MCP"}: listing failed` : `tools: ${names || "none"}`,
        title: e.failed ? `Listing the tools of ${e.server_label || "an MCP server"} failed ${at}`
          : `Tools listed ${at} by ${e.server_label || "an MCP server"}: ${names || "none"}` });
    } else if (e.type === "tool_approval") {
      const request = requests.get(e.approval_request_id);
      const which = request ? ` ${request.server_label ? `${request.server_label}.` : ""}${request.name || ""}` : "";
      out.push({ t: e.t / 1000, kind: "tool-approval", label: e.approve ? "approved" : "declined",
        title: `${e.approve ? "Approved" : "Declined"} ${at}:${which || " a tool call"}${e.reason ? ` ("${e.reason}")` : ""}` });
    }
  }
  return out;
}

function transcriptLines(events) {
  const out = [];
  for (const e of events) {
    if (e.type === "user_transcript" || e.type === "user_text") out.push({ t: e.t, role: "user", text: e.text || "" });
    else if (e.type === "backchannel") out.push({ t: e.t, role: "user backchannel", text: `${e.transcript || "…"} (backchannel)` });
    else if (e.type === "user_image") out.push({ t: e.t, role: "user", text: "(image)" });
    else if (e.type === "response_done" && e.text) {
      out.push({ t: startOf(events, e.response_id, e.t), role: "assistant", text: e.text + (e.status === "cancelled" ? " …(interrupted)" : "") });
    }
  }
  return out.sort((a, b) => a.t - b.t);
}

function startOf(events, responseId, fallback) {
  const first = events.find((e) => (e.type === "reply_audio" || e.type === "reply_text") && e.response_id === responseId);
  return first ? first.t : fallback;
}

// How the client spoke (the worker's recording says): a Live session is recorded as the Realtime
// events its worker translated, so the timeline reads the same.
const DIALECTS = { ga: "Realtime", beta: "Realtime (beta)", live: "Live (/v1/live/sessions)" };

function renderMeta(meta, recording) {
  const counts = meta.counts || {};
  const rows = [
    ["App", meta.app || "api"],
    ["Dialect", DIALECTS[meta.dialect] || "Realtime"],
    ["Started", meta.started_at ? new Date(meta.started_at).toLocaleString() : "–"],
    ["Length", meta.duration_s != null ? `${meta.duration_s.toFixed(1)} s` : "–"],
    ["Status", meta.status === "finished" ? `finished (${(meta.end_reason || "").replaceAll("_", " ")})`
      : recording.complete === false ? "cut off (recording up to the last moment saved)" : meta.status],
    ["Worker", meta.worker_id || "–"],
    ["Model", meta.model || "–"],
    ["Recorded", `${counts.user_audio ?? "–"} mic segments · ${counts.ai_audio ?? "–"} reply segments · ${counts.user_frames ?? 0} frames · ${counts.user_images ?? 0} images`],
  ];
  const dl = document.createElement("dl");
  for (const [k, v] of rows) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    dl.append(dt, dd);
  }
  $("meta").replaceChildren(dl);
}

function renderTranscript(lines, jump) {
  const box = $("transcript");
  if (!lines.length) {
    box.innerHTML = '<p class="empty">Nothing was said in this session.</p>';
    return;
  }
  box.replaceChildren(...lines.map((l) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = `bubble ${l.role} jump`;
    b.textContent = l.text || "…";
    const at = document.createElement("span");
    at.className = "at";
    at.textContent = clock(l.t / 1000);
    b.prepend(at);
    b.addEventListener("click", () => jump(l.t / 1000));
    return b;
  }));
}

function renderTurns(turns) {
  const box = $("turns");
  if (!turns.length) {
    box.innerHTML = '<p class="muted">No completed turns.</p>';
    return;
  }
  const fmt = (v) => (typeof v === "number" ? Math.round(v) : "–");
  const table = document.createElement("table");
  table.className = "turns";
  table.innerHTML = "<thead><tr><th>#</th><th>at</th><th>V2V</th><th>TTFP</th><th>TTFT</th><th>status</th></tr></thead>";
  const body = document.createElement("tbody");
  turns.forEach((e, i) => {
    const m = e.metrics || {};
    const tr = document.createElement("tr");
    for (const v of [i + 1, clock(e.t / 1000), fmt(m.v2v_ms), fmt(m.ttfp_ms), fmt(m.ttft_ms), m.status || "–"]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    body.append(tr);
  });
  table.append(body);
  const note = document.createElement("p");
  note.className = "muted";
  note.textContent = "Milliseconds. V2V: end of your speech to the first reply audio.";
  box.replaceChildren(table, note);
}

export function clock(s) {
  const m = Math.floor(s / 60);
  return `${m}:${(s - m * 60).toFixed(1).padStart(4, "0")}`;
}
