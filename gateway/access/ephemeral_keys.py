"""Ephemeral keys (``ek_...``): minted by an app server with the service's key, redeemed once by a
browser to open one session, within the key's lifetime, with the session config it was minted with.

Two stores behind one interface (``mint``, ``redeem``), both keeping only a SHA-256 of each key:

- ``MemoryKeys``: one gateway; redeeming pops the entry on the event loop (atomic, no await in
  between); old entries are pruned as new ones come.
- ``RedisKeys``: several gateways (``cluster.redis_url``): a key minted on gateway A is redeemed
  once on any gateway; redeeming is one Lua script (read, check, mark used), so two gateways
  redeeming the same key at once give it to one of them. Redis expires the entries; minting (check
  the caps, store) is one script too.

A used or expired key's entry lingers ``GRACE_S`` (as a tombstone) so the refusal can say which;
after that it is simply unknown (``invalid_api_key``).

Both stores cap the outstanding keys (minted, not yet used, not expired) and their configs' bytes:
in all (``MAX_KEYS``, ``MAX_BYTES``) and per minter, so that one client's large two-hour keys
cannot lock every other client out of minting: an API key that mints holds at most a 16th
(``MINTER_MAX_KEYS``, ``MINTER_MAX_BYTES``: the operator's tenants), and on an open service, where
anyone mints, one client address (an IPv6 host's /64) much less (``ADDRESS_MAX_KEYS``,
``ADDRESS_MAX_BYTES``), so that a few addresses cannot fill the store. Using or expiry gives a
key's share back.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gateway.pool.redis_queue import redis_reachable

PREFIX = "ek_"
DEFAULT_TTL_S = 600
MIN_TTL_S = 10
MAX_TTL_S = 7200
GRACE_S = 600  # a used or expired key is still known (to say so) this long after its expiry
MAX_KEYS = 20_000  # outstanding keys in one gateway's memory, or in the cluster's Redis
MAX_BYTES = 64 * 2**20  # their session configs together
# One minter's share: a 16th, so it takes 16 minters at their quota to fill the store. An app
# server minting one 600 s key per page load holds only those not yet used: 1250 is ~2 abandoned
# page loads a second, and 4 MiB is 1250 configs of 3 kB (or 16 of the largest, 256 kB).
MINTER_MAX_KEYS = MAX_KEYS // 16
MINTER_MAX_BYTES = MAX_BYTES // 16
# One address's share, where no key mints (an open service): 100 unused keys (a 200th) and 512 KiB of
# configs (a 128th, two of the largest), so it takes 128 addresses, not 16, to fill the store. Plenty
# for one person's pages or a test app server; an app server minting for many pages gets a key
# (``auth.api_keys``), whose mints count against that key's larger share.
ADDRESS_MAX_KEYS = MAX_KEYS // 200
ADDRESS_MAX_BYTES = MAX_BYTES // 128
# HTTP routes where an ephemeral key stands for the API key (the route redeems it): a browser's
# WebRTC offer. The WebSocket ``/v1/realtime`` redeems in ``gateway/realtime/admission.py``.
EPHEMERAL_KEY_PATHS = frozenset({"/v1/realtime/calls", "/v1/live/sessions"})  # WebRTC offers


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


def minter_of(key_id: str | None, client_ip: str) -> str:
    """Whose quota a mint counts against: the API key's, or on an open service the address's (an
    IPv6 address's /64, which one host holds whole; an IPv4-mapped one is its IPv4 address)."""
    if key_id:
        return f"key:{key_id}"
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return f"ip:{client_ip}"
    if address.version == 6 and address.ipv4_mapped is None:
        return f"ip:{ipaddress.ip_network((address, 64), strict=False)}"
    return f"ip:{getattr(address, 'ipv4_mapped', None) or address}"


def minter_limits(minter: str) -> tuple[int, int]:
    """(keys, bytes) ``minter`` may hold unused: an address's share is smaller than an API key's."""
    if minter.startswith("ip:"):
        return ADDRESS_MAX_KEYS, ADDRESS_MAX_BYTES
    return MINTER_MAX_KEYS, MINTER_MAX_BYTES


class KeyStoreFull(Exception):
    """Too many unused keys: this minter's quota or the store's cap (429 ``too_many_keys``)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # until the oldest of those keys expires (sooner if one is used)


def _minter_full(minter: str, keys: int, size: int, retry_after_s: float) -> KeyStoreFull:
    who = {"key": "this API key", "ip": "this address"}.get(minter.partition(":")[0], "this minter")
    max_keys, max_bytes = minter_limits(minter)
    return KeyStoreFull(f"{who} has {keys} unused ephemeral keys outstanding ({size // 1024} kB of session configs; "
                        f"limit {max_keys} keys, {max_bytes // 1024} kB); they free up when used or "
                        "expired", max(1.0, retry_after_s))


def _store_full(where: str, keys: int, retry_after_s: float) -> KeyStoreFull:
    return KeyStoreFull(f"{keys} unused ephemeral keys are outstanding on this {where} (limit {MAX_KEYS} keys, "
                        f"{MAX_BYTES // 2**20} MB of session configs); try again when some are used or expired",
                        max(1.0, retry_after_s))


def _new_value() -> str:
    return PREFIX + secrets.token_hex(24)


@dataclass(slots=True)
class _Entry:
    expires_at: int
    payload: str | None  # None once used or expired
    size: int = 0
    used: bool = False
    minter: str = ""


@dataclass(slots=True)
class _Quota:
    """One minter's outstanding entries (by hash) and their bytes."""

    entries: dict[str, _Entry] = field(default_factory=dict)
    size: int = 0


class MemoryKeys:
    """The store of one gateway."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._bytes = 0
        self._minters: dict[str, _Quota] = {}
        self._last_prune = 0.0

    async def mint(self, grant: Grant, ttl_s: int, minter: str) -> Minted:
        """Store a new key counted against ``minter`` (:func:`minter_of`); KeyStoreFull beyond its
        quota or the store's cap."""
        now = self.clock()
        payload = grant.to_json()
        size = len(payload)  # ASCII: json.dumps escapes the rest
        quota = self._minters.get(minter)
        max_keys, max_bytes = minter_limits(minter)
        if quota is not None and (len(quota.entries) >= max_keys or quota.size + size > max_bytes):
            for h, entry in list(quota.entries.items()):  # at most MINTER_MAX_KEYS
                if now >= entry.expires_at:
                    self._forget_payload(h, entry)
            if len(quota.entries) >= max_keys or quota.size + size > max_bytes:
                first = min(e.expires_at for e in quota.entries.values())
                raise _minter_full(minter, len(quota.entries), quota.size, first - now)
        if now - self._last_prune >= 10 or len(self._entries) >= MAX_KEYS or self._bytes + size > MAX_BYTES:
            self._prune(now)
        if len(self._entries) >= MAX_KEYS or self._bytes + size > MAX_BYTES:
            unused = [e.expires_at for q in self._minters.values() for e in q.entries.values()]
            raise _store_full("gateway", len(unused), min(unused, default=now) - now)
        value = _new_value()
        h = key_hash(value)
        expires_at = int(now) + ttl_s
        entry = self._entries[h] = _Entry(expires_at, payload, size, minter=minter)
        self._bytes += size
        quota = self._minters.setdefault(minter, _Quota())
        quota.entries[h] = entry
        quota.size += size
        return Minted(value, expires_at, grant)

    async def redeem(self, value: str) -> Redeemed | KeyRefusal:
        h = key_hash(value)
        entry = self._entries.get(h)
        if entry is None:
            return KeyRefusal("invalid")
        if entry.used:
            return KeyRefusal("used")
        if entry.payload is None or self.clock() >= entry.expires_at:
            self._forget_payload(h, entry)
            return KeyRefusal("expired")
        payload = entry.payload
        entry.used = True
        self._forget_payload(h, entry)  # only the tombstone stays
        return Redeemed(Grant.from_json(payload), entry.expires_at)

    async def minted_by(self, value: str) -> str | None:
        """The API key id that minted ``value``, while it is unused and unexpired (else None):
        the admission counts the session against that key's limits before redeeming it."""
        entry = self._entries.get(key_hash(value))
        if entry is None or entry.payload is None or entry.used or self.clock() >= entry.expires_at:
            return None
        return Grant.from_json(entry.payload).key_id

    def _forget_payload(self, h: str, entry: _Entry) -> None:
        """Used or expired: the bytes and the minter's share are given back (once)."""
        if entry.payload is None:
            return
        entry.payload = None
        self._bytes -= entry.size
        quota = self._minters.get(entry.minter)
        if quota is not None and quota.entries.pop(h, None) is not None:
            quota.size -= entry.size
            if not quota.entries:
                del self._minters[entry.minter]
        entry.size = 0

    def _prune(self, now: float) -> None:
        self._last_prune = now
        for h, entry in list(self._entries.items()):
            if now >= entry.expires_at:
                self._forget_payload(h, entry)
            if now >= entry.expires_at + GRACE_S:
                del self._entries[h]
        if len(self._entries) >= MAX_KEYS:  # still full: tombstones go first
            for h in [h for h, e in self._entries.items() if e.payload is None]:
                del self._entries[h]

    def __len__(self) -> int:
        return len(self._entries)


# The caps in Redis: a sorted set of the outstanding keys, the cluster's and one per minter, scored
# by expiry, members ``<sha256>:<size>``, with a counter of their bytes beside each (``<set>:bytes``).
# The stored value is ``<expires_at>|{"quota":"<minter id>",<the grant's other fields>}`` (a gateway
# of an older version reads it as a grant, ``quota`` left out).
_QUOTA_LUA = r"""
local function release(set, total, member, size)  -- once: ZREM says whether it was still there
  if redis.call('ZREM', set, member) == 1 then
    if redis.call('ZCARD', set) == 0 then redis.call('DEL', total) else redis.call('DECRBY', total, size) end
  end
end
"""

# KEYS: the entry, the cluster's set and bytes, the minter's set and bytes. ARGV: now, expires_at,
# the entry's lifetime in Redis, its member, size, value, then MAX_KEYS, MAX_BYTES and the minter's
# two limits. Drops what expired, checks the minter's quota and then the cluster's cap, stores.
_MINT = _QUOTA_LUA + r"""
local now, size = tonumber(ARGV[1]), tonumber(ARGV[5])
local function prune(set, total)
  local gone = redis.call('ZRANGEBYSCORE', set, '-inf', now)
  if #gone == 0 then return end
  local freed = 0
  for _, member in ipairs(gone) do freed = freed + tonumber(string.match(member, ':(%d+)$')) end
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  if redis.call('ZCARD', set) == 0 then redis.call('DEL', total) else redis.call('DECRBY', total, freed) end
end
local function over(scope, set, total, max_keys, max_bytes)
  prune(set, total)
  local n, bytes = redis.call('ZCARD', set), tonumber(redis.call('GET', total) or '0')
  if n < tonumber(max_keys) and bytes + size <= tonumber(max_bytes) then return false end
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  return {scope, n, bytes, tonumber(first[2] or ARGV[2])}
end
local refused = over('minter', KEYS[4], KEYS[5], ARGV[9], ARGV[10])
  or over('cluster', KEYS[2], KEYS[3], ARGV[7], ARGV[8])
if refused then return refused end
redis.call('SET', KEYS[1], ARGV[6], 'EX', ARGV[3])
for i = 2, 4, 2 do
  redis.call('ZADD', KEYS[i], ARGV[2], ARGV[4])
  redis.call('INCRBY', KEYS[i + 1], size)
end
local last = tonumber(redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2])
redis.call('EXPIRE', KEYS[4], math.max(1, last - now + 1))  -- an idle minter's set goes with its last key
redis.call('EXPIRE', KEYS[5], math.max(1, last - now + 1))
return {'ok'}
"""

# KEYS: the entry, the cluster's set and bytes. ARGV: now (the gateway's clock in seconds), the
# entry's sha256, the minters' sets' prefix. Read, check the expiry, mark used, give the entry's
# share of the caps back; one atomic step. (The minter's set is named from the entry, a key the
# script is not given: fine on one Redis, which the cluster uses, not on Redis Cluster.)
_REDEEM = _QUOTA_LUA + r"""
local v = redis.call('GET', KEYS[1])
if not v then return false end
if v == 'used' or v == 'expired' then return v end
local bar = string.find(v, '|', 1, true)
local stored = string.sub(v, bar + 1)
local minter = string.match(stored, '^{"quota":"(%x+)",')
if minter then
  local member = ARGV[2] .. ':' .. #stored
  release(KEYS[2], KEYS[3], member, #stored)
  release(ARGV[3] .. minter, ARGV[3] .. minter .. ':bytes', member, #stored)
end
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
        self._mint = client.register_script(_MINT)
        self._redeem = client.register_script(_REDEEM)
        self._caps = [f"{prefix}:ekq", f"{prefix}:ekq:bytes"]  # the cluster's set and bytes
        self._minters = f"{prefix}:ekq:m:"  # + the minter's id: its set; + ":bytes"

    def _key(self, value: str) -> str:
        return f"{self.prefix}:ek:{key_hash(value)}"

    async def mint(self, grant: Grant, ttl_s: int, minter: str) -> Minted:
        """Store a new key counted against ``minter`` (:func:`minter_of`) on every gateway;
        KeyStoreFull beyond its quota or the cluster's cap."""
        value = _new_value()
        now = int(self.clock())
        expires_at = now + ttl_s
        minter_id = key_hash(minter)[:32]  # hex: any address or key id makes a safe Redis name
        stored = f'{{"quota":"{minter_id}",{grant.to_json()[1:]}'
        size = len(stored.encode())
        minter_set = self._minters + minter_id
        with redis_reachable():
            answer = await self._mint(
                keys=[self._key(value), *self._caps, minter_set, f"{minter_set}:bytes"],
                args=[now, expires_at, ttl_s + GRACE_S, f"{key_hash(value)}:{size}", size, f"{expires_at}|{stored}",
                      MAX_KEYS, MAX_BYTES, *minter_limits(minter)])
        scope = answer[0].decode() if isinstance(answer[0], bytes) else str(answer[0])
        if scope == "minter":
            raise _minter_full(minter, int(answer[1]), int(answer[2]), int(answer[3]) - now)
        if scope == "cluster":
            raise _store_full("cluster", int(answer[1]), int(answer[3]) - now)
        return Minted(value, expires_at, grant)

    async def minted_by(self, value: str) -> str | None:
        """As ``MemoryKeys.minted_by``: a read, the redeem stays the one atomic step."""
        with redis_reachable():
            found = await self.redis.get(self._key(value))
        text = found.decode() if isinstance(found, bytes) else found
        if not text or text in ("used", "expired"):
            return None
        expires_at, payload = text.split("|", 1)
        return Grant.from_json(payload).key_id if int(expires_at) > self.clock() else None

    async def redeem(self, value: str) -> Redeemed | KeyRefusal:
        with redis_reachable():
            found = await self._redeem(keys=[self._key(value), *self._caps],
                                       args=[int(self.clock()), key_hash(value), self._minters])
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
