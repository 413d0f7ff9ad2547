// What every page needs to speak the realtime protocol on a WebSocket: base64 for PCM and
// images, and JSON events in (a frame that is not JSON is skipped, never fatal).

export function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/** Call `onEvent(event)` for each JSON message on `ws`. */
export function onEvents(ws, onEvent) {
  ws.onmessage = (e) => {
    let ev;
    try {
      ev = JSON.parse(e.data);
    } catch {
      return;
    }
    onEvent(ev);
  };
}
