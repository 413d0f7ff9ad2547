"""One byte budget for what a client has sent that its worker has not taken yet.

A session holds client messages in two places before they reach the worker: the proxy's list of
events sent while queued (``proxy.py``) and, on a WebRTC call, the channel's inbox (data channel
and sideband events, microphone appends; ``webrtc/channel.py``). Both count against the session's
one ``InboundBudget`` (``limits.queued_bytes``), so a client that floods either is stopped at the
same mark, and the memory a session can hold at the gateway is that number, whatever it sends.
A WebSocket's own receive buffer holds at most one message (uvicorn's sans-I/O protocol pauses
reading after each), so it needs no budget of its own.
"""

from __future__ import annotations

from core.transport import Message

CLOSE_POLICY = 1008


class InboundBudget:
    """Bytes held for the worker: ``take`` before holding a message, ``give`` once it is handed on."""

    __slots__ = ("limit", "held")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, message: Message) -> bool:
        """Count ``message`` if it fits; False (nothing counted) if it would pass the limit."""
        size = len(message)
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, message: Message) -> None:
        self.held = max(0, self.held - len(message))

    def overflow_reason(self, where: str) -> str:
        """The close reason (and error message) when a message did not fit."""
        return (f"the client sent more than {self.limit // 1024} KiB {where} that the session has not taken "
                "yet (limits.queued_bytes)")
