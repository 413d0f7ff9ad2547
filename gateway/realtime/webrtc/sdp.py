"""What an offer must hold before the gateway makes a peer connection for it.

A call needs an audio m-line offering Opus (the microphone; the reply's audio goes back on it;
every browser offers Opus, and the call speaks nothing else), a data channel (``m=application ...
SCTP``: the ``oai-events`` channel) and the ICE and DTLS parameters to reach it. Anything else is
refused with 400 and a reason the developer can act on, before any ``RTCPeerConnection``, port or
queue place exists (``invalid_offer``). A video m-line is optional (the omni page's camera).
At most one m-line of each kind, whatever its port: aiortc makes a transceiver for every audio and
video m-line, port 0 ("rejected") included, and once connected a decoder thread for each (issue 68:
150 extra ``m=audio 0`` sections were answered with 151 active ones); a call has one microphone,
one camera and one events channel. A port-0 line still does not count as the microphone or the
data channel the call needs.
"""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass

from gateway.rest.models import ApiError

MAX_SDP_BYTES = 64 * 1024  # a browser's offer is 3-6 KB


@dataclass(frozen=True, slots=True)
class Offer:
    sdp: str
    video: bool  # the client sends a camera track


def bad_offer(reason: str) -> ApiError:
    return ApiError(400, f"invalid SDP offer: {reason}", "invalid_offer", "sdp")


async def check_offer(text: str) -> Offer:
    """The offer if a call can be made of it; ``ApiError`` 400 saying what is missing if not.
    (aiortc's parser is imported with the first offer, in a thread: see ``routes._media``.)"""
    sdp_module = await asyncio.to_thread(importlib.import_module, "aiortc.sdp")
    return parse_offer(text, sdp_module.SessionDescription)


def parse_offer(text: str, session_description) -> Offer:
    """``check_offer``'s checks, given aiortc's ``SessionDescription``."""
    if not text.strip():
        raise bad_offer("the body is empty; send the offer's SDP (application/sdp, or the 'sdp' part)")
    if len(text.encode()) > MAX_SDP_BYTES:
        raise bad_offer(f"larger than {MAX_SDP_BYTES // 1024} KiB")
    if not text.lstrip().startswith("v=0"):
        raise bad_offer("not an SDP session description (it must start with 'v=0')")
    sdp = text if text.endswith("\n") else text + "\r\n"
    try:
        parsed = session_description.parse(sdp)
    except Exception as exc:  # noqa: BLE001 - aiortc's parser asserts, and raises what it meets
        raise bad_offer(f"could not be parsed ({exc.__class__.__name__}: {str(exc)[:120]})") from None
    kinds = [m.kind for m in parsed.media]
    for kind in sorted(set(kinds)):
        if kind not in ("audio", "video", "application"):
            raise bad_offer(f"an m-line of kind {kind!r}; a call takes audio, video and one data channel")
        if kinds.count(kind) > 1:
            rejected = sum(1 for m in parsed.media if m.kind == kind and m.port == 0)
            raise bad_offer(f"{kinds.count(kind)} {kind} m-lines ({rejected} on port 0, which count too); a call "
                            "takes one (a microphone, a camera, the 'oai-events' data channel): remove the extra "
                            "tracks or transceivers")
    audio = [m for m in parsed.media if m.kind == "audio" and m.port != 0]
    if not audio:
        raise bad_offer(f"no audio m-line (m-lines: {', '.join(kinds) or 'none'}); add a microphone track or an "
                        "audio transceiver")
    if not any(m.kind == "application" and "SCTP" in m.profile.upper() and m.port != 0 for m in parsed.media):
        raise bad_offer("no data channel (m=application ... SCTP); create the 'oai-events' data channel before "
                        "the offer")
    for m in parsed.media:  # every line: aiortc sets each up, port 0 or not
        if m.ice is None or not m.ice.usernameFragment or not m.ice.password:
            raise bad_offer(f"the {m.kind} m-line has no ICE credentials (a=ice-ufrag, a=ice-pwd)")
        if m.dtls is None or not m.dtls.fingerprints:
            raise bad_offer(f"the {m.kind} m-line has no DTLS fingerprint (a=fingerprint)")
    if not any(c.mimeType.lower() == "audio/opus" for m in audio for c in m.rtp.codecs):
        raise bad_offer("the audio m-line does not offer Opus (a=rtpmap:<pt> opus/48000/2), the call's codec")
    video = any(m.kind == "video" and m.port != 0 and m.direction in (None, "sendrecv", "sendonly")
                for m in parsed.media)
    return Offer(sdp=sdp, video=video)


def with_mic_ptime(answer: str, ms: int) -> str:
    """The answer with ``a=ptime:<ms>`` in its audio section: a browser sizes the microphone's Opus
    packets to the remote description's ptime (libwebrtc's Opus encoder takes the next frame length
    at or above it), so 40 ms a packet halves the packets a call's gateway receives and unprotects
    (RFC 4566 6: ptime is the length the receiver would like; a sender that ignores it still works).
    An answer whose audio section already says a ptime is left as it is."""
    lines = answer.split("\r\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("m=audio")), None)
    if start is None:
        return answer
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("m=")), len(lines))
    while end > start + 1 and not lines[end - 1]:
        end -= 1  # the SDP's closing CRLF stays last
    if any(line.startswith("a=ptime:") for line in lines[start:end]):
        return answer
    return "\r\n".join([*lines[:end], f"a=ptime:{ms}", *lines[end:]])

