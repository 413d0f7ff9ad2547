"""A session opened with an ephemeral key starts with the config it was minted with, as OpenAI's do:
the gateway sends that config to the worker as a ``session.update`` before any client event, and
the client's ``session.created`` already shows it.

The worker greets every connection with ``session.created`` (its defaults) and answers the update
with ``session.updated``; the client gets one ``session.created`` holding the updated session and
no ``session.updated`` (it asked for no update). If the worker refuses the config (an ``error``:
``tools`` on a backend without them, say), the client gets the worker's ``session.created`` and
that error, and the session goes on with the worker's defaults, as after a refused update.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from websockets.exceptions import ConnectionClosed

log = logging.getLogger(__name__)


async def start_with_session(worker, created: str, update: str, timeout_s: float) -> list[str | bytes]:
    """Send ``update`` to ``worker`` (after its ``created`` greeting); the messages the client gets
    first, in order. Anything else the worker says meanwhile follows them, unchanged."""
    try:
        greeting = json.loads(created)
    except ValueError:
        return [created]
    kind = str(greeting.get("type", ""))
    if not kind.endswith(".created"):
        return [created]
    updated_kind = kind.removesuffix(".created") + ".updated"
    after: list[str | bytes] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    with contextlib.suppress(TimeoutError, ConnectionClosed):  # the relay then reports a closed worker
        await worker.send(update)
        while True:
            message = await asyncio.wait_for(worker.recv(), max(0.01, deadline - loop.time()))
            if not isinstance(message, str):
                after.append(message)
                continue
            event = _event(message)
            if event.get("type") == updated_kind and isinstance(event.get("session"), dict):
                greeting["session"] = event["session"]
                return [json.dumps(greeting, separators=(",", ":")), *after]
            after.append(message)
            if event.get("type") == "error":
                log.info("the worker refused an ephemeral key's session config: %s", event.get("error"))
                break
    return [created, *after]


def _event(message: str) -> dict:
    try:
        event = json.loads(message)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}
