"""``python -m gateway --config config.json``: the public entry point (default port 8006)."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from core.config import ConfigError, load_config


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    parser.add_argument("--config", default="config.json")
    parser.add_argument("--port", type=int, help="override gateway.port")
    parser.add_argument("--workers", type=int, help="override workers.count")
    args = parser.parse_args()
    try:
        config = load_config(args.config, {"gateway.port": args.port, "workers.count": args.workers})
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gateway %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from gateway.app import create_app

    uvicorn.run(
        create_app(config), host=config.gateway.host, port=config.gateway.port, log_level="warning",
        ws_max_size=config.limits.max_message_bytes, ws_ping_interval=20, ws_ping_timeout=20,
    )


if __name__ == "__main__":
    main()
