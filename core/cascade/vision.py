"""An honest, lightweight description of an image for a text-only LLM.

The embedded LLM cannot see. This module reports only what simple image analysis can measure
with what ships in ``opencv-python-headless``: size, brightness, dominant colours and faces
found by OpenCV's bundled Haar cascade. The prompt labels it as such, so the model is not
told it saw anything it did not. Real vision comes with the GPU omni backends.
"""

from __future__ import annotations

import cv2
import numpy as np

from core.errors import InvalidImageError

MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_PIXELS = 40_000_000

_COLOURS = {
    "black": (0, 0, 0), "white": (255, 255, 255), "grey": (128, 128, 128),
    "red": (200, 30, 30), "orange": (240, 140, 20), "yellow": (230, 220, 40),
    "green": (40, 160, 60), "blue": (40, 80, 200), "sky blue": (120, 180, 235),
    "purple": (130, 50, 160), "pink": (240, 150, 190), "brown": (120, 80, 40),
    "beige": (220, 200, 160),
}
_NAMES = list(_COLOURS)
_PALETTE = np.array([_COLOURS[n] for n in _NAMES], dtype=np.float32)


class FrameDescriber:
    def __init__(self) -> None:
        path = cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
        self._faces = cv2.CascadeClassifier(path)
        if self._faces.empty():
            raise RuntimeError(f"OpenCV face cascade missing at {path}")

    def decode(self, data: bytes) -> np.ndarray:
        if not data:
            raise InvalidImageError("empty image", param="image")
        if len(data) > MAX_IMAGE_BYTES:
            raise InvalidImageError(
                f"image of {len(data)} bytes exceeds {MAX_IMAGE_BYTES} bytes", param="image"
            )
        arr = np.frombuffer(data, dtype=np.uint8)
        # MAX_IMAGE_BYTES bounds the input; OpenCV's own pixel cap (CV_IO_MAX_IMAGE_PIXELS)
        # bounds the decode; MAX_PIXELS below is the limit we promise clients.
        image = cv2.imdecode(arr, cv2.IMREAD_COLOR)
        if image is None:
            raise InvalidImageError("image could not be decoded (send JPEG or PNG)", param="image")
        if image.shape[0] * image.shape[1] > MAX_PIXELS:
            raise InvalidImageError("image has too many pixels", param="image")
        return image

    def describe(self, data: bytes) -> str:
        image = self.decode(data)
        h, w = image.shape[:2]
        scale = 320.0 / max(h, w)
        small = cv2.resize(image, (max(1, int(w * scale)), max(1, int(h * scale)))) if scale < 1 else image
        grey = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
        brightness = float(grey.mean()) / 255.0
        light = (
            "very dark" if brightness < 0.15 else "dim" if brightness < 0.35
            else "bright" if brightness > 0.7 else "evenly lit"
        )
        faces = self._faces.detectMultiScale(grey, scaleFactor=1.1, minNeighbors=5, minSize=(24, 24))
        parts = [f"a {w}x{h} picture, {light}", f"main colours: {', '.join(_dominant(small))}"]
        if len(faces):
            where = [_position(x + fw / 2, y + fh / 2, small.shape[1], small.shape[0]) for x, y, fw, fh in faces]
            noun = "face" if len(faces) == 1 else "faces"
            parts.append(f"{len(faces)} {noun} detected ({', '.join(where)})")
        else:
            parts.append("no face detected")
        return "; ".join(parts)


def _dominant(image: np.ndarray, k: int = 3) -> list[str]:
    rgb = image[:, :, ::-1].reshape(-1, 3).astype(np.float32)
    dist = ((rgb[:, None, :] - _PALETTE[None, :, :]) ** 2).sum(axis=2)
    counts = np.bincount(dist.argmin(axis=1), minlength=len(_NAMES))
    order = np.argsort(counts)[::-1]
    total = counts.sum()
    return [f"{_NAMES[i]} ({counts[i] * 100 // total}%)" for i in order[:k] if counts[i] * 20 >= total]


def _position(cx: float, cy: float, w: int, h: int) -> str:
    horiz = "left" if cx < w / 3 else "right" if cx > 2 * w / 3 else "centre"
    vert = "top" if cy < h / 3 else "bottom" if cy > 2 * h / 3 else "middle"
    return "centre" if (horiz, vert) == ("centre", "middle") else f"{vert} {horiz}"
