"""Where the gateway's end of a call can be reached: host candidates in a port range, the public
address in front of a NAT, and STUN/TURN servers (``webrtc`` in config.json).

aiortc gathers candidates with aioice, which binds each interface on a random port and knows
neither a port range nor an address mapped by a NAT. A container or a cloud VM needs both: the
operator forwards one UDP range and says which address clients see. ``ConfiguredConnection`` is
aioice's ``Connection`` with that much more, and aiortc is given it in place of the original
(``install``, once per process: the gateway has one configuration):

- ``udp_port_min``..``udp_port_max``: each host candidate binds the first free port of the range,
  from a random start (so calls do not all probe the same ports);
- ``public_ip``: offered as a server-reflexive candidate on the same port beside each host
  candidate (what a STUN server would have told us behind a 1:1 NAT); peers on the same network
  still use the host candidate;
- ``host_addresses``: only these interfaces are offered (default: all);
- ``ice_servers``: aiortc's own STUN (a server-reflexive candidate) and TURN (a relayed one).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket

import aiortc.rtcicetransport
from aioice import Candidate, Connection
from aioice.candidate import candidate_foundation, candidate_priority
from aioice.ice import StunProtocol, server_reflexive_candidate
from aioice.turn import UDP_SOCKET_BUFFER_SIZE
from aiortc import RTCConfiguration, RTCIceServer

from core.config import WebRTCConfig

log = logging.getLogger(__name__)


class ConfiguredConnection(Connection):
    """aioice's ICE agent, gathering as ``webrtc`` in config.json says."""

    settings = WebRTCConfig()

    async def get_component_candidates(self, component: int, addresses: list[str],
                                       timeout: int = 5) -> list[Candidate]:
        s = self.settings
        if s.host_addresses:
            addresses = [a for a in addresses if a in s.host_addresses]
        if s.port_range is None:
            candidates = await super().get_component_candidates(component, addresses, timeout)
        else:
            candidates = await self._ranged_candidates(component, addresses, s.port_range, timeout)
        return candidates + self._public_candidates(candidates)

    async def _ranged_candidates(self, component: int, addresses: list[str], ports: range,
                                 timeout: int) -> list[Candidate]:
        protocols = [p for p in [await self._bind(address, component, ports) for address in addresses] if p]
        self._protocols += protocols
        candidates = [p.local_candidate for p in protocols]
        if self.stun_server:  # what aioice would ask of the STUN server for its own sockets
            tasks = [asyncio.create_task(server_reflexive_candidate(p, self.stun_server)) for p in protocols
                     if ipaddress.ip_address(p.local_candidate.host).version == 4]
            if tasks:
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                candidates += [t.result()[0] for t in done if t.exception() is None]
                for task in pending:
                    task.cancel()
        if self.turn_server:  # no host addresses: aioice does only the relayed candidate
            candidates += await super().get_component_candidates(component, [], timeout)
        return candidates

    async def _bind(self, address: str, component: int, ports: range) -> StunProtocol | None:
        loop = asyncio.get_running_loop()
        start = random.randrange(len(ports))
        for port in (ports[(start + i) % len(ports)] for i in range(len(ports))):
            try:
                transport, protocol = await loop.create_datagram_endpoint(
                    lambda: StunProtocol(self), local_addr=(address, port))
            except OSError:
                continue
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_SOCKET_BUFFER_SIZE)
            protocol.local_candidate = Candidate(
                foundation=candidate_foundation("host", "udp", address), component=component, transport="udp",
                priority=candidate_priority(component, "host"), host=address, port=port, type="host")
            return protocol
        log.warning("webrtc: no free UDP port on %s in %d-%d: that interface is not offered", address,
                    ports.start, ports.stop - 1)
        return None

    def _public_candidates(self, candidates: list[Candidate]) -> list[Candidate]:
        public = self.settings.public_ip
        if public is None:
            return []
        version = ipaddress.ip_address(public).version
        return [Candidate(foundation=candidate_foundation("srflx", "udp", c.host), component=c.component,
                          transport="udp", priority=candidate_priority(c.component, "srflx"), host=public,
                          port=c.port, type="srflx", related_address=c.host, related_port=c.port)
                for c in candidates if c.type == "host" and ipaddress.ip_address(c.host).version == version
                and c.host != public]


def install(settings: WebRTCConfig) -> None:
    """Give aiortc the configured ICE agent (process-wide)."""
    ConfiguredConnection.settings = settings
    aiortc.rtcicetransport.Connection = ConfiguredConnection


def rtc_configuration(settings: WebRTCConfig) -> RTCConfiguration:
    """The peer connection's configuration: the configured STUN/TURN servers and none else
    (aiortc would ask Google's STUN server by default)."""
    return RTCConfiguration(iceServers=[RTCIceServer(urls=s.urls, username=s.username, credential=s.credential)
                                        for s in settings.ice_servers])
