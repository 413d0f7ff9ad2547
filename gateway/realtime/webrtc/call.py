"""One call's ``RTCPeerConnection``, from the answer to its close.

The answer is made at once: aiortc gathers the host candidates inside ``setLocalDescription``, so
the answer it returns carries them and the browser can connect while the call waits in the queue.
Where the answer's candidates point (a UDP port range, the public address in front of a NAT,
STUN/TURN servers) is ``webrtc`` in config.json (``ice.py``); by default no STUN server is asked
(aiortc would ask Google's): the gateway is the side with the public address.

The connection's end, whichever side ends it, reaches the proxy as the channel's ``peer_gone``:
the client's hangup (the route), a closed or failed connection (``connectionstatechange``), a
closed data channel, or a call that never connected (``CONNECT_TIMEOUT_S`` after the answer: a
client that posted an offer and vanished must not keep its place in the queue). A connected client
that vanishes without closing is noticed by aioice's consent checks (RFC 7675: six failed checks
5 s apart, then the connection fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiortc import MediaStreamTrack, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.rtcdatachannel import RTCDataChannel

from core.config import WebRTCConfig
from gateway.realtime.webrtc import ice
from gateway.realtime.webrtc.channel import WebRTCChannel
from gateway.realtime.webrtc.microphone import MIC_PTIME_MS, pump_audio, quick_mic
from gateway.realtime.webrtc.sdp import Offer, bad_offer, with_mic_ptime
from gateway.realtime.webrtc.tracks import AUDIO_EXECUTOR, OutboundAudioTrack, pump_video
from gateway.rest.models import ApiError

log = logging.getLogger(__name__)
# aioice logs every candidate pair's every state at INFO: a dozen lines per call.
logging.getLogger("aioice").setLevel(logging.WARNING)

EVENTS_LABEL = "oai-events"
CONNECT_TIMEOUT_S = 20.0
CLOSE_GONE = 1006


class Call:
    """A peer connection and what runs on it: the data channel, the media pumps, the output track."""

    def __init__(self, call_id: str, channel: WebRTCChannel, max_frame_rate: float,
                 network: WebRTCConfig | None = None) -> None:
        self.id = call_id
        self.channel = channel
        channel.on_close = self.close  # the session ended: so does the call
        self.max_frame_rate = max_frame_rate
        network = network or WebRTCConfig()
        ice.install(network)
        self.pc = RTCPeerConnection(ice.rtc_configuration(network))
        self.outbound = OutboundAudioTrack(channel.playback)
        self._tasks: set[asyncio.Task] = set()
        self._audio_in = False
        self._video_in = False
        self._closed = False

    @property
    def state(self) -> str:
        return self.pc.connectionState

    async def answer(self, offer: Offer) -> str:
        """The answer SDP, with its host candidates; ``ApiError`` 400 if aiortc cannot take the offer."""
        pc = self.pc
        pc.on("datachannel", self._on_datachannel)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)
        try:
            # Our audio transceiver first, Opus only: the outbound track sends Opus frames as they are.
            audio = pc.addTransceiver(self.outbound, direction="sendrecv")
            audio.setCodecPreferences([c for c in RTCRtpSender.getCapabilities("audio").codecs
                                       if c.mimeType.lower() == "audio/opus"])
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer.sdp, type="offer"))
            # The microphone feeds VAD/ASR, not a speaker: its packets come to us as they arrive.
            mics = [quick_mic(t.receiver, self.id) for t in pc.getTransceivers() if t.kind == "audio"]
            await pc.setLocalDescription(await pc.createAnswer())
        except Exception as exc:  # noqa: BLE001 - aiortc raises what the offer provokes
            raise bad_offer(f"it cannot be answered ({exc.__class__.__name__}: {str(exc)[:160]})") from None
        if None in mics:
            raise ApiError(500, "this gateway cannot take a call's microphone (its aiortc is not the pinned "
                           "version)", "server_error")
        self._spawn(self._watch_connect(), "webrtc-connect-watch")
        return with_mic_ptime(pc.localDescription.sdp, MIC_PTIME_MS)

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_datachannel(self, dc: RTCDataChannel) -> None:
        if dc.label == EVENTS_LABEL:
            self.channel.attach(dc)
        else:
            log.info("call %s: data channel %r ignored (events ride %r)", self.id, dc.label, EVENTS_LABEL)

    def _on_track(self, track: MediaStreamTrack) -> None:
        channel = self.channel

        def live() -> bool:
            return channel.live

        if track.kind == "audio" and not self._audio_in:
            self._audio_in = True
            # aiortc tells of the track inside setRemoteDescription, before any packet can arrive.
            packets = next((quick_mic(t.receiver, self.id) for t in self.pc.getTransceivers()
                            if t.receiver.track is track), None)
            if packets is None:  # answer() refuses the call
                return
            self._spawn(pump_audio(packets, channel.deliver_microphone, AUDIO_EXECUTOR), "webrtc-audio-in")
        elif track.kind == "video" and not self._video_in:
            self._video_in = True
            self._spawn(pump_video(track, channel.deliver, live, self.max_frame_rate), "webrtc-video-in")

    def _on_state(self) -> None:
        state = self.pc.connectionState
        log.info("call %s: connection %s", self.id, state)
        if state in ("failed", "closed"):
            self.channel.peer_gone(CLOSE_GONE if state == "failed" else 1000, f"connection {state}")

    async def _watch_connect(self) -> None:
        await asyncio.sleep(CONNECT_TIMEOUT_S)
        if self.pc.connectionState != "connected" or not self.channel.open:
            log.info("call %s: not connected within %.0f s (%s)", self.id, CONNECT_TIMEOUT_S, self.pc.connectionState)
            self.channel.peer_gone(CLOSE_GONE, "the call never connected")

    async def close(self) -> None:
        """Close the connection and stop its tasks; idempotent."""
        if self._closed:
            return
        self._closed = True
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self.outbound.stop()
        with contextlib.suppress(Exception):
            await self.pc.close()
        self.channel.peer_gone(1000, "call closed")
