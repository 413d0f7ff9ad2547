"""Ephemeral keys (``ek_...``): minted by an app server with the service's key, redeemed once by a
browser to open one session, within the key's lifetime, with the session config it was minted with.

Two stores behind one interface (``mint``, ``redeem``), both keeping only a SHA-256 of each key:

- ``MemoryKeys``: one gateway; redeeming pops the entry on the event loop (atomic, no await in
  between); old entries are pruned as new ones come.
- ``RedisKeys``: several gateways (``cluster.redis_url``): a key minted on gateway A is redeemed
  once on any gateway; redeeming is one Lua script (read, check, mark used), so two gateways
  redeeming the same key at once give it to one of them. Redis expires the entries.

A used or expired key's entry lingers ``GRACE_S`` (as a tombstone) so the refusal can say which;
after that it is simply unknown (``invalid_api_key``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from gateway.pool.redis_queue import redis_reachable

PREFIX = "ek_"
DEFAULT_TTL_S = 600
MIN_TTL_S = 10
MAX_TTL_S = 7200
GRACE_S = 600  # a used or expired key is still known (to say so) this long after its expiry
MAX_KEYS = 20_000  # outstanding keys in one gateway's memory
MAX_BYTES = 64 * 2**20  # their session configs together
# HTTP routes where an ephemeral key stands for the API key (the route redeems it): a browser's
# WebRTC offer. The WebSocket ``/v1/realtime`` redeems in ``gateway/realtime/admission.py``.
EPHEMERAL_KEY_PATHS = frozenset({"/v1/realtime/calls"})


def is_ephemeral(key: str | None) -> bool:
    return bool(key) and key.startswith(PREFIX)


def key_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Grant:
    """What a key lets its holder open: one session with this config."""

    session: dict[str, Any]  # the session config as minted, in its dialect (``model``/``client_secret`` removed)
    beta: bool = False  # minted through the beta ``/v1/realtime/sessions``
    model: str | None = None  # ``session.model``: picks the model as ``?model=`` does
    session_id: str = ""  # the id the session will have (given in the mint's answer)
    key_id: str | None = None  # the API key that minted it (per-key limits)

    @property
    def intent(self) -> str:
        return "transcription" if self.session.get("type") == "transcription" else ""

    def session_update(self) -> str:
        """The ``session.update`` the gateway sends the worker before any client event."""
        return json.dumps({"type": "session.update", "session": self.session}, separators=(",", ":"))

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Grant:
        data = json.loads(text)  # fields another gateway's version may add are left out
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class Minted:
    value: str  # the ``ek_...`` key, shown once
    expires_at: int  # unix seconds
    grant: Grant


@dataclass(frozen=True, slots=True)
class Redeemed:
    grant: Grant
    expires_at: int


@dataclass(frozen=True, slots=True)
class KeyRefusal:
    reason: str  # ``invalid``, ``used`` or ``expired``

    @property
    def message(self) -> str:
        return {"used": "ephemeral key already used: a key opens one session; mint a new one",
                "expired": "ephemeral key expired: mint a new one",
                }.get(self.reason, "invalid ephemeral key (unknown, or expired long ago)")


class KeyStoreFull(Exception):
    """Too many unused keys in this gateway's memory."""


def _new_value() -> str:
    return PREFIX + secrets.token_hex(24)


@dataclass(slots=True)
class _Entry:
    expires_at: int
    payload: str | None  # None once used or expired
    size: int = 0
    used: bool = False


class MemoryKeys:
    """The store of one gateway."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._bytes = 0
        self._last_prune = 0.0

    async def mint(self, grant: Grant, ttl_s: int) -> Minted:
        now = self.clock()
        payload = grant.to_json()
        if now - self._last_prune >= 10 or len(self._entries) >= MAX_KEYS or self._bytes + len(payload) > MAX_BYTES:
            self._prune(now)
        if len(self._entries) >= MAX_KEYS or self._bytes + len(payload) > MAX_BYTES:
            raise KeyStoreFull(f"{len(self._entries)} ephemeral keys are outstanding on this gateway; try again "
                               "when some were used or expired")
        value = _new_value()
        expires_at = int(now) + ttl_s
        self._entries[key_hash(value)] = _Entry(expires_at, payload, len(payload))
        self._bytes += len(payload)
        return Minted(value, expires_at, grant)

    async def redeem(self, value: str) -> Redeemed | KeyRefusal:
        entry = self._entries.get(key_hash(value))
        if entry is None:
            return KeyRefusal("invalid")
        if entry.used:
            return KeyRefusal("used")
        if entry.payload is None or self.clock() >= entry.expires_at:
            self._forget_payload(entry)
            return KeyRefusal("expired")
        payload = entry.payload
        entry.used = True
        self._forget_payload(entry)  # only the tombstone stays
        return Redeemed(Grant.from_json(payload), entry.expires_at)

    def _forget_payload(self, entry: _Entry) -> None:
        entry.payload = None
        self._bytes -= entry.size
        entry.size = 0

    def _prune(self, now: float) -> None:
        self._last_prune = now
        for h, entry in list(self._entries.items()):
            if now >= entry.expires_at + GRACE_S:
                self._bytes -= entry.size
                del self._entries[h]
            elif now >= entry.expires_at:
                self._forget_payload(entry)
        if len(self._entries) >= MAX_KEYS:  # still full: tombstones go first
            for h in [h for h, e in self._entries.items() if e.payload is None]:
                del self._entries[h]

    def __len__(self) -> int:
        return len(self._entries)


# Read, check the expiry (ARGV[1], the gateway's clock in seconds), mark used; one atomic step.
_REDEEM = r"""
local v = redis.call('GET', KEYS[1])
if not v then return false end
if v == 'used' or v == 'expired' then return v end
local bar = string.find(v, '|', 1, true)
if tonumber(string.sub(v, 1, bar - 1)) <= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], 'expired', 'KEEPTTL')
  return 'expired'
end
redis.call('SET', KEYS[1], 'used', 'KEEPTTL')
return v
"""


class RedisKeys:
    """The store shared by the gateways of a cluster (the pool's Redis client and key prefix)."""

    def __init__(self, client, prefix: str, clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.prefix = prefix
        self.clock = clock
        self._redeem = client.register_script(_REDEEM)

    def _key(self, value: str) -> str:
        return f"{self.prefix}:ek:{key_hash(value)}"

    async def mint(self, grant: Grant, ttl_s: int) -> Minted:
        value = _new_value()
        expires_at = int(self.clock()) + ttl_s
        with redis_reachable():
            await self.redis.set(self._key(value), f"{expires_at}|{grant.to_json()}", ex=ttl_s + GRACE_S, nx=True)
        return Minted(value, expires_at, grant)

    async def redeem(self, value: str) -> Redeemed | KeyRefusal:
        with redis_reachable():
            found = await self._redeem(keys=[self._key(value)], args=[int(self.clock())])
        if found is None:
            return KeyRefusal("invalid")
        text = found.decode() if isinstance(found, bytes) else str(found)
        if text in ("used", "expired"):
            return KeyRefusal(text)
        expires_at, payload = text.split("|", 1)
        return Redeemed(Grant.from_json(payload), int(expires_at))


EphemeralKeys = MemoryKeys | RedisKeys


def make_ephemeral_keys(pool: Any) -> EphemeralKeys:
    """In memory, or in the cluster's Redis when the pool is shared (``gateway/pool/shared_pool.py``)."""
    shared = getattr(pool, "shared", None)
    if shared is not None:
        return RedisKeys(shared.redis, shared.prefix)
    return MemoryKeys()
