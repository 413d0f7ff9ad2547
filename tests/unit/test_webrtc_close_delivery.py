"""A call that ends delivers its last events first: ``session.closed`` (or the ``error`` that says
why) must reach the client before the gateway hangs up. aiortc ends a connection with an SCTP
ABORT, which drops whatever the client has not acknowledged; the data channel's
``bufferedAmount`` reaching 0 only means the message was handed to SCTP, not that it arrived
(CI: the duplex page's Live call over WebRTC saw no ``session.closed`` after Stop)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription

from gateway.realtime.webrtc import channel as webrtc_channel
from gateway.realtime.webrtc.channel import WebRTCChannel


async def connected_pair():
    """A client and a gateway peer on this machine, the client's ``oai-events`` channel open and
    attached to a ``WebRTCChannel`` on the gateway's side."""
    client, gateway = RTCPeerConnection(), RTCPeerConnection()
    channel = WebRTCChannel()
    attached = asyncio.Event()

    @gateway.on("datachannel")
    def _on_datachannel(dc):
        channel.attach(dc)
        attached.set()

    dc = client.createDataChannel("oai-events")
    await client.setLocalDescription(await client.createOffer())
    await gateway.setRemoteDescription(RTCSessionDescription(client.localDescription.sdp, "offer"))
    await gateway.setLocalDescription(await gateway.createAnswer())
    await client.setRemoteDescription(RTCSessionDescription(gateway.localDescription.sdp, "answer"))
    try:
        await asyncio.wait_for(attached.wait(), 15)
    except TimeoutError:
        await client.close()
        await gateway.close()
        pytest.skip("precondition: the two peers on this machine never connected (no usable interface)")
    return client, gateway, channel, dc


async def test_the_last_events_of_a_call_arrive_before_it_hangs_up(monkeypatch):
    # What is checked is that the close waits for the acknowledgement, not how long it may wait
    # (DRAIN_S, 2 s): this loopback takes ~1 s to carry these 640 kB, more on a busy machine.
    monkeypatch.setattr(webrtc_channel, "DRAIN_S", 10.0)
    client, gateway, channel, dc = await connected_pair()
    got: list[str] = []
    ended = asyncio.Event()
    dc.on("message", got.append)
    dc.on("close", ended.set)
    channel.on_close = gateway.close
    try:
        # What a long reply's transcript leaves queued: 40 events of 16 kB, then the last word.
        for i in range(40):
            await channel.send(json.dumps({"type": "session.output_transcript.delta", "i": i, "delta": "x" * 16000}))
        await channel.send(json.dumps({"type": "session.closed", "reason": "close_requested"}))
        await channel.close()
        await asyncio.wait_for(ended.wait(), 10)
        await asyncio.sleep(0.2)  # anything still in flight
        assert got and json.loads(got[-1])["type"] == "session.closed", f"{len(got)} of 41 events arrived"
        assert len(got) == 41
    finally:
        await client.close()
        await gateway.close()
