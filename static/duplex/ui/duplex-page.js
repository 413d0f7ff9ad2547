// The controller behind audio_duplex.html and omni.html: wires the buttons, status line,
// transcript, metrics, levels and (on the omni page) the camera to one DuplexSession.
// `window.omni` exposes read-only views of the live session for the browser tests.
import { renderNav } from "../../shared/app-nav.js";
import { MicError } from "../../shared/microphone.js";
import { Camera, CameraError, FrameSender } from "../lib/camera.js";
import { DIALECTS, DuplexSession, TRANSPORTS } from "../lib/duplex-session.js";
import { rememberSession } from "../lib/recent-sessions.js";
import { LevelMeters } from "./level-meters.js";
import { MetricsPanel } from "./metrics-panel.js";

// The "Turn detection" choices: select value -> DuplexSession options. Kept per browser.
const TURN_KEY = "omniduplex.turnDetection";
const SILENCE_MS = 500; // server_vad's silence, as before semantic turn detection
const TURN_MODES = {
  "semantic:auto": { turnDetection: "semantic_vad", eagerness: "auto" },
  "semantic:high": { turnDetection: "semantic_vad", eagerness: "high" },
  "semantic:low": { turnDetection: "semantic_vad", eagerness: "low" },
  server_vad: { turnDetection: "server_vad" },
};
const TURN_DEFAULT = "semantic:auto";

function savedTurnMode() {
  try {
    const v = localStorage.getItem(TURN_KEY);
    return v && Object.hasOwn(TURN_MODES, v) ? v : TURN_DEFAULT;
  } catch {
    return TURN_DEFAULT;
  }
}

// The "Connection" choice: WebRTC (the default) or WebSocket, kept per browser; applies from the
// next Start.
const TRANSPORT_KEY = "omniduplex.transport";
const TRANSPORT_DEFAULT = "webrtc";

function savedTransport() {
  try {
    const v = localStorage.getItem(TRANSPORT_KEY);
    return TRANSPORTS.includes(v) ? v : TRANSPORT_DEFAULT;
  } catch {
    return TRANSPORT_DEFAULT;
  }
}

// The "Dialect" choice: OpenAI Realtime (the default) or Live (the model decides when to talk and
// stop; /v1/live/sessions), kept per browser; applies from the next Start.
const DIALECT_KEY = "omniduplex.dialect";
const DIALECT_DEFAULT = "realtime";

function savedDialect() {
  try {
    const v = localStorage.getItem(DIALECT_KEY);
    return DIALECTS.includes(v) ? v : DIALECT_DEFAULT;
  } catch {
    return DIALECT_DEFAULT;
  }
}

function turnOptions(mode) {
  return { eagerness: "auto", silenceMs: SILENCE_MS, ...(TURN_MODES[mode] || TURN_MODES[TURN_DEFAULT]) };
}

const LABELS = {
  idle: () => "Idle",
  starting: () => "Opening the microphone…",
  connecting: () => "Connecting…",
  queued: (d) => `Queued: position ${d.position} of ${d.queue_length}` + (d.eta_s != null ? `, about ${Math.ceil(d.eta_s)} s` : ""),
  assigned: () => "Assigned to a worker, starting…",
  listening: () => "Listening",
  hearing: () => "Hearing you…",
  thinking: () => "Thinking…",
  speaking: () => "Speaking",
  paused: () => "Paused",
  closing: () => "Ending the session…",
  reconnecting: () => "Connection lost: reconnecting…",
  closed: (d) => d.reason || "Closed",
  error: (d) => d.reason || "Error",
};

export function mountDuplexPage({ app, appId, withCamera = false }) {
  renderNav();
  const $ = (id) => document.getElementById(id);
  const metrics = new MetricsPanel($("metrics"));
  metrics.setTurn(null);
  metrics.setPlayback({ bufferedMs: 0, playedMs: 0, gaps: 0 });
  let session = null;
  const levels = new LevelMeters($("levels"), () => session);
  const camera = withCamera ? new Camera($("camera")) : null;
  let frames = null;
  let startedAt = 0;

  const omni = (window.omni = {
    get session() { return session; },
    get state() { return session ? session.state : "idle"; },
    get playedMs() { return session ? session.playedMs : 0; },
    get bufferedMs() { return session ? session.bufferedMs : 0; },
    get gaps() { return session ? session.gaps : 0; },
    get transcripts() { return session ? session.transcripts.map(({ role, text }) => ({ role, text })) : []; },
    get lastMetrics() { return session ? session.lastMetrics : null; },
    get truncates() { return session ? session.truncates : []; },
    get bargeIns() { return session ? session.bargeIns : []; },
    get queue() { return session ? session.queue : null; },
    get chimes() { return session && session.chimes ? session.chimes.played : []; },
    // Camera frames sent: by the page (WebSocket), or as the call's video track encoded them (WebRTC).
    get framesSent() {
      if (session && session.transport === "webrtc") return session.call ? session.call.stats.videoFramesSent : 0;
      return frames ? frames.sent : 0;
    },
    get framesAcked() { return session ? session.framesAcked : 0; },
    get levels() { return levels.values; },
    get recording() { return session ? session.recording : null; },
    get error() { return session ? session.error : null; },
    get turnMode() { return turnSelect ? turnSelect.value : TURN_DEFAULT; },
    get turnDetectionSent() { return session ? session.turnDetectionConfig() : null; },
    get turnDetection() { return session ? session.serverTurnDetection : null; },
    get transport() { return session ? session.transport : (transportSelect ? transportSelect.value : TRANSPORT_DEFAULT); },
    get callId() { return session ? session.callId : null; },
    get dialect() { return session ? session.dialect : (dialectSelect ? dialectSelect.value : DIALECT_DEFAULT); },
    get liveDropped() { return session ? { ...session.liveDropped } : {}; },
    get liveClosed() { return session ? session.liveClosed : null; },
    get sentEvents() { return session ? { ...session.sentEvents } : {}; },
    // What the browser applied to the microphone (echoCancellation, noiseSuppression, autoGainControl, ...).
    get micSettings() {
      const t = session && session.stream && session.stream.getAudioTracks()[0];
      return t ? t.getSettings() : null;
    },
  });

  // Connection: WebRTC or WebSocket, for the next session (the select is locked during one).
  const transportSelect = $("transport");
  if (transportSelect) {
    transportSelect.value = savedTransport();
    transportSelect.addEventListener("change", () => {
      try { localStorage.setItem(TRANSPORT_KEY, transportSelect.value); } catch { /* private mode: not kept */ }
    });
  }

  // Turn detection: applies to the next session and, through session.update, to a live one.
  const turnSelect = $("turn-detection");
  if (turnSelect) {
    turnSelect.value = savedTurnMode();
    turnSelect.addEventListener("change", () => {
      try { localStorage.setItem(TURN_KEY, turnSelect.value); } catch { /* private mode: not kept */ }
      if (session && session.setTurnDetection(turnOptions(turnSelect.value))) {
        log(`turn detection: ${turnSelect.selectedOptions[0].textContent}`);
      }
    });
  }

  // Dialect: Realtime or Live, for the next session (locked during one). In Live the model decides
  // the turns itself: the turn detection choice does not apply.
  const dialectSelect = $("dialect");
  const dialectChanged = () => {
    if (turnSelect) turnSelect.disabled = dialectSelect.value === "live";
  };
  if (dialectSelect) {
    dialectSelect.value = savedDialect();
    dialectSelect.addEventListener("change", () => {
      try { localStorage.setItem(DIALECT_KEY, dialectSelect.value); } catch { /* private mode: not kept */ }
      dialectChanged();
    });
    dialectChanged();
  }

  function setStatus(state, detail = {}) {
    $("status").dataset.state = state;
    $("status-text").textContent = (LABELS[state] || (() => state))(detail);
  }

  function showAlert(text, kind = "error") {
    $("alert").textContent = text;
    $("alert").dataset.kind = kind;
    $("alert").hidden = !text;
  }

  function log(text) {
    const line = document.createElement("div");
    line.textContent = `${new Date().toLocaleTimeString()} ${text}`;
    $("log").prepend(line);
    while ($("log").childElementCount > 50) $("log").lastChild.remove();
    console.log("[omni]", text);
  }

  function renderTranscript(s) {
    const box = $("transcript");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    box.replaceChildren(...s.transcripts.map((t) => {
      const b = document.createElement("div");
      b.className = `bubble ${t.role}` + (t.interrupted ? " interrupted" : "");
      b.textContent = t.text || "…";
      return b;
    }));
    if (atBottom) box.scrollTop = box.scrollHeight;
    renderSubtitle(s);
  }

  // Subtitles over the camera preview: the latest line from either side.
  function renderSubtitle(s) {
    const sub = $("subtitle");
    if (!sub) return;
    const last = s.transcripts[s.transcripts.length - 1];
    sub.textContent = last ? last.text.slice(-160) : "";
    sub.dataset.role = last ? last.role : "";
    sub.hidden = !last || !last.text;
  }

  function setRunning(running) {
    $("start").disabled = running;
    if (transportSelect) transportSelect.disabled = running;
    if (dialectSelect) dialectSelect.disabled = running;
    $("pause").disabled = !running;
    $("stop").disabled = !running;
    $("pause").textContent = "Pause";
  }

  function remember(s) {
    const turns = s.transcripts.filter((t) => t.role === "user").length;
    if (!startedAt) return; // never got past the queue: nothing to list
    const firstUser = s.transcripts.find((t) => t.role === "user");
    rememberSession({
      app, href: location.pathname, startedAt, durationS: Math.round((Date.now() - startedAt) / 1000), turns,
      preview: firstUser ? firstUser.text.slice(0, 120) : "", link: s.recording ? s.recording.share_url : null,
    });
  }

  async function startCamera() {
    try {
      await camera.start();
      $("camera-off").hidden = true;
      return true;
    } catch (e) {
      showAlert(e instanceof CameraError ? e.message : `Camera: ${e.message || e}`, "warn");
      $("camera-off").hidden = false;
      log(`camera failed: ${e.message || e}`);
      return false;
    }
  }

  $("start").addEventListener("click", async () => {
    showAlert("");
    setRunning(true);
    startedAt = 0;
    frames = null;
    const s = (session = new DuplexSession({
      chimes: !$("chimes") || $("chimes").checked, app: appId, record: !$("record") || $("record").checked,
      ...turnOptions(turnSelect ? turnSelect.value : TURN_DEFAULT),
      transport: transportSelect ? transportSelect.value : TRANSPORT_DEFAULT, audio: $("reply-audio"),
      dialect: dialectSelect ? dialectSelect.value : DIALECT_DEFAULT,
    }));
    log(`connecting over ${s.transport === "webrtc" ? "WebRTC" : "WebSocket"}${s.dialect === "live" ? " (Live)" : ""}`);
    $("replay").hidden = true;
    s.addEventListener("recording", (e) => {
      const a = $("replay-link");
      a.href = e.detail.share_url;
      $("replay").hidden = false;
    });
    s.addEventListener("state", (e) => {
      setStatus(e.detail.state, e.detail);
      metrics.setQueue(e.detail.state === "queued" ? s.queue : null);
      if (e.detail.state === "paused") $("pause").textContent = "Resume";
      if (e.detail.state === "listening") $("pause").textContent = "Pause";
    });
    s.addEventListener("live", () => {
      startedAt = Date.now();
      if (frames) {
        frames.tick(); // the first frame at once, then one a second
        frames.start();
      }
    });
    s.addEventListener("transcript", () => renderTranscript(s));
    s.addEventListener("metrics", (e) => metrics.setTurn(e.detail));
    s.addEventListener("bargein", (e) => metrics.setBargeIn(e.detail));
    s.addEventListener("progress", () => metrics.setPlayback(s));
    s.addEventListener("frames", (e) => { if ($("frames")) $("frames").textContent = `${e.detail.acked} frames seen`; });
    s.addEventListener("log", (e) => log(e.detail.text));
    s.addEventListener("closed", (e) => {
      if (frames) frames.stop();
      if (camera) camera.stop();
      setRunning(false);
      remember(s);
      if (e.detail.code !== 1000) showAlert(e.detail.reason);
      // A call refused for its key: the key box again (shared/app-gate.js), even when one is stored.
      if (e.detail.keyRefused && window.omniGate) window.omniGate.askKey();
    });
    try {
      if (camera && (await startCamera())) {
        // WebSocket: the page sends a JPEG a second. WebRTC: the camera is a track of the call and
        // the gateway samples it (at most limits.max_frame_rate a second).
        if (s.transport === "webrtc") s.videoTrack = camera.stream.getVideoTracks()[0];
        else frames = new FrameSender(camera, (ev) => s.send(ev), { intervalMs: 1000 });
      }
      await s.start();
    } catch (e) {
      if (frames) frames.stop();
      if (camera) camera.stop();
      setRunning(false);
      setStatus("error", { reason: e instanceof MicError ? "Microphone unavailable" : "Could not start" });
      showAlert(e.message || String(e));
      log(`start failed: ${e.message || e}`);
    }
  });

  $("pause").addEventListener("click", () => {
    if (!session) return;
    if (session.paused) session.resume(); else session.pause();
  });

  $("stop").addEventListener("click", () => {
    if (session) session.stop();
  });

  if (camera) {
    $("mirror").addEventListener("change", (e) => camera.setMirrored(e.target.checked));
    $("flip").addEventListener("click", async () => {
      if (!camera.stream) return;
      try {
        await camera.flip();
        if (session && session.transport === "webrtc") await session.setVideoTrack(camera.stream.getVideoTracks()[0]);
      } catch (e) {
        showAlert(e.message || String(e), "warn");
      }
    });
  }

  window.addEventListener("pagehide", () => { if (session) remember(session); });
  return omni;
}
