"""What a call's outbound audio track holds and has played, and the events OpenAI sends only on
WebRTC because only there does the server play the audio itself.

Reply audio reaches the call as binary frames from the worker (what ``response.output_audio.delta``
events would carry, ``core/audio_frames.py``); instead of passing them on, the channel encodes
their PCM into 40 ms Opus frames (20 if ``webrtc.reply_packet_ms`` says so; ``tracks.OpusFramer``,
off the event loop) and queues the frames here, and the outbound track takes one frame every 40
(or 20) ms in real time (``pull``). So the gateway knows, per response, how much was received
and how much was actually played, and says so as OpenAI does:

- ``output_audio_buffer.started``: the first audio of a response goes out;
- ``output_audio_buffer.stopped``: the response is done (``response.done``) and all of its audio
  has been played;
- ``output_audio_buffer.cleared``: the queued audio was dropped, on the client's
  ``output_audio_buffer.clear`` or on barge-in (the user spoke while the reply played).

After a cut, the assistant item is truncated to what was heard: a ``conversation.item.truncate``
with ``audio_end_ms`` = what was played goes to the worker once the response is done there (a
truncate while the reply still runs would not stick). A response whose audio was cleared gets no
more audio played: its late deltas are dropped. On a client's clear of a reply still running, the
reply is cancelled unless the client did so itself (OpenAI: the clear "stops generating audio").

Bookkeeping on the event loop, no I/O: the channel passes events in and sends what comes out. The
one door from another thread is ``push_encoded``: the calls' audio thread queues a reply's encoded
frames there without waking the loop while the track plays (it takes them at its next tick);
every method on the loop takes them in first, so what it sees is as if they had been pushed.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.ids import new_id
from core.protocol import server_event

OUTPUT_RATE = 24000  # PCM16 mono, what the worker's audio deltas carry
# One queued frame, one RTP packet: 40 ms by default (``webrtc.reply_packet_ms``), the length the
# call's answer asks of the browser's microphone too (``microphone.MIC_PTIME_MS``). Half the packets
# of 20 ms ones to pace, packetise, protect and send (-24 % of a 1-call gateway's CPU, side by
# side); the first packet leaves as soon as a reply's first 100 ms piece arrives, as before, and a
# cut reply plays at most 20 ms more.
FRAME_MS = 40
PACKET_MS = (20, 40)  # the lengths a call's reply may use
GATEWAY_EVENT_PREFIX = "gw_"  # event ids of what the gateway itself sends the worker
KEEP_RESPONSES = 16

Emit = Callable[[dict[str, Any]], None]


def gateway_event_id() -> str:
    """An event id the channel recognises in the worker's ``error`` events (not the client's)."""
    return new_id(GATEWAY_EVENT_PREFIX + "evt")


@dataclass(slots=True)
class ResponseAudio:
    """One response's audio at the gateway; sample counts at 24 kHz."""

    response_id: str
    item_id: str
    received: int = 0
    played: int = 0
    started: bool = False  # output_audio_buffer.started sent
    done: bool = False  # response.done seen: no more audio will come
    ended: bool = False  # stopped or cleared: nothing more of it is played
    cancel_asked: bool = False  # a response.cancel went to the worker (from the client or from us)
    truncate_ms: int | None = None  # to truncate to, once done
    truncated: bool = False

    @property
    def played_ms(self) -> int:
        return self.played * 1000 // OUTPUT_RATE


class Playback:
    """The outbound audio queue of one call and its ``output_audio_buffer.*`` events.

    ``to_client`` sends an event on the data channel; ``to_worker`` sends a client event to the
    worker (as if the client had sent it); each queued frame holds ``frame_ms`` of audio."""

    def __init__(self, to_client: Emit, to_worker: Emit, frame_ms: int = FRAME_MS) -> None:
        if frame_ms not in PACKET_MS:
            raise ValueError(f"a reply frame is 20 or 40 ms, not {frame_ms}")
        self.frame_ms = frame_ms
        self.frame_samples = OUTPUT_RATE * frame_ms // 1000
        self._to_client = to_client
        self._to_worker = to_worker
        self._queue: collections.deque[tuple[ResponseAudio, bytes]] = collections.deque()  # one frame each
        self._responses: collections.OrderedDict[str, ResponseAudio] = collections.OrderedDict()
        self.on_push: Callable[[], None] | None = None  # frames were queued (the track wakes if idle)
        # Encoded frames from the audio thread, not yet taken in (deque appends and pops are atomic).
        self._encoded: collections.deque[tuple[str, str, list[bytes]]] = collections.deque()

    def push_encoded(self, loop: asyncio.AbstractEventLoop, response_id: str, item_id: str,
                     frames: list[bytes]) -> None:
        """From the audio thread: a response's encoded frames. The loop is woken only when nothing
        was queued (a reply's first frame leaves at once); while the track plays, its next tick
        takes them in. Should the queue run dry just as this reads it, they wait for that tick."""
        idle = not self._queue and not self._encoded
        self._encoded.append((response_id, item_id, frames))
        if idle:
            loop.call_soon_threadsafe(self._take_encoded)

    def _take_encoded(self) -> None:
        while self._encoded:
            self._push(*self._encoded.popleft())

    # ------------------------------------------------------------------ from the worker

    def response(self, response_id: str, item_id: str = "") -> ResponseAudio:
        r = self._responses.get(response_id)
        if r is None:
            r = self._responses[response_id] = ResponseAudio(response_id, item_id)
            while len(self._responses) > KEEP_RESPONSES:
                self._responses.popitem(last=False)
        elif item_id and not r.item_id:
            r.item_id = item_id
        return r

    @property
    def buffered(self) -> int:
        """Samples queued, not yet played."""
        self._take_encoded()
        return len(self._queue) * self.frame_samples

    def push(self, response_id: str, item_id: str, frames: list[bytes]) -> None:
        """Encoded frames of a response, queued behind what is there (on the loop)."""
        self._take_encoded()  # what the audio thread queued came first
        self._push(response_id, item_id, frames)

    def _push(self, response_id: str, item_id: str, frames: list[bytes]) -> None:
        r = self.response(response_id, item_id)
        if r.ended or not frames:
            return  # cleared: its late audio is not played
        r.received += len(frames) * self.frame_samples
        self._queue.extend((r, frame) for frame in frames)
        if self.on_push is not None:
            self.on_push()

    def done(self, response_id: str) -> None:
        """``response.done``: the response sends no more audio."""
        self._take_encoded()
        r = self._responses.get(response_id)
        if r is None:
            return
        r.done = True
        self._maybe_stopped(r)
        self._maybe_truncate(r)

    @property
    def active(self) -> ResponseAudio | None:
        """The response being played, or queued to play, if any."""
        self._take_encoded()
        if self._queue:
            return self._queue[0][0]
        for r in reversed(self._responses.values()):
            if r.started and not r.ended:
                return r  # playing, with its buffer momentarily empty
        return None

    # ------------------------------------------------------------------ from the client

    def client_cancelled(self) -> None:
        """The client sent ``response.cancel``: every response still running is being cancelled."""
        self._take_encoded()
        for r in self._responses.values():
            if not r.done:
                r.cancel_asked = True

    def clear(self, barge_in: bool) -> ResponseAudio | None:
        """Drop the queued audio (``output_audio_buffer.clear``, or barge-in); says ``cleared``."""
        self._take_encoded()
        cut = self.active
        cut_ids = {r.response_id for r, _ in self._queue}
        self._queue.clear()
        for rid in cut_ids:
            self._responses[rid].ended = True
        last = cut or (next(reversed(self._responses.values())) if self._responses else None)
        self._to_client(server_event("output_audio_buffer.cleared", response_id=last.response_id if last else ""))
        if cut is None:
            return None
        cut.ended = True
        if not cut.done and not barge_in and not cut.cancel_asked:
            # The worker cancels on barge-in itself; a client's clear stops the generation here.
            cut.cancel_asked = True
            self._to_worker({"type": "response.cancel", "event_id": gateway_event_id(), "response_id": cut.response_id})
        if cut.item_id:
            # Even when all that arrived was played: the worker counts what it sent, and more may
            # have been on its way.
            cut.truncate_ms = cut.played_ms
            self._maybe_truncate(cut)
        return cut

    # ------------------------------------------------------------------ to the track

    def pull(self) -> bytes | None:
        """The next frame to play, or None when the queue is dry (the track sends silence)."""
        self._take_encoded()
        if not self._queue:
            return None
        r, frame = self._queue.popleft()
        if not r.started:
            r.started = True
            self._to_client(server_event("output_audio_buffer.started", response_id=r.response_id))
        r.played += self.frame_samples
        self._maybe_stopped(r)
        return frame

    # ------------------------------------------------------------------ internals

    def _maybe_stopped(self, r: ResponseAudio) -> None:
        if r.done and r.started and not r.ended and r.played >= r.received:
            r.ended = True
            self._to_client(server_event("output_audio_buffer.stopped", response_id=r.response_id))

    def _maybe_truncate(self, r: ResponseAudio) -> None:
        if r.done and r.truncate_ms is not None and not r.truncated:
            r.truncated = True
            self._to_worker({"type": "conversation.item.truncate", "event_id": gateway_event_id(),
                             "item_id": r.item_id, "content_index": 0, "audio_end_ms": r.truncate_ms})
