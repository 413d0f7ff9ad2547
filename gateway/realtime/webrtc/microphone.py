"""A call's microphone: Opus packets from aiortc's receiver -> binary microphone frames for the worker.

aiortc's audio receiver would hold 4 packets (80 ms) in its jitter buffer for a smooth playout,
decode each packet in a thread of its own at 48 kHz stereo, and hand each frame back to the event
loop (two thread hops a packet), and after a lost packet its buffer waits until 16 have piled up and
keeps that lag (~300 ms) for the rest of the call. The gateway plays nothing: the microphone feeds
the worker's VAD and ASR, which take audio as it comes. So a call's audio receiver gets
``MicPackets`` in place of its jitter buffer (``quick_mic``): each Opus payload is queued as it
arrives, in sequence order, and aiortc's decoder is never given one. The call's answer asks for
40 ms packets (``MIC_PTIME_MS``; a browser's are 20 ms otherwise), so a second of microphone is 25
packets to receive, unprotect and queue rather than 50. ``pump_audio`` takes them 40 ms at a time
(by the packets' own durations) and, on the calls' audio thread, decodes them to mono and resamples to the session's
24 kHz at once (``MicDecoder``): one executor hop per 40 ms, no per-packet thread hops, no stereo.
The result is a binary microphone frame (``core/audio_frames.py``: what an
``input_audio_buffer.append`` carries, without base64 or JSON).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from concurrent.futures import Executor

import av
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket
from aiortc.utils import uint16_add

from core.audio_frames import mic_frame

log = logging.getLogger(__name__)

INPUT_RATE = 24000  # the session's input rate on a call (channel.py keeps it so)
OPUS_RATE = 48000  # what libopus decodes to through FFmpeg, whatever was encoded
FRAME_MS = 40  # a microphone frame for the worker, as the pages' appends
MIC_PTIME_MS = FRAME_MS  # the packet length the call's answer asks the browser for (sdp.with_mic_ptime)
KEEP_PACKETS = 150  # 3 s: a receiver nobody pumps (a second audio track) keeps no more
_JITTER_BUFFER = "_RTCRtpReceiver__jitter_buffer"  # aiortc 1.16's (pinned) private attribute


class MicPackets(JitterBuffer):
    """In place of aiortc's jitter buffer: each Opus payload is queued on arrival, in sequence order,
    and nothing is released to aiortc's decoder. A lost packet is not waited for (its 20 ms are
    skipped, as aiortc's buffer skips it after its wait); a packet older than one already queued, or
    a duplicate, is dropped (the decoder takes packets in order). Called on the event loop."""

    def __init__(self, call_id: str = "") -> None:
        super().__init__(capacity=16)
        self.call_id = call_id
        self._last: int | None = None
        self._payloads: collections.deque[bytes] = collections.deque(maxlen=KEEP_PACKETS)
        self._ms = collections.deque(maxlen=KEEP_PACKETS)  # each queued payload's length
        self._arrived = asyncio.Event()
        self._overflowed = False
        self._first_ms: float | None = None

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        seq = packet.sequence_number
        if self._last is not None and not 0 < uint16_add(seq, -self._last) < 0x8000:
            return False, None
        self._last = seq
        data = getattr(packet, "_data", packet.payload)  # the depayloaded frame aiortc set
        if data:
            if len(self._payloads) == KEEP_PACKETS and not self._overflowed:
                self._overflowed = True  # a pumped call's decoding 3 s behind: say so once
                log.warning("a call's microphone is %d packets behind: the oldest are dropped", KEEP_PACKETS)
            ms = opus_packet_ms(data)
            if self._first_ms is None:
                self._first_ms = ms
                log.info("call %s: the microphone sends %g ms Opus packets", self.call_id, ms)
            self._payloads.append(data)
            self._ms.append(ms)
            self._arrived.set()
        return False, None

    async def take(self, at_least_ms: float = FRAME_MS) -> list[bytes]:
        """Every payload queued, once they hold ``at_least_ms`` of audio."""
        while sum(self._ms) < at_least_ms:
            self._arrived.clear()
            await self._arrived.wait()
        taken = list(self._payloads)
        self._payloads.clear()
        self._ms.clear()
        return taken


def opus_packet_ms(payload: bytes) -> float:
    """An Opus packet's length from its TOC byte and frame count (RFC 6716 3.1-3.2); 20 ms for one
    that does not parse (libopus refuses it later, and it is counted as the 20 ms it replaces)."""
    if not payload:
        return 20.0
    toc = payload[0]
    config, code = toc >> 3, toc & 3
    if config < 12:  # SILK: 10, 20, 40, 60 ms
        frame = (10.0, 20.0, 40.0, 60.0)[config & 3]
    elif config < 16:  # hybrid: 10, 20 ms
        frame = (10.0, 20.0)[config & 1]
    else:  # CELT: 2.5, 5, 10, 20 ms
        frame = (2.5, 5.0, 10.0, 20.0)[config & 3]
    if code == 0:
        frames = 1
    elif code in (1, 2):
        frames = 2
    else:
        frames = payload[1] & 0x3F if len(payload) > 1 else 0
    return frame * frames if frames else 20.0


class MicDecoder:
    """Opus payloads -> one binary microphone frame (PCM16 mono, ``INPUT_RATE``). Blocking, stateful:
    one per call, called on the calls' audio thread one batch at a time. A payload libopus refuses is
    skipped (its 20 ms are lost, as a lost packet's), and logged once per call."""

    def __init__(self) -> None:
        codec = av.CodecContext.create("libopus", "r")
        codec.format, codec.layout, codec.sample_rate = "s16", "mono", OPUS_RATE
        self.codec = codec
        self.resampler = av.AudioResampler(format="s16", layout="mono", rate=INPUT_RATE)
        self._warned = False

    def frame(self, payloads: list[bytes]) -> bytes:
        pcm = bytearray()
        for payload in payloads:
            try:
                decoded = self.codec.decode(av.Packet(payload))
            except (av.FFmpegError, ValueError) as exc:
                if not self._warned:
                    self._warned = True
                    log.warning("a call's microphone packet not decoded (skipped): %s", exc)
                continue
            for frame in decoded:
                for out in self.resampler.resample(frame):
                    pcm += bytes(out.planes[0])[: out.samples * 2]
        return mic_frame(bytes(pcm), INPUT_RATE)


def quick_mic(receiver, call_id: str = "") -> MicPackets | None:
    """Give an audio transceiver's ``RTCRtpReceiver`` a ``MicPackets`` (before any packet arrives),
    or the one it has; None (nothing changed) where aiortc's receiver is not as expected."""
    current = getattr(receiver, _JITTER_BUFFER, None)
    if isinstance(current, MicPackets):
        return current
    if not isinstance(current, JitterBuffer) or getattr(current, "_is_video", True):
        log.warning("aiortc's audio receiver has no jitter buffer where expected: the call has no microphone")
        return None
    packets = MicPackets(call_id)
    setattr(receiver, _JITTER_BUFFER, packets)
    return packets


async def pump_audio(packets: MicPackets, deliver: Callable[[bytes], None], executor: Executor) -> None:
    """Microphone packets -> binary microphone frames for the worker, 40 ms (or all that piled up)
    at a time, decoded in ``executor``; until cancelled (the call's close). The channel keeps frames
    made before the session started (``deliver_microphone``)."""
    loop = asyncio.get_running_loop()
    decoder = MicDecoder()
    while True:
        payloads = await packets.take()
        deliver(await loop.run_in_executor(executor, decoder.frame, payloads))
