"""How a realtime session's events travel: one small interface, whatever carries them.

A session (the gateway's queue-and-relay, the worker's realtime session) only receives client
events, sends server events and closes with a code. ``EventChannel`` is that much and no more,
so a second transport (a WebRTC call: a data channel for the events, media tracks for the audio)
plugs in beside the WebSocket without touching queueing, relaying, limits or recording.
``WebSocketChannel`` is the first implementation, over Starlette's WebSocket.

Shared by both processes (top-level in ``core/``): it imports no model code.
"""

from __future__ import annotations

import abc
import contextlib
import json
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

Message = str | bytes
NO_STATUS = 1005  # a close frame without a code
ABNORMAL = 1006  # the connection was lost: no close frame at all


class ChannelClosed(Exception):
    """The peer has gone (or the channel was closed); ``code`` is the WebSocket close code."""

    def __init__(self, code: int = 1006, reason: str = "") -> None:
        super().__init__(reason or f"closed ({code})")
        self.code = code
        self.reason = reason


class EventChannel(abc.ABC):
    """One peer of a realtime session. Events are JSON text; binary messages pass as bytes."""

    transport = "websocket"  # how the peer is connected, as traces and logs name it

    @abc.abstractmethod
    async def receive(self) -> Message:
        """The next message from the peer; raises ``ChannelClosed`` once the peer has gone."""

    @abc.abstractmethod
    async def send(self, message: Message) -> None:
        """Deliver one message; raises ``ChannelClosed`` when the peer has gone."""

    @abc.abstractmethod
    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close with ``code``; never raises, and does nothing once closed."""

    # A call (``gateway/realtime/webrtc/``): its audio crosses the gateway-worker socket as binary
    # frames (``core/audio_frames.py``); the proxy asks the worker for them.
    binary_audio = False

    # A channel that translates the session's events (the Live dialect's) takes them as dicts,
    # before they are text, and the reply's audio as PCM (``bytes`` in ``delta``), not base64.
    takes_events = False

    async def send_event(self, event: dict[str, Any]) -> None:
        """One server event, serialised here, once."""
        await self.send(json.dumps(event, separators=(",", ":")))


class WebSocketChannel(EventChannel):
    """An accepted Starlette WebSocket as an ``EventChannel``."""

    __slots__ = ("ws",)

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    async def receive(self) -> Message:
        try:
            message = await self.ws.receive()
        except WebSocketDisconnect as exc:
            raise ChannelClosed(exc.code, exc.reason or "") from None
        except RuntimeError as exc:  # receive after the disconnect message
            raise ChannelClosed(1006, str(exc)) from None
        if message["type"] == "websocket.disconnect":
            code = message.get("code", 1000) or 1000
            if code == NO_STATUS and "reason" not in message:
                # uvicorn's sans-I/O protocol reports a connection lost without a close frame as
                # 1005, as it does a close frame without a code, but only the frame has a reason:
                # a dropped connection is 1006, as the RFC names it (a resumable session is held
                # for a drop, not for a close; issue 72).
                code = ABNORMAL
            raise ChannelClosed(code, message.get("reason") or "")
        text = message.get("text")
        if text is not None:
            return text
        return message.get("bytes") or b""

    async def send(self, message: Message) -> None:
        try:
            if isinstance(message, str):
                await self.ws.send_text(message)
            else:
                await self.ws.send_bytes(message)
        except WebSocketDisconnect as exc:
            raise ChannelClosed(exc.code, exc.reason or "") from None
        except (RuntimeError, OSError) as exc:  # the socket is already gone
            raise ChannelClosed(1006, str(exc)) from None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.ws.client_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await self.ws.close(code, reason[:120])
