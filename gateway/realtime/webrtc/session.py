"""The session settings a call cares about at the gateway.

- Media formats. On a call the audio is Opus on the tracks; between the gateway and the worker it
  is PCM16 mono 24 kHz both ways (the gateway makes the appends and plays the deltas). A client's
  ``session.update`` that names another wire format (G.711, 16 kHz) would make the worker read our
  appends, and write its deltas, in a format the tracks do not carry, so the call pins both
  formats in every ``session.update`` it passes on. OpenAI ignores them on WebRTC as well.
- The session a call starts with (the ``session`` part of an app server's offer, or the session an
  ephemeral key was minted with) is the proxy's ``initial_session`` (``initial_session.py``), with
  the call's formats pinned here (``initial_update``).
- Whether the session's turn detection interrupts a reply (``interrupts``): barge-in at the gateway
  follows it.
"""

from __future__ import annotations

import json
from typing import Any


PCM_24K = {"type": "audio/pcm", "rate": 24000}


def pin_formats(session: dict[str, Any], beta: bool) -> dict[str, Any]:
    """``session`` with the call's wire formats in place of any the client named."""
    session = dict(session)
    if beta:
        for key in ("input_audio_format", "output_audio_format"):
            if key in session:
                session[key] = "pcm16"
        return session
    audio = session.get("audio")
    if isinstance(audio, dict):
        audio = dict(audio)
        for side in ("input", "output"):
            part = audio.get(side)
            if isinstance(part, dict) and "format" in part:
                audio[side] = {**part, "format": dict(PCM_24K)}
        session["audio"] = audio
    return session


def pin_update(text: str, beta: bool) -> str:
    """A client's ``session.update`` (JSON text) with the call's wire formats."""
    try:
        event = json.loads(text)
    except ValueError:
        return text  # the worker reports it
    if not isinstance(event, dict) or event.get("type") != "session.update" or not isinstance(
            event.get("session"), dict):
        return text
    event["session"] = pin_formats(event["session"], beta)
    return json.dumps(event, separators=(",", ":"))


def initial_update(session: dict[str, Any], beta: bool) -> str:
    """The ``session.update`` a call starts with (JSON), its formats pinned."""
    return json.dumps({"type": "session.update", "session": pin_formats(session, beta)}, separators=(",", ":"))


def interrupts(session: Any, beta: bool) -> bool:
    """Whether this session's turn detection cuts a playing reply when the user speaks."""
    if not isinstance(session, dict):
        return True
    if beta:
        detection = session.get("turn_detection")
    else:
        detection = ((session.get("audio") or {}).get("input") or {}).get("turn_detection")
    if not isinstance(detection, dict):
        return False
    return detection.get("interrupt_response", True) is not False
