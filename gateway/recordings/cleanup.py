"""Storage cleanup for recordings and shares: age first, then a size cap, oldest first; never a live session.

Runs inside the gateway every ``recording.cleanup_interval_s`` (in a thread) and from the command
line: ``python -m gateway.recordings.cleanup --config config.json [--dry-run]`` prints what it would delete.
Also removes stale temp files (``*.tmp`` left by a crash mid-write) and old diagnostics
(``<data_dir>/diagnostics``). Live sessions (see ``StoredSession.is_live``) are never touched,
not even to meet the size cap. Shares (``<data_dir>/shares``) go when they expire, and count towards
the same cap (``recording.max_storage_gb``): over it, the oldest of finished sessions and shares go first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.config import AppConfig, add_cli_arguments, config_from_cli
from core.session_store import StoredSession, list_sessions, sessions_root
from gateway.recordings.shares import StoredShare, list_shares

log = logging.getLogger(__name__)
GB = 1024**3


@dataclass
class CleanupPlan:
    expired: list[StoredSession] = field(default_factory=list)
    over_cap: list[StoredSession] = field(default_factory=list)
    temp_files: list[Path] = field(default_factory=list)
    expired_shares: list[StoredShare] = field(default_factory=list)
    over_cap_shares: list[StoredShare] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)
    total_bytes: int = 0
    bytes_after: int = 0

    @property
    def sessions(self) -> list[StoredSession]:
        return self.expired + self.over_cap


def plan_cleanup(config: AppConfig, now: float | None = None) -> CleanupPlan:
    """What to delete, without deleting anything (blocking: call in a thread)."""
    now = time.time() if now is None else now
    rec = config.recording
    plan = CleanupPlan()
    sessions = list_sessions(config.data_dir)
    plan.total_bytes = sum(s.size_bytes for s in sessions)
    keep: list[StoredSession] = []
    live_bytes = 0
    for s in sessions:
        if s.is_live(config.limits.max_session_s, now):
            plan.kept_live.append(s.id)
            live_bytes += s.size_bytes
        elif now - s.last_write > rec.retention_days * 86400:
            plan.expired.append(s)
        else:
            keep.append(s)
    shares = list_shares(config.data_dir, config.shares.expiry_days)
    plan.total_bytes += sum(sh.size_bytes for sh in shares)
    plan.expired_shares = [sh for sh in shares if sh.expires_at <= now]
    kept_shares = [sh for sh in shares if sh.expires_at > now]
    # Live sessions count towards the cap but only finished ones (and shares) can make room.
    size = live_bytes + sum(s.size_bytes for s in keep) + sum(sh.size_bytes for sh in kept_shares)
    cap = rec.max_storage_gb * GB
    by_age = sorted([(s.started_at, s) for s in keep] + [(sh.created_at, sh) for sh in kept_shares],
                    key=lambda pair: pair[0])
    for _, item in by_age:  # oldest first
        if size <= cap:
            break
        (plan.over_cap_shares if isinstance(item, StoredShare) else plan.over_cap).append(item)
        size -= item.size_bytes
    plan.bytes_after = size
    plan.temp_files = _stale_temp_files(config, now)
    return plan


def _stale_temp_files(config: AppConfig, now: float) -> list[Path]:
    out = []
    max_age = config.recording.temp_max_age_s
    root = sessions_root(config.data_dir)
    candidates = list(root.rglob("*.tmp")) if root.is_dir() else []
    diag = Path(config.data_dir) / "diagnostics"
    if diag.is_dir():
        candidates += [p for p in diag.rglob("*") if p.is_file()]
    for p in candidates:
        with contextlib.suppress(FileNotFoundError):
            if now - p.stat().st_mtime > max_age:
                out.append(p)
    return out


def apply_cleanup(plan: CleanupPlan) -> int:
    """Delete what the plan lists; returns bytes freed."""
    freed = 0
    for s in plan.sessions:
        shutil.rmtree(s.path, ignore_errors=True)
        freed += s.size_bytes
        log.info("cleanup: deleted session %s (%d bytes, %s)", s.id, s.size_bytes,
                 "expired" if s in plan.expired else "over storage cap")
    for sh in plan.expired_shares + plan.over_cap_shares:
        with contextlib.suppress(FileNotFoundError):
            sh.path.unlink()
            freed += sh.size_bytes
            log.info("cleanup: deleted share %s (%d bytes, %s)", sh.id, sh.size_bytes,
                     "expired" if sh in plan.expired_shares else "over storage cap")
    for p in plan.temp_files:
        with contextlib.suppress(FileNotFoundError):
            freed += p.stat().st_size
            p.unlink()
    return freed


def run_cleanup(config: AppConfig) -> CleanupPlan:
    plan = plan_cleanup(config)
    apply_cleanup(plan)
    return plan


async def cleanup_loop(config: AppConfig) -> None:
    """The gateway's periodic cleanup: a first pass a minute after start, then every interval."""
    delay = min(60.0, config.recording.cleanup_interval_s)
    while True:
        await asyncio.sleep(delay)
        delay = config.recording.cleanup_interval_s
        try:
            await asyncio.to_thread(run_cleanup, config)
        except Exception:  # noqa: BLE001 - try again next interval
            log.exception("cleanup failed")


def describe(plan: CleanupPlan, dry_run: bool) -> str:
    verb = "would delete" if dry_run else "deleted"
    lines = [f"sessions: {len(plan.sessions) + len(plan.kept_live)} checked, {plan.total_bytes / 1e6:.1f} MB in total"]
    for s in plan.expired:
        lines.append(f"  {verb} {s.id}: older than the retention ({s.size_bytes / 1e6:.1f} MB)")
    for s in plan.over_cap:
        lines.append(f"  {verb} {s.id}: over the storage cap, oldest first ({s.size_bytes / 1e6:.1f} MB)")
    for sid in plan.kept_live:
        lines.append(f"  kept {sid}: live")
    for sh in plan.expired_shares:
        lines.append(f"  {verb} share {sh.id}: expired ({sh.size_bytes / 1e6:.2f} MB)")
    for sh in plan.over_cap_shares:
        lines.append(f"  {verb} share {sh.id}: over the storage cap, oldest first ({sh.size_bytes / 1e6:.2f} MB)")
    for p in plan.temp_files:
        lines.append(f"  {verb} stale temp file {p}")
    lines.append(f"after cleanup: {plan.bytes_after / 1e6:.1f} MB of sessions and shares")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.recordings.cleanup", description=__doc__.splitlines()[0])
    add_cli_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    args = parser.parse_args(argv)
    config = config_from_cli(args)
    plan = plan_cleanup(config)
    if not args.dry_run:
        apply_cleanup(plan)
    print(describe(plan, args.dry_run))


if __name__ == "__main__":
    main()
