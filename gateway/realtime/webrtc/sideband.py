"""The sideband: ``wss /v1/realtime?call_id=rtc_...`` joins a running call's session.

While the browser holds the media, the app server keeps the session's logic (tools, instructions)
on a WebSocket of its own, with the service's API key, as with OpenAI. It receives every event the
call's data channel gets (audio stays on the media track) and its events go to the session as if
the browser had sent them.

Any gateway of a cluster takes it. The call lives on the gateway that answered its offer; that one
announces it in Redis (``<prefix>:call:<id>`` = its name, refreshed while the call lasts) and
listens on ``<prefix>:call:<id>:in``. A gateway that gets a sideband for a call it does not hold
publishes the sideband's events there and reads the call's from ``<prefix>:call:<id>:out``, which
the call's gateway feeds while sidebands listen (``join``/``leave``), and ends with ``ended``.
No aiortc here: the WebSocket route loads this module for every gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.protocol import error_event
from core.transport import ChannelClosed, EventChannel

if TYPE_CHECKING:
    from gateway.realtime.webrtc.channel import WebRTCChannel

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008
CLOSE_ENDED = 1000
MAX_BACKLOG = 2000  # events for a sideband that is not reading: past this it is closed
ANNOUNCE_TTL_S = 60
ANNOUNCE_EVERY_S = 20.0


async def _refuse(client: EventChannel, code: str, message: str, close_code: int = CLOSE_POLICY) -> None:
    with contextlib.suppress(ChannelClosed):
        await client.send(json.dumps(error_event(message, code), separators=(",", ":")))
    await client.close(close_code, message[:120])


async def _pump_out(client: EventChannel, backlog: asyncio.Queue[str | None]) -> None:
    """The call's events to the sideband client, until the call ends (None)."""
    while True:
        text = await backlog.get()
        if text is None:
            await client.close(CLOSE_ENDED, "the call ended")
            return
        await client.send(text)


def _tap(backlog: asyncio.Queue[str | None], overflow: asyncio.Event):
    def tap(text: str | None) -> None:
        if backlog.qsize() >= MAX_BACKLOG and text is not None:
            overflow.set()
            return
        backlog.put_nowait(text)
    return tap


async def serve_local(client: EventChannel, call: WebRTCChannel) -> None:
    """A sideband on the call's own gateway: taps its channel, injects its events."""
    backlog: asyncio.Queue[str | None] = asyncio.Queue()
    overflow = asyncio.Event()
    tap = _tap(backlog, overflow)
    if not call.add_tap(tap):
        await _refuse(client, "call_not_found", "the call has ended")
        return
    out = asyncio.create_task(_pump_out(client, backlog))
    stalled = asyncio.create_task(overflow.wait())
    inbound = asyncio.create_task(_pump_in(client, call))
    try:
        done, _ = await asyncio.wait({out, stalled, inbound}, return_when=asyncio.FIRST_COMPLETED)
        if stalled in done:
            await client.close(CLOSE_POLICY, "sideband client is not reading")
    finally:
        call.remove_tap(tap)
        for task in (out, stalled, inbound):
            task.cancel()
        await client.close(CLOSE_ENDED, "")


async def _pump_in(client: EventChannel, call: WebRTCChannel) -> None:
    """The sideband's events into the call; one that sends faster than the session takes is closed
    (1008), the call goes on."""
    with contextlib.suppress(ChannelClosed):
        while True:
            message = await client.receive()
            if isinstance(message, str) and not call.inject(message):
                await _refuse(client, "inbound_overflow", call.budget.overflow_reason("on the sideband"))
                return


class CallBridge:
    """The cluster's side of sidebands: calls announced in Redis, their events over pub/sub."""

    def __init__(self, client: Any, prefix: str, gateway: str) -> None:
        self.redis = client
        self.prefix = prefix
        self.gateway = gateway
        self._hosted: dict[str, asyncio.Task] = {}

    def _key(self, call_id: str, suffix: str = "") -> str:
        return f"{self.prefix}:call:{call_id}{suffix}"

    # ------------------------------------------------------------------ the call's gateway

    def host(self, call_id: str, call: WebRTCChannel, owner: str | None = None) -> None:
        """Announce a call that this gateway answered (with the API key it belongs to, so any
        gateway can tell who may join it), and serve remote sidebands for it."""
        self._hosted[call_id] = asyncio.create_task(self._host(call_id, call, owner), name=f"sideband-host-{call_id}")

    async def unhost(self, call_id: str) -> None:
        task = self._hosted.pop(call_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _host(self, call_id: str, call: WebRTCChannel, owner: str | None) -> None:
        out_channel = self._key(call_id, ":out")
        pubsub = self.redis.pubsub()
        listeners: set[str] = set()
        outbox: asyncio.Queue[str | None] = asyncio.Queue()

        def tap(text: str | None) -> None:
            if listeners or text is None:
                outbox.put_nowait(text)

        async def publish() -> None:
            while True:
                text = await outbox.get()
                await self.redis.publish(out_channel, json.dumps({"kind": "ended"} if text is None
                                                                 else {"kind": "event", "text": text}))
                if text is None:
                    return

        announcement = json.dumps({"gateway": self.gateway, "owner": owner})

        async def announce() -> None:
            while True:
                await self.redis.set(self._key(call_id), announcement, ex=ANNOUNCE_TTL_S)
                await asyncio.sleep(ANNOUNCE_EVERY_S)

        publisher = asyncio.create_task(publish())
        announcer = asyncio.create_task(announce())
        try:
            await pubsub.subscribe(self._key(call_id, ":in"))
            if not call.add_tap(tap):
                return
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                try:
                    body = json.loads(message["data"])
                    kind, sid = body["kind"], str(body.get("sid", ""))
                except (ValueError, KeyError, TypeError):
                    continue
                if kind == "join":
                    listeners.add(sid)
                elif kind == "leave":
                    listeners.discard(sid)
                elif kind == "event" and isinstance(body.get("text"), str) and not call.inject(body["text"]):
                    log.warning("call %s: a remote sideband's event dropped: %s", call_id,
                                call.budget.overflow_reason("on the sideband"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - Redis gone: local sidebands still work
            log.warning("call %s: remote sidebands unavailable (%s)", call_id, exc)
        finally:
            call.remove_tap(tap)
            announcer.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.redis.publish(out_channel, json.dumps({"kind": "ended"})), 2)
                await asyncio.wait_for(self.redis.delete(self._key(call_id)), 2)
            publisher.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), 2)

    # ------------------------------------------------------------------ another gateway

    async def joinable(self, call_id: str, may: Callable[[str | None], bool]) -> bool:
        """Whether another gateway announces ``call_id`` and ``may`` act on it (its owner's key)."""
        found = await self.redis.get(self._key(call_id))
        if found is None:
            return False
        try:
            owner = json.loads(found)["owner"]
        except (ValueError, KeyError, TypeError):
            return False  # an announcement without an owner: joined by no one
        return may(owner)

    async def serve_remote(self, client: EventChannel, call_id: str) -> None:
        """A sideband for a call held by another gateway of the cluster."""
        sid = secrets.token_hex(8)
        in_channel = self._key(call_id, ":in")
        pubsub = self.redis.pubsub()
        await pubsub.subscribe(self._key(call_id, ":out"))

        async def out() -> None:
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                body = json.loads(message["data"])
                if body.get("kind") == "ended":
                    await client.close(CLOSE_ENDED, "the call ended")
                    return
                await client.send(body["text"])

        async def inbound() -> None:
            with contextlib.suppress(ChannelClosed):
                while True:
                    message = await client.receive()
                    if isinstance(message, str):
                        await self.redis.publish(in_channel, json.dumps({"kind": "event", "sid": sid,
                                                                         "text": message}))

        tasks = [asyncio.create_task(out()), asyncio.create_task(inbound())]
        try:
            await self.redis.publish(in_channel, json.dumps({"kind": "join", "sid": sid}))
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.redis.publish(in_channel, json.dumps({"kind": "leave", "sid": sid})), 2)
                await asyncio.wait_for(pubsub.aclose(), 2)
            await client.close(CLOSE_ENDED, "")


async def serve_sideband(client: EventChannel, call_id: str, local: WebRTCChannel | None,
                         bridge: CallBridge | None, may: Callable[[str | None], bool]) -> None:
    """Join ``call_id``'s session: ``local`` when this gateway holds the call (and ``may`` join it),
    else through the cluster; another key's call is answered as no call."""
    if local is not None:
        await serve_local(client, local)
        return
    if bridge is not None:
        try:
            if await bridge.joinable(call_id, may):
                await bridge.serve_remote(client, call_id)
                return
        except Exception as exc:  # noqa: BLE001 - Redis unreachable
            log.warning("sideband for %s: the cluster is unreachable (%s)", call_id, exc)
            await _refuse(client, "cluster_unavailable", "the cluster's Redis is unreachable; try again", 1013)
            return
    await _refuse(client, "call_not_found", f"no call {call_id[:80]!r} (unknown, or already ended)")
