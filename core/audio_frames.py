"""Binary audio frames between a gateway and its worker (inside the cluster only).

A WebRTC call's audio crosses the gateway-worker socket as binary WebSocket frames, a small header
and raw PCM16 mono, never base64 in JSON: the microphone to the worker, the reply's audio back
(what a ``response.output_audio.delta`` carries, with its response and item ids; a Live call's
reply as one stream). The public protocols stay JSON as OpenAI defines them; a worker takes and
sends binary frames only on a connection the gateway opened for a call (``media=frames`` in its
URL), so a client's own binary frame is still refused (``invalid_json``).

Header (8 bytes, little-endian): the magic ``b"OD"``, a version byte, the frame's kind, and the
sample rate of the PCM that follows. A reply frame then names its response and item (each a
length byte and ASCII).
"""

from __future__ import annotations

import struct

from core.json_limits import BINARY_REFUSED
from core.protocol import ProtocolError

_HEADER = struct.Struct("<2sBBI")
_MAGIC = b"OD"
_VERSION = 1
MIC = 1  # the user's microphone: PCM16 mono, as an ``input_audio_buffer.append`` would carry it
REPLY = 2  # the reply's audio: as a ``response.output_audio.delta`` would carry it
MEDIA_PARAM = "media"  # the worker URL's query parameter that allows binary frames ...
MEDIA_FRAMES = "frames"  # ... with this value


def mic_frame(pcm: bytes, rate: int) -> bytes:
    """One piece of the microphone as a binary frame."""
    return _HEADER.pack(_MAGIC, _VERSION, MIC, rate) + pcm


def read_mic_frame(frame: bytes) -> tuple[bytes, int]:
    """The PCM and its rate from a microphone frame; ``ProtocolError`` for anything else."""
    if len(frame) < _HEADER.size:
        raise ProtocolError("a binary frame shorter than its header", code="invalid_json", param="message")
    magic, version, kind, rate = _HEADER.unpack_from(frame)
    if magic != _MAGIC or version != _VERSION or kind != MIC:
        raise ProtocolError(BINARY_REFUSED, code="invalid_json", param="message")
    pcm = frame[_HEADER.size:]
    if len(pcm) % 2:
        raise ProtocolError("a microphone frame must hold whole 16-bit samples", code="invalid_audio",
                            param="audio")
    return pcm, rate


def reply_frame(response_id: str, item_id: str, pcm: bytes, rate: int) -> bytes:
    """A piece of the reply's audio as a binary frame (ids are ASCII, at most 255 bytes each)."""
    rid, iid = response_id.encode("ascii"), item_id.encode("ascii")
    return _HEADER.pack(_MAGIC, _VERSION, REPLY, rate) + bytes((len(rid),)) + rid + bytes((len(iid),)) + iid + pcm


def read_reply_frame(frame: bytes) -> tuple[str, str, bytes]:
    """(response id, item id, PCM) of a reply frame; ``ValueError`` for anything else (it comes
    from our own worker: a bad one is a bug, not a client's input)."""
    if len(frame) < _HEADER.size + 2:
        raise ValueError("a reply frame shorter than its header")
    magic, version, kind, _rate = _HEADER.unpack_from(frame)
    if magic != _MAGIC or version != _VERSION or kind != REPLY:
        raise ValueError("not a reply frame")
    at = _HEADER.size
    rid = frame[at + 1:at + 1 + frame[at]].decode("ascii")
    at += 1 + frame[at]
    iid = frame[at + 1:at + 1 + frame[at]].decode("ascii")
    at += 1 + frame[at]
    return rid, iid, frame[at:]
