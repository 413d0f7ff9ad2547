// Camera for the omni page: preview, front/back flip, mirror, and JPEG frames for the model.
// The preview may be mirrored (what users expect of a selfie view); frames sent to the model
// never are, so text and left/right stay true.

export class CameraError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

export class Camera {
  constructor(video) {
    this.video = video;
    this.stream = null;
    this.facing = "user";
    this.mirrored = true;
    this.canvas = document.createElement("canvas");
  }

  async start(facing = this.facing) {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new CameraError("insecure", "This browser gives no camera access here. Open the page over HTTPS or from localhost.");
    }
    this.stop();
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        video: { facingMode: facing, width: { ideal: 640 }, height: { ideal: 480 }, frameRate: { ideal: 15 } },
      });
    } catch (e) {
      const name = e && e.name;
      if (name === "NotAllowedError" || name === "SecurityError") {
        throw new CameraError("denied", "Camera permission was denied, so the assistant cannot see you. Allow the camera for this site (the icon in the address bar) and press Start again, or carry on with voice only.");
      }
      if (name === "NotFoundError" || name === "OverconstrainedError") {
        throw new CameraError("missing", "No camera was found. Connect one and press Start again, or carry on with voice only.");
      }
      if (name === "NotReadableError") {
        throw new CameraError("busy", "The camera is in use by another application. Close it and press Start again.");
      }
      throw new CameraError("other", `Could not open the camera: ${e && e.message ? e.message : e}`);
    }
    this.facing = facing;
    this.video.srcObject = this.stream;
    this.video.muted = true;
    this.video.playsInline = true;
    await this.video.play().catch(() => {});
    this.setMirrored(this.mirrored);
  }

  /** Switch between the front and back camera (phones); on a laptop the same camera returns. */
  async flip() {
    await this.start(this.facing === "user" ? "environment" : "user");
  }

  setMirrored(on) {
    this.mirrored = on;
    this.video.style.transform = on ? "scaleX(-1)" : "none";
  }

  get ready() {
    return !!this.stream && this.video.videoWidth > 0;
  }

  /** The current frame as base64 JPEG (no data: prefix), longest side at most `maxSide`. */
  grabJpeg(maxSide = 640, quality = 0.7) {
    if (!this.ready) return null;
    const { videoWidth: w, videoHeight: h } = this.video;
    const scale = Math.min(1, maxSide / Math.max(w, h));
    this.canvas.width = Math.round(w * scale);
    this.canvas.height = Math.round(h * scale);
    this.canvas.getContext("2d").drawImage(this.video, 0, 0, this.canvas.width, this.canvas.height);
    return this.canvas.toDataURL("image/jpeg", quality).split(",", 2)[1];
  }

  stop() {
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    this.stream = null;
  }
}

/** Sends a frame every `intervalMs` (1 fps by default, never faster) while `canSend()` holds. */
export class FrameSender {
  constructor(camera, send, { intervalMs = 1000, canSend = () => true } = {}) {
    this.camera = camera;
    this.send = send;
    this.intervalMs = Math.max(1000, intervalMs);
    this.canSend = canSend;
    this.sent = 0;
    this.timer = null;
  }

  start() {
    this.stop();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
  }

  tick() {
    if (!this.canSend()) return;
    const image = this.camera.grabJpeg();
    if (!image) return;
    if (this.send({ type: "input_image_buffer.append", image })) this.sent++;
  }

  stop() {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
