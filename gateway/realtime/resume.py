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

With a shared queue (Redis), the token's hash, its owner and its lease are also written there
(``share_resumable``): a client whose gateway dropped it, or died, comes back through any
gateway, which takes the lease over (``adopt_resumable``); the old gateway hears it and lets go.
A dead gateway's resumable leases are held by the reaper for the grace period, not freed.

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
        pool.on_adopted = self._taken_over

    def wanted(self, extensions: frozenset[str], live: bool) -> bool:
        """A session asked for a token (``?extensions=resume``) and this gateway keeps sessions for
        one (a Live session is not resumable yet)."""
        return self.grace_s > 0 and not live and "session.resume_token" in extensions

    def __len__(self) -> int:
        return len(self._by_hash)

    async def issue(self, session_id: str, owner: str | None, lease: Lease,
                    token: str | None = None) -> tuple[str, Resumable]:
        """A token for the session (``token``: one the client was given already, a call's); shared
        with the other gateways before the client has it."""
        token = token or new_resume_token()
        entry = Resumable(session_id, token_hash(token), owner, lease)
        self._by_hash[entry.token_hash] = entry
        try:
            await self.pool.share_resumable(lease, entry.token_hash, session_id, owner, self.grace_s)
        except Exception as exc:  # Redis away: the token still works on this gateway
            log.warning("session %s: resume token not shared with the other gateways: %s", session_id, exc)
        return token, entry

    def held(self) -> list[dict]:
        """Sessions held for their token now, as the admin page lists sessions (their slot is taken)."""
        now_mono, now = time.monotonic(), time.time()
        return [{"ticket": e.lease.ticket, "session_id": e.session_id, "state": "held", "app": "resume",
                 "worker_id": e.lease.worker.id, "client": None, "created_at": now - (now_mono - e.held_since),
                 "assigned_at": None, "record": None}
                for e in self._by_hash.values() if e.held_since is not None]

    def hold(self, entry: Resumable) -> None:
        """Its connection dropped: the slot stays taken for the grace period."""
        if self._by_hash.get(entry.token_hash) is not entry:
            return
        entry.held_since = time.monotonic()
        loop = asyncio.get_running_loop()
        entry._timer = loop.call_later(self.grace_s + MARGIN_S, self._expire, entry)
        log.info("session %s held %.0f s for its resume token", entry.session_id, self.grace_s)

    async def claim(self, token: str, owner: str | None) -> Resumable | ResumeRefusal:
        """The session ``token`` brings back, if ``owner`` opened it; it is attached from now on
        (a connection still attached is replaced: the worker closes it). A session of another
        gateway (shared queue) is taken over from it."""
        digest = token_hash(token)
        entry = self._by_hash.get(digest)
        if entry is None and digest not in self._expired:
            entry = await self._adopt(digest, owner)
            if isinstance(entry, ResumeRefusal):
                return entry
        if entry is None:
            return self._expired_refusal() if digest in self._expired else INVALID
        if entry.owner is not None and entry.owner != owner:
            log.warning("session %s: a resume token presented with another key", entry.session_id)
            return INVALID
        if entry._timer is not None:
            entry._timer.cancel()
            entry._timer = None
        entry.held_since = None
        entry.connections += 1
        return entry

    async def _adopt(self, digest: str, owner: str | None) -> Resumable | ResumeRefusal | None:
        try:
            adopted = await self.pool.adopt_resumable(digest, owner)
        except Exception as exc:  # Redis away
            log.warning("a resume token could not be looked up across gateways: %s", exc)
            return ResumeRefusal("cluster_unavailable", f"the session cannot be looked up now: {exc}", 503)
        if adopted is None or adopted == "invalid":
            return None
        if adopted == "expired":
            return self._expired_refusal()
        lease, session_id = adopted
        entry = Resumable(session_id, digest, owner, lease, connections=0)
        self._by_hash[digest] = entry
        log.info("session %s taken over from another gateway for its resume token", session_id)
        return entry

    def _expired_refusal(self) -> ResumeRefusal:
        return ResumeRefusal("resume_token_expired", f"the session of this resume token has ended, or nobody "
                             f"came back within its {self.grace_s:.0f} s grace period", 410)

    def _taken_over(self, ticket: str) -> None:
        """Another gateway brought one of our sessions back: its slot is that gateway's now."""
        entry = next((e for e in self._by_hash.values() if e.lease.ticket == ticket), None)
        if entry is not None:
            if entry._timer is not None:
                entry._timer.cancel()
            self._by_hash.pop(entry.token_hash, None)
            entry.connections += 1  # a proxy of ours still attached is not the latest: it releases nothing
            log.info("session %s continues through another gateway", entry.session_id)

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
