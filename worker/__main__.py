"""``python -m worker --config config.json --index 0``: serve one worker on base_port + index."""

from __future__ import annotations

import argparse

import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from core.config import add_cli_arguments, config_from_cli


class _AbortOnPingTimeout(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSockets, except that a missed pong aborts the socket.

    uvicorn answers a keepalive timeout with ``transport.close()``, which waits for the write
    buffer to drain before the app hears of it. After a silent network cut mid-reply nothing
    drains (TCP retries for ~15 min), so the session kept its slot until the link came back.
    A gateway that does not answer pings will not read the rest either.
    """

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()
        self.transport.abort()  # connection_lost now: the session sees the disconnect


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    add_cli_arguments(parser)
    parser.add_argument("--index", type=int, default=0, help="worker index; port = workers.base_port + index")
    parser.add_argument("--worker-port", type=int, help="listen on this port instead of base_port + index")
    args = parser.parse_args()
    config = config_from_cli(args)
    from core.logctx import setup_logging

    setup_logging(f"w{args.index}")  # session=<id> worker=<id> on session-scoped lines
    from worker.app import create_app

    port = args.worker_port or config.workers.base_port + args.index
    ping = config.workers.ping_interval_s  # the gateway pings its end as often (gateway/app.py)
    uvicorn.run(
        create_app(config, args.index), host=config.workers.host, port=port, log_level="warning",
        # asyncio, not uvloop (which the gateway runs on, and uvicorn's "auto" would pick): on a
        # loaded machine (three CPU hogs) a "Stop." spoken over the reply's echo was taken as a
        # backchannel in 3 of 10 trials on uvloop, 1 of 40 on asyncio (docs/benchmarks.md).
        loop="asyncio",
        ws_max_size=config.limits.transport_max_bytes, ws_ping_interval=ping, ws_ping_timeout=ping,
        ws=_AbortOnPingTimeout,
    )


if __name__ == "__main__":
    main()
