// The microphone, opened in one place for every page (the duplex session's Start, the chat's
// Record): the same constraints everywhere, and a refusal turned into a MicError whose message
// says what to do, not what failed.

export class MicError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind; // insecure | denied | missing | busy | other
  }
}

const CONSTRAINTS = {
  audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
};

/** getUserMedia, or a MicError. `button` is what the user presses to try again ("Start",
 * "Record"); `meanwhile` what the page still offers without a microphone (said on a refusal). */
export async function openMic({ button = "Start", meanwhile = "" } = {}) {
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    throw new MicError("insecure", "This browser gives no microphone access here. Open the page over HTTPS or from localhost.");
  }
  try {
    return await navigator.mediaDevices.getUserMedia(CONSTRAINTS);
  } catch (e) {
    const again = `press ${button} again.`;
    const name = e && e.name;
    if (name === "NotAllowedError" || name === "SecurityError") {
      throw new MicError("denied", `Microphone permission was denied. Allow the microphone for this site (the icon in the address bar) and ${again}${meanwhile ? ` ${meanwhile}` : ""}`);
    }
    if (name === "NotFoundError" || name === "OverconstrainedError") {
      throw new MicError("missing", `No microphone was found. Plug one in (or enable it in the system settings) and ${again}`);
    }
    if (name === "NotReadableError") {
      throw new MicError("busy", `The microphone is in use by another application or could not be opened. Close the other app and ${again}`);
    }
    throw new MicError("other", `Could not open the microphone: ${e && e.message ? e.message : e}`);
  }
}

/** Whether the browser applied its echo canceller to the microphone (getUserMedia's echoCancellation). */
export function echoCancelled(stream) {
  const track = stream && stream.getAudioTracks()[0];
  const settings = track && track.getSettings ? track.getSettings() : {};
  return settings.echoCancellation === true;
}
