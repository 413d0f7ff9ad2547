"""Storage cleanup on synthetic sessions: retention, size cap (oldest first), live sessions kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from core.config import load_config
from core.session_store import new_session_id
from gateway.recordings.cleanup import apply_cleanup, plan_cleanup
from tests.support.stack import ROOT

MB = 1024 * 1024


def make_session(data: Path, *, age_days: float, size_mb: float, status: str = "finished",
                 started_offset_s: float = 0.0) -> str:
    sid = new_session_id()
    d = data / "sessions" / sid
    (d / "user_audio").mkdir(parents=True)
    started = time.time() - age_days * 86400 + started_offset_s
    (d / "meta.json").write_text(json.dumps({"id": sid, "status": status, "started_at_epoch": started}))
    (d / "user_audio" / "000001.wav").write_bytes(b"\0" * int(size_mb * MB))
    for f in d.rglob("*"):
        os.utime(f, (started, started))
    os.utime(d, (started, started))
    return sid


def config(tmp_path: Path, **recording):
    return load_config(None, {"data_dir": str(tmp_path), **{f"recording.{k}": v for k, v in recording.items()}})


def test_retention_deletes_old_sessions_only(tmp_path):
    old = make_session(tmp_path, age_days=40, size_mb=1)
    new = make_session(tmp_path, age_days=2, size_mb=1)
    plan = plan_cleanup(config(tmp_path, retention_days=30))
    assert [s.id for s in plan.expired] == [old] and not plan.over_cap
    apply_cleanup(plan)
    assert not (tmp_path / "sessions" / old).exists() and (tmp_path / "sessions" / new).exists()


def test_size_cap_deletes_oldest_first_until_under(tmp_path):
    a = make_session(tmp_path, age_days=5, size_mb=3)
    b = make_session(tmp_path, age_days=4, size_mb=3)
    c = make_session(tmp_path, age_days=3, size_mb=3)
    plan = plan_cleanup(config(tmp_path, max_storage_gb=7 * MB / 1024**3))
    assert [s.id for s in plan.over_cap] == [a]
    assert plan.bytes_after <= 7 * MB
    apply_cleanup(plan)
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == sorted([b, c])


def test_live_session_is_never_deleted_even_over_the_cap(tmp_path):
    live = make_session(tmp_path, age_days=0, size_mb=5, status="live")
    old_finished = make_session(tmp_path, age_days=1, size_mb=1)
    plan = plan_cleanup(config(tmp_path, max_storage_gb=1 * MB / 1024**3))
    assert live in plan.kept_live
    assert [s.id for s in plan.over_cap] == [old_finished]
    apply_cleanup(plan)
    assert (tmp_path / "sessions" / live).exists()


def test_cut_off_session_is_no_longer_live_once_stale(tmp_path):
    stale = make_session(tmp_path, age_days=40, size_mb=1, status="live")  # worker died long ago
    plan = plan_cleanup(config(tmp_path, retention_days=30))
    assert [s.id for s in plan.expired] == [stale] and not plan.kept_live


def test_stale_temp_files_and_diagnostics_go(tmp_path):
    sid = make_session(tmp_path, age_days=0, size_mb=0.1)
    tmp = tmp_path / "sessions" / sid / ".recording.json.abc.tmp"
    tmp.write_text("half")
    diag = tmp_path / "diagnostics" / "trace.json"
    diag.parent.mkdir()
    diag.write_text("{}")
    fresh = tmp_path / "diagnostics" / "fresh.json"
    fresh.write_text("{}")
    old = time.time() - 7200
    os.utime(tmp, (old, old))
    os.utime(diag, (old, old))
    plan = plan_cleanup(config(tmp_path, temp_max_age_s=3600))
    assert sorted(plan.temp_files) == sorted([tmp, diag])
    apply_cleanup(plan)
    assert not tmp.exists() and not diag.exists() and fresh.exists()


def test_dry_run_command_line_lists_and_keeps(tmp_path):
    old = make_session(tmp_path, age_days=40, size_mb=1)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"data_dir": str(tmp_path)}))
    out = subprocess.run([sys.executable, "-m", "gateway.recordings.cleanup", "--config", str(cfg), "--dry-run"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"would delete {old}: older than the retention" in out
    assert (tmp_path / "sessions" / old).exists()
    out = subprocess.run([sys.executable, "-m", "gateway.recordings.cleanup", "--config", str(cfg)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"deleted {old}" in out and not (tmp_path / "sessions" / old).exists()
