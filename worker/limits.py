"""Server-side input limits the worker session enforces: message size, image size, camera frame rate.

Checks run before any decode: the base64 length bounds the bytes, and an image's width and
height are read from its header (PNG IHDR, JPEG SOF), so an oversized picture is refused without
ever being decompressed. Refusals are ``ProtocolError``s with their own codes; the session
goes on (see docs/protocol.md, "Errors and close codes").
"""

from __future__ import annotations

import struct
import time

from core.config import LimitsConfig
from core.json_limits import message_too_large  # noqa: F401 - the size check lives with the parse path
from core.protocol import ProtocolError

FRAME_BURST = 2.0  # frames a client may send back to back (a late frame and the next one)


def decoded_size(b64: str) -> int:
    """Bytes a base64 string decodes to (upper bound; padding ignored)."""
    return len(b64) * 3 // 4


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG or JPEG header, or None if neither (the decoder then decides)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width, height
    if data[:2] == b"\xff\xd8":
        i = 2
        n = len(data)
        while i + 4 <= n:
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
                i += 2
                continue
            (length,) = struct.unpack(">H", data[i + 2:i + 4])
            # SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC) carry the frame size.
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                if i + 9 > n:
                    return None
                height, width = struct.unpack(">HH", data[i + 5:i + 9])
                return width, height
            if marker == 0xDA:  # start of scan before any SOF: not a valid JPEG header
                return None
            i += 2 + length
    return None


def check_image_b64(b64: str, limits: LimitsConfig, param: str, event_id: str | None = None) -> None:
    size = decoded_size(b64)
    if size > limits.max_image_bytes + 2:
        raise ProtocolError(f"image of about {size} bytes exceeds the limit of {limits.max_image_bytes} bytes",
                            code="image_too_large", param=param, event_id=event_id)


def check_image(data: bytes, limits: LimitsConfig, param: str, event_id: str | None = None) -> None:
    if len(data) > limits.max_image_bytes:
        raise ProtocolError(f"image of {len(data)} bytes exceeds the limit of {limits.max_image_bytes} bytes",
                            code="image_too_large", param=param, event_id=event_id)
    dims = image_dimensions(data)
    if dims is not None and dims[0] * dims[1] > limits.max_image_pixels:
        raise ProtocolError(f"image of {dims[0]}x{dims[1]} pixels exceeds the limit of "
                            f"{limits.max_image_pixels} pixels", code="image_too_large", param=param,
                            event_id=event_id)


class FrameRate:
    """Token bucket: ``rate`` frames per second, bursts of ``FRAME_BURST``."""

    def __init__(self, rate: float, clock=time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._tokens = FRAME_BURST
        self._last = clock()
        self.dropped = 0
        self._last_error: float | None = None

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(FRAME_BURST, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.dropped += 1
        return False

    def should_report(self) -> bool:
        """One error event per second at most while a client floods (the send queue stays small)."""
        now = self._clock()
        if self._last_error is None or now - self._last_error >= 1.0:
            self._last_error = now
            return True
        return False
