// Images for the chat: decode, downscale in a canvas, re-encode as JPEG. Phone photos are
// often 12+ MP; the model gets at most MAX_SIDE px on the long side (a few hundred kB), and the
// chat and shares keep a small thumbnail.

export const MAX_SIDE = 1024;
const THUMB_SIDE = 240;
const MAX_INPUT_BYTES = 40 * 1024 * 1024;

export class ImageError extends Error {}

async function decode(file) {
  if (window.createImageBitmap) {
    try {
      return await createImageBitmap(file, { imageOrientation: "from-image" });
    } catch {
      /* fall back to <img>, which knows a few more formats in some browsers */
    }
  }
  const url = URL.createObjectURL(file);
  try {
    const img = new Image();
    img.src = url;
    await img.decode();
    return img;
  } finally {
    URL.revokeObjectURL(url);
  }
}

function encode(source, w, h, side, quality) {
  const scale = Math.min(1, side / Math.max(w, h));
  const canvas = document.createElement("canvas");
  canvas.width = Math.max(1, Math.round(w * scale));
  canvas.height = Math.max(1, Math.round(h * scale));
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff"; // JPEG has no alpha: transparent PNGs get a white background
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.drawImage(source, 0, 0, canvas.width, canvas.height);
  return { dataUrl: canvas.toDataURL("image/jpeg", quality), width: canvas.width, height: canvas.height };
}

/** A File/Blob -> {dataUrl (<= MAX_SIDE px JPEG), thumb (small JPEG), width, height, name}. */
export async function prepareImage(file) {
  if (!file || !/^image\//.test(file.type || "")) {
    throw new ImageError("Choose an image file (JPEG, PNG, WebP or GIF).");
  }
  if (file.size > MAX_INPUT_BYTES) {
    throw new ImageError(`That image is ${(file.size / 1e6).toFixed(0)} MB; choose one under 40 MB.`);
  }
  let bitmap;
  try {
    bitmap = await decode(file);
  } catch {
    throw new ImageError("That image could not be read. Try a JPEG or PNG.");
  }
  const w = bitmap.width || bitmap.naturalWidth;
  const h = bitmap.height || bitmap.naturalHeight;
  if (!w || !h) throw new ImageError("That image is empty.");
  const full = encode(bitmap, w, h, MAX_SIDE, 0.85);
  const thumb = encode(bitmap, w, h, THUMB_SIDE, 0.7);
  if (bitmap.close) bitmap.close();
  return { dataUrl: full.dataUrl, thumb: thumb.dataUrl, width: full.width, height: full.height, name: file.name || "image" };
}
