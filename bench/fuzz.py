"""Hostile clients for N seconds on a fresh stack (issue 68): the suite's fuzz, run long.

    python -m bench fuzz --seconds 600              # the 10-minute run
    python -m bench fuzz --seconds 60 --seed 1234   # replay a run's cases

The engine is ``devtools/fuzz.py``, the one ``tests/e2e/test_fuzz_live.py`` runs for ~25 s: Realtime
and Live sessions with scripts of nesting bombs, huge, binary and non-JSON frames, wrong and
unknown types, invalid base64, events out of order and floods, and the call routes with hostile
bodies and offers. After every case a fresh session of its dialect must be served within 1 s of
the client leaving, and every slot be idle within 1 s after. One gateway and one cascade worker,
no per-address limits (the fuzz opens two sessions a case), recording on (the fuzz records one
session in five). Prints one table: events sent, sessions opened and served after, crashed
readers (``worker_error`` ends plus tracebacks in the worker's log), slots held past the client,
both processes' RSS after a warm-up, highest and at the end, and every failure with its case seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.launch import Launched, stack_dir  # noqa: E402
from devtools import fuzz  # noqa: E402

DEFAULT_SECONDS = 600.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_cli(args) -> dict[str, Any]:
    seconds = args.seconds or DEFAULT_SECONDS
    with contextlib.ExitStack() as stack:
        tmp = stack_dir(stack, "fuzz")
        launched = stack.enter_context(Launched(Path(tmp), workers=1,
                                                auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}))
        log("fuzz: starting a gateway and a cascade worker")
        launched.wait_ready()
        target = fuzz.Target(url=launched.url, admin_headers=launched.admin_headers,
                             worker_url=launched.worker_url(0), worker_headers=launched.worker_headers,
                             gateway_pid=launched.pid("gateway"), worker_pid=launched.pid("worker0"),
                             gateway_log=Path(tmp) / "gateway.log", worker_log=Path(tmp) / "worker0.log")
        result = asyncio.run(fuzz.run(target, seconds, args.seed, log=log))
    return result.as_dict()


def report(result: dict[str, Any]) -> str:
    return f"## Fuzz: hostile clients, {result['seconds']} s (seed {result['seed']})\n\n" + fuzz.table(result)
