"""``python -m worker --config config.json --index 0``: serve one worker on base_port + index."""

from __future__ import annotations

import argparse

import uvicorn

from core.config import add_cli_arguments, config_from_cli


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
    uvicorn.run(
        create_app(config, args.index), host=config.workers.host, port=port, log_level="warning",
        ws_max_size=config.limits.transport_max_bytes, ws_ping_interval=20, ws_ping_timeout=20,
    )


if __name__ == "__main__":
    main()
