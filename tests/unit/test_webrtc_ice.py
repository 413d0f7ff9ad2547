"""ICE beyond loopback (``webrtc`` in config.json): the gateway's candidates in the configured UDP
port range, the public address offered beside them, and a call that still connects."""

from __future__ import annotations

import asyncio
import json
import re

import aiortc.rtcicetransport
import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription

from core.config import AppConfig, ConfigError, load_config
from gateway.realtime.webrtc import ice

PUBLIC = "203.0.113.7"  # TEST-NET-3: never routed


def interface() -> str:
    """An IPv4 address of this machine's that aioice offers (it never offers loopback)."""
    from aioice.ice import get_host_addresses

    addresses = get_host_addresses(use_ipv4=True, use_ipv6=False)
    if not addresses:
        pytest.skip("no non-loopback IPv4 interface")
    return addresses[0]


def candidates(sdp: str) -> list[tuple[str, int, str]]:
    """(address, port, type) of each candidate line."""
    return [(m[1], int(m[2]), m[3]) for m in re.finditer(r"a=candidate:\S+ \d+ udp \d+ (\S+) (\d+) typ (\w+)", sdp)]


@pytest.fixture
def gateway_ice(monkeypatch):
    """Install the configured agent for the gateway's side only (the client made its own first)."""
    original = aiortc.rtcicetransport.Connection

    def install(**settings) -> None:
        ice.install(AppConfig(webrtc=settings).webrtc)

    yield install
    monkeypatch.setattr(aiortc.rtcicetransport, "Connection", original)
    ice.ConfiguredConnection.settings = AppConfig().webrtc


async def offer_and_answer(install, **settings):
    client = RTCPeerConnection(ice.rtc_configuration(AppConfig().webrtc))
    opened = asyncio.Event()
    channel = client.createDataChannel("oai-events")
    channel.on("open", opened.set)
    await client.setLocalDescription(await client.createOffer())
    install(**settings)
    server = RTCPeerConnection(ice.rtc_configuration(AppConfig(webrtc=settings).webrtc))
    await server.setRemoteDescription(RTCSessionDescription(client.localDescription.sdp, "offer"))
    await server.setLocalDescription(await server.createAnswer())
    answer = server.localDescription.sdp
    await client.setRemoteDescription(RTCSessionDescription(answer, "answer"))
    return client, server, answer, opened


async def test_candidates_in_the_port_range_with_the_public_address_and_the_call_connects(gateway_ice):
    client, server, answer, opened = await offer_and_answer(
        gateway_ice, udp_port_min=41000, udp_port_max=41009, public_ip=PUBLIC, host_addresses=[interface()])
    try:
        found = candidates(answer)
        hosts = [c for c in found if c[2] == "host"]
        assert len(hosts) == 1 and hosts[0][0] == interface() and 41000 <= hosts[0][1] <= 41009
        assert (PUBLIC, hosts[0][1], "srflx") in found, "the public address is offered on the same port"
        await asyncio.wait_for(opened.wait(), 10)  # the host candidate still connects on this machine
    finally:
        await client.close()
        await server.close()


async def test_a_full_range_leaves_the_interface_out_and_says_so(gateway_ice, caplog):
    import socket

    busy = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    busy.bind((interface(), 0))
    port = busy.getsockname()[1]
    try:
        client, server, answer, _ = await offer_and_answer(
            gateway_ice, udp_port_min=port, udp_port_max=port, host_addresses=[interface()])
        assert candidates(answer) == []
        assert f"no free UDP port on {interface()}" in caplog.text
        await client.close()
        await server.close()
    finally:
        busy.close()


def test_bad_webrtc_settings_are_named(tmp_path):
    for bad, words in [({"udp_port_min": 41000}, "set both udp_port_min and udp_port_max"),
                       ({"udp_port_min": 41010, "udp_port_max": 41000}, "is above udp_port_max"),
                       ({"public_ip": "gateway.example.org"}, "webrtc.public_ip"),
                       ({"ice_servers": [{"urls": "turn:turn.example.org:3478"}]}, "needs username and credential"),
                       ({"ice_servers": [{"urls": ["https://stun.example.org"]}]}, "is not a stun:, turn: or turns: URL"),
                       ({"reply_packet_ms": 30}, "webrtc.reply_packet_ms: Input should be 20 or 40")]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            path = tmp_path / "config.json"
            path.write_text(json.dumps({"webrtc": bad}))
            load_config(path)


def test_ice_servers_reach_aiortc():
    config = AppConfig(webrtc={"ice_servers": [{"urls": "stun:stun.example.org:3478"},
                                                {"urls": ["turn:turn.example.org:3478?transport=udp"],
                                                 "username": "u", "credential": "p"}]}).webrtc
    servers = ice.rtc_configuration(config).iceServers
    assert [s.urls for s in servers] == [["stun:stun.example.org:3478"], ["turn:turn.example.org:3478?transport=udp"]]
    assert servers[1].username == "u" and servers[1].credential == "p"
    assert ice.rtc_configuration(AppConfig().webrtc).iceServers == []  # not Google's default STUN server
