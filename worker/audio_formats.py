"""Audio formats a session may declare: PCM16 (24 kHz, or 16 kHz as our extension) and G.711
µ-law / A-law at 8 kHz (``audio/pcmu``, ``audio/pcma``; beta ``g711_ulaw``, ``g711_alaw``), the
format telephony bridges (Twilio Media Streams, SIP gateways) send.

The core takes PCM16 at the input rate and makes 24 kHz PCM16 replies; G.711 is decoded and
encoded here with PyAV's codecs (``core/g711.py``), in a thread (media work stays off the loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.audio import OUTPUT_RATE
from core.protocol import ProtocolError

PCM = "audio/pcm"
G711_RATE = 8000
G711 = ("audio/pcmu", "audio/pcma")
BETA_NAMES = {"pcm16": PCM, "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}
BETA_OF = {"audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}


@dataclass(frozen=True, slots=True)
class AudioFormat:
    type: str = PCM
    rate: int = OUTPUT_RATE

    @property
    def g711(self) -> bool:
        return self.type in G711

    def to_pcm16(self, data: bytes, param: str = "audio", event_id: str | None = None) -> bytes:
        """Client audio as PCM16 at ``rate`` (G.711 decoded; call in a thread for G.711)."""
        if self.g711:
            from core.g711 import decode_g711

            return decode_g711(data, self.type)
        if len(data) % 2:
            raise ProtocolError(f"{param} holds {len(data)} bytes; PCM16 needs an even number", code="invalid_audio",
                                param=param, event_id=event_id)
        return data

    def ga(self) -> dict[str, Any]:
        return {"type": self.type} if self.g711 else {"type": PCM, "rate": self.rate}

    def beta(self) -> str:
        return BETA_OF.get(self.type, "pcm16")


def parse_format(value: Any, param: str, *, output: bool = False) -> AudioFormat | None:
    """A GA format object (``{"type": "audio/pcm", "rate": 24000}``) or a beta name (``"pcm16"``)."""
    if value is None:
        return None
    if isinstance(value, str):
        kind = BETA_NAMES.get(value)
        if kind is None:
            raise ProtocolError(f"{param} {value!r} is not supported; use one of {', '.join(BETA_NAMES)}",
                                code="invalid_value", param=param)
        return AudioFormat(kind, G711_RATE if kind in G711 else OUTPUT_RATE)
    if not isinstance(value, dict):
        raise ProtocolError(f"{param} must be an object", code="invalid_value", param=param)
    kind = value.get("type", PCM)
    rate = value.get("rate")
    if kind in G711:
        if rate not in (None, G711_RATE):
            raise ProtocolError(f"{param}: {kind} is 8000 Hz only (got rate {rate!r})", code="invalid_value",
                                param=f"{param}.rate")
        return AudioFormat(kind, G711_RATE)
    if kind != PCM:
        raise ProtocolError(f"{param}.type {kind!r} is not supported; use 'audio/pcm', 'audio/pcmu' or 'audio/pcma'",
                            code="invalid_value", param=f"{param}.type")
    rate = OUTPUT_RATE if rate is None else rate
    allowed = (OUTPUT_RATE,) if output else (16000, OUTPUT_RATE)
    if rate not in allowed:
        raise ProtocolError(f"{param}.rate {rate!r} is not supported; use {' or '.join(map(str, allowed))}",
                            code="invalid_value", param=f"{param}.rate")
    return AudioFormat(PCM, rate)


class OutputEncoder:
    """Reply audio (PCM16, 24 kHz) in the session's output format; one per response (a
    streaming resampler keeps its state across a reply's chunks)."""

    def __init__(self, fmt: AudioFormat) -> None:
        self.fmt = fmt
        self._g711 = None
        if fmt.g711:
            from core.g711 import G711Encoder

            self._g711 = G711Encoder(fmt.type, OUTPUT_RATE)

    def encode(self, pcm24k: bytes) -> bytes:
        return pcm24k if self._g711 is None else self._g711.encode(pcm24k)

    def flush(self) -> bytes:
        return b"" if self._g711 is None else self._g711.flush()
