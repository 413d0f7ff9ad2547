"""Per-IP and per-API-key limits on what uses the workers: a rate per minute and a concurrency cap.

Realtime and Live sessions and the REST API's model requests (``gateway/rest/routes.py``) count
against the same limits (``auth.per_ip``, ``auth.per_key``): a client cannot get round the session
limits by calling the REST API instead. A client over a limit is turned away before it enters the
queue (so one client cannot fill the queue or hog the workers). Concurrency counts sessions from
accept to close, queued ones included, and REST requests until their answer ends; a ``Slot`` is
returned by ``try_open`` and must be closed exactly once (closing twice is harmless). The rate is
a sliding one-minute window of starts.

Everything runs on the gateway's event loop: no locks.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from core.config import RateLimit

WINDOW_S = 60.0
MAX_TRACKED = 100_000  # sweep early past this many subjects (an address flood)


class RateLimited(Exception):
    """``code`` is ``rate_limited`` (too many per minute) or ``too_many_sessions`` (concurrency)."""

    def __init__(self, code: str, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s


@dataclass
class _Subject:
    starts: deque[float] = field(default_factory=deque)
    open: int = 0


@dataclass(eq=False)
class Slot:
    """One open session counted against its subjects; ``close()`` gives it back."""

    limiter: SessionLimiter
    subjects: tuple[str, ...]
    closed: bool = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for key in self.subjects:
            sub = self.limiter._subjects.get(key)
            if sub is not None:
                sub.open = max(0, sub.open - 1)
                self.limiter._forget_if_idle(key, sub)


class SessionLimiter:
    def __init__(self, per_ip: RateLimit, per_key: RateLimit, clock=time.monotonic) -> None:
        self.per_ip = per_ip
        self.per_key = per_key
        self._clock = clock
        self._subjects: dict[str, _Subject] = {}
        self._last_sweep = clock()

    def try_open(self, ip: str, key_id: str | None = None, noun: str = "sessions and REST requests") -> Slot:
        """Count a new session or request for ``ip`` (and ``key_id``) or raise ``RateLimited``;
        checks all first. ``noun``: what the refusal says was counted."""
        now = self._clock()
        checks = [(f"ip:{ip}", self.per_ip, f"this address ({ip})")]
        if key_id is not None:
            checks.append((f"key:{key_id}", self.per_key, "this API key"))
        for key, limit, who in checks:
            sub = self._subjects.get(key)
            if sub is None:
                continue
            _trim(sub.starts, now)
            if limit.concurrent and sub.open >= limit.concurrent:
                raise RateLimited("too_many_sessions",
                                  f"{who} already has {sub.open} {noun} open (limit {limit.concurrent})", 5.0)
            if limit.sessions_per_minute and len(sub.starts) >= limit.sessions_per_minute:
                retry = max(1.0, WINDOW_S - (now - sub.starts[0]))
                raise RateLimited("rate_limited",
                                  f"{who} started {len(sub.starts)} {noun} in the last minute "
                                  f"(limit {limit.sessions_per_minute}); retry in {retry:.0f} s", retry)
        if len(self._subjects) >= MAX_TRACKED or now - self._last_sweep >= WINDOW_S:
            self._sweep(now)
        for key, _, _ in checks:
            sub = self._subjects.setdefault(key, _Subject())
            sub.starts.append(now)
            sub.open += 1
        return Slot(self, tuple(k for k, _, _ in checks))

    def open_count(self, ip: str | None = None, key_id: str | None = None) -> int:
        sub = self._subjects.get(f"ip:{ip}" if ip is not None else f"key:{key_id}")
        return sub.open if sub else 0

    def _forget_if_idle(self, key: str, sub: _Subject) -> None:
        _trim(sub.starts, self._clock())
        if sub.open == 0 and not sub.starts:
            self._subjects.pop(key, None)

    def _sweep(self, now: float) -> None:
        """Forget subjects with nothing open and no start in the window (once a minute)."""
        self._last_sweep = now
        for key, sub in list(self._subjects.items()):
            _trim(sub.starts, now)
            if sub.open == 0 and not sub.starts:
                del self._subjects[key]


def _trim(starts: deque[float], now: float) -> None:
    while starts and now - starts[0] >= WINDOW_S:
        starts.popleft()
