"""Per-IP and per-key session limits (gateway/access/rate_limits.py) with a fake clock."""

from __future__ import annotations

import pytest

from core.config import RateLimit
from gateway.access.rate_limits import RateLimited, SessionLimiter


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_concurrency_cap_per_ip_and_release():
    clock = Clock()
    lim = SessionLimiter(RateLimit(concurrent=2), RateLimit(), clock)
    a = lim.try_open("1.1.1.1")
    b = lim.try_open("1.1.1.1")
    with pytest.raises(RateLimited) as exc:
        lim.try_open("1.1.1.1")
    assert exc.value.code == "too_many_sessions"
    lim.try_open("2.2.2.2").close()  # other addresses are not affected
    a.close()
    a.close()  # idempotent: closing twice frees one slot, not two
    c = lim.try_open("1.1.1.1")
    with pytest.raises(RateLimited):
        lim.try_open("1.1.1.1")
    b.close()
    c.close()
    assert lim.open_count(ip="1.1.1.1") == 0


def test_sessions_per_minute_slides():
    clock = Clock()
    lim = SessionLimiter(RateLimit(sessions_per_minute=3), RateLimit(), clock)
    for _ in range(3):
        lim.try_open("ip").close()
        clock.t += 10
    with pytest.raises(RateLimited) as exc:
        lim.try_open("ip")
    assert exc.value.code == "rate_limited"
    assert 1 <= exc.value.retry_after_s <= 60
    assert "retry in" in exc.value.message
    clock.t += 31  # the first start (at t=1000) is now more than a minute old
    lim.try_open("ip").close()


def test_key_limit_applies_across_addresses_and_refusal_counts_nothing():
    clock = Clock()
    lim = SessionLimiter(RateLimit(concurrent=10), RateLimit(concurrent=1), clock)
    held = lim.try_open("1.1.1.1", "key-a")
    with pytest.raises(RateLimited) as exc:
        lim.try_open("2.2.2.2", "key-a")
    assert "API key" in exc.value.message
    # The refused attempt left no trace on its address.
    assert lim.open_count(ip="2.2.2.2") == 0
    lim.try_open("2.2.2.2", "key-b").close()
    held.close()
    lim.try_open("2.2.2.2", "key-a").close()


def test_zero_means_unlimited_and_idle_subjects_are_forgotten():
    clock = Clock()
    lim = SessionLimiter(RateLimit(), RateLimit(), clock)
    slots = [lim.try_open("ip", "k") for _ in range(500)]
    for s in slots:
        s.close()
    clock.t += 61
    lim.try_open("other").close()
    lim.try_open("ip").close()
    clock.t += 61
    lim.try_open("x").close()
    assert set(lim._subjects) <= {"ip:x"}
