"""``python -m gateway --config config.json``: the public entry point (default port 8006)."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

# httpx imports its command-line tool (rich, pygments) whenever they are installed; the gateway
# never uses it, and they cost ~3 MB of resident memory. Blocked before anything imports httpx.
for _unused in ("rich", "pygments"):
    sys.modules.setdefault(_unused, None)  # type: ignore[assignment]

from core.config import add_cli_arguments, config_from_cli, is_loopback  # noqa: E402 - after the block above


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    add_cli_arguments(parser)
    args = parser.parse_args()
    config = config_from_cli(args)
    from core.logctx import setup_logging

    setup_logging("gateway")  # session=<id> worker=<id> on session-scoped lines
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from gateway.app import create_app

    tls = None
    if config.gateway.tls_enabled() or not is_loopback(config.gateway.host):
        # cryptography (~15 MB resident) only when HTTPS is on or worth a warning.
        from gateway.tls import TlsError, tls_files

        try:
            tls = tls_files(config)
        except TlsError as exc:
            print(f"omniduplex: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    uvicorn.run(
        create_app(config), host=config.gateway.host, port=config.gateway.port, log_level="warning",
        # uvloop (requirements.txt): a call wakes the loop ~100 times a second (its packets, the
        # audio thread's hand-offs, the worker's frames), and asyncio's Python loop is a share of
        # each wake-up: -5 % of the gateway's CPU at 1 and at 10 calls, both at once (docs/benchmarks.md).
        loop="uvloop",
        ws_max_size=config.limits.transport_max_bytes, ws_ping_interval=20, ws_ping_timeout=20,
        # Sans-I/O WebSockets: keepalive by timers, no tasks per connection (1,000 waiting
        # clients cost far less memory than with the task-based implementation).
        ws="websockets-sansio",
        # No permessage-deflate: base64 audio barely compresses, and each connection's zlib
        # state costs ~46 KB and CPU on every relayed event.
        ws_per_message_deflate=False,
        # The client's address is the app's own rule (auth.trust_forwarded_for, forwarded_hops in
        # gateway/access/policy.py): uvicorn's default would rewrite it from X-Forwarded-For for
        # any local peer first, whatever that setting says (issue 68).
        proxy_headers=False,
        ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None,
    )


if __name__ == "__main__":
    main()
