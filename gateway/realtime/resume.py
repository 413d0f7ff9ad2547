"""Resume tokens and the sessions they bring back (issue 72), on this gateway.

A client that asks for the ``session.resume_token`` extension gets a token for its session; when
its connection drops (no deliberate close), the proxy tells the worker to hold the session
(``worker/reattachable.py``) and hands the session's slot here, where it stays taken for
``limits.resume_grace_s``. A connection that presents the token (``?resume_token=``) with the key
that opened the session (or one minted by it) within that time is relayed to the same worker
session; after it, the slot goes back to the queue.

The slot (the ``Lease``) belongs to the ``Resumable``, not to a connection: the proxy that ends
the session releases it, a proxy whose connection was replaced by a newer one does not, and a
held session's timer releases it when nobody came back.

Only the token's hash is kept. A token is refused with one answer whether it never existed or
belongs to another key (nothing to learn by guessing); an expired one is told so, for a while.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from core.session_store import token_hash
from gateway.pool.interface import SessionQueue
from gateway.pool.model import Lease

log = logging.getLogger(__name__)

MARGIN_S = 2.0  # the gateway keeps the slot this much past the worker's grace: never freed while held there
EXPIRED_KEPT = 10_000  # hashes of expired tokens remembered, to say "expired" rather than "invalid"


@dataclass(frozen=True, slots=True)
class ResumeRefusal:
    code: str  # the error event's code
    message: str
    http_status: int


INVALID = ResumeRefusal("invalid_resume_token", "this resume token does not open a session here with this key",
                        403)


@dataclass(eq=False, slots=True)
class Resumable:
    """One resumable session: whose it is, where it runs, and its slot."""

    session_id: str
    token_hash: str
    owner: str | None  # the key that opened it (None on an open service)
    lease: Lease
    connections: int = 1  # attached so far
    held_since: float | None = None  # while no connection is attached
    _timer: asyncio.TimerHandle | None = field(default=None, repr=False)


def new_resume_token() -> str:
    return "rt_" + secrets.token_urlsafe(24)


class ResumableSessions:
    def __init__(self, pool: SessionQueue, grace_s: float) -> None:
        self.pool = pool
        self.grace_s = grace_s
        self._by_hash: dict[str, Resumable] = {}
        self._expired: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_hash)

    def issue(self, session_id: str, owner: str | None, lease: Lease) -> tuple[str, Resumable]:
        token = new_resume_token()
        entry = Resumable(session_id, token_hash(token), owner, lease)
        self._by_hash[entry.token_hash] = entry
        return token, entry

    def hold(self, entry: Resumable) -> None:
        """Its connection dropped: the slot stays taken for the grace period."""
        if self._by_hash.get(entry.token_hash) is not entry:
            return
        entry.held_since = time.monotonic()
        loop = asyncio.get_running_loop()
        entry._timer = loop.call_later(self.grace_s + MARGIN_S, self._expire, entry)
        log.info("session %s held %.0f s for its resume token", entry.session_id, self.grace_s)

    def claim(self, token: str, owner: str | None) -> Resumable | ResumeRefusal:
        """The session ``token`` brings back, if ``owner`` opened it; it is attached from now on
        (a connection still attached is replaced: the worker closes it)."""
        digest = token_hash(token)
        entry = self._by_hash.get(digest)
        if entry is None:
            if digest in self._expired:
                return ResumeRefusal("resume_token_expired", f"the session of this resume token has ended, or "
                                     f"nobody came back within its {self.grace_s:.0f} s grace period", 410)
            return INVALID
        if entry.owner is not None and entry.owner != owner:
            log.warning("session %s: a resume token presented with another key", entry.session_id)
            return INVALID
        if entry._timer is not None:
            entry._timer.cancel()
            entry._timer = None
        entry.held_since = None
        entry.connections += 1
        return entry

    def end(self, entry: Resumable) -> None:
        """The session ended: its token opens nothing any more (the caller releases the slot)."""
        if self._by_hash.pop(entry.token_hash, None) is entry:
            if entry._timer is not None:
                entry._timer.cancel()
            self._forget(entry.token_hash)

    def _expire(self, entry: Resumable) -> None:
        if self._by_hash.get(entry.token_hash) is not entry or entry.held_since is None:
            return
        self.end(entry)
        log.info("session %s not resumed within %.0f s: its slot is released", entry.session_id, self.grace_s)
        self.pool.release(entry.lease)

    def _forget(self, digest: str) -> None:
        self._expired[digest] = time.monotonic()
        while len(self._expired) > EXPIRED_KEPT:
            self._expired.popitem(last=False)
