"""A Live client's microphone as the Realtime session hears it.

``session.input_audio.append`` (base64 in JSON, from a WebSocket client) and a call's binary
microphone frames (``core/audio_frames.py``, from its gateway) both reach the session as what it
takes: an ``input_audio_buffer.append`` event, or the frame as it is. While the client has muted
its input the session hears silence of the same length (the timeline goes on), and every byte
counts towards the session's ``usage.seconds``.
"""

from __future__ import annotations

import base64
import binascii
import json

from core.audio_frames import mic_frame, read_mic_frame
from core.ids import new_id
from core.protocol import ProtocolError
from core.transport import Message

SILENCE = {"audio/pcmu": b"\xff", "audio/pcma": b"\xd5"}  # one sample of silence; PCM16's is zero bytes


class LiveMicrophone:
    """What the session hears of the client, and how many seconds of it there were."""

    def __init__(self, event_prefix: str) -> None:
        self.event_prefix = event_prefix  # the ids of the events this channel makes itself
        self.muted = False
        self.format = "audio/pcm"
        self.bytes_per_s = 48000
        self.seconds = 0.0

    def append(self, audio: str) -> Message:
        """A ``session.input_audio.append``'s audio, as the session's append event."""
        try:
            size = len(base64.b64decode(audio, validate=True))
        except (binascii.Error, ValueError):
            raise ProtocolError("session.input_audio.append: audio is not valid base64", code="invalid_value",
                                param="audio") from None
        self.seconds += size / self.bytes_per_s
        if self.muted:  # the model hears silence: the timeline goes on
            audio = base64.b64encode(SILENCE.get(self.format, b"\x00") * size).decode()
        return json.dumps({"type": "input_audio_buffer.append", "event_id": new_id(self.event_prefix), "audio": audio},
                          separators=(",", ":"))

    def frame(self, frame: bytes) -> bytes:
        """A call's binary microphone frame, as it is or as silence of its length while muted."""
        pcm, rate = read_mic_frame(frame)
        self.seconds += len(pcm) / self.bytes_per_s
        return mic_frame(bytes(len(pcm)), rate) if self.muted else frame
