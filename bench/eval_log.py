"""Every run of a held-out (``eval``) part is logged (issue 69): command, commit, date and purpose,
appended to ``docs/eval-runs.md``, which the results page links. An eval run to diagnose a failure
spends the set: its figures become eval-informed, and the log shows it.

    python -m bench duplex --set eval ...                       # logged as the end-of-issue figure
    python -m bench duplex --set eval --purpose diagnosis ...   # logged, and marks the set spent
"""

from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "docs" / "eval-runs.md"
PURPOSES = ("figure", "diagnosis")
_PURPOSE_TEXT = {"figure": "the end-of-issue figure", "diagnosis": "diagnosis: the figure is eval-informed"}


def commit() -> str:
    """The commit the run measures, "+changes" when the tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/eval-runs.md")  # the log itself aside
    return f"{head}+changes" if dirty else head


def row(set_name: str, purpose: str, argv: list[str], notes: str = "") -> str:
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, not {purpose!r}")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
    cells = [when, f"`{commit()}`", f"`{command}`", set_name, _PURPOSE_TEXT[purpose], notes]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def log_eval_run(set_name: str, purpose: str = "figure", argv: list[str] | None = None, notes: str = "",
                 log: Path = LOG) -> str:
    """Append the run's row to the log's table (the last thing in the file), atomically; returns it."""
    line = row(set_name, purpose, sys.argv[1:] if argv is None else argv, notes)
    text = log.read_text(encoding="utf-8") if log.exists() else ""
    text = text.rstrip("\n") + "\n" + line + "\n"
    fd, tmp = tempfile.mkstemp(dir=log.parent, prefix=".eval-runs-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, log)
    print(f"eval run logged in {log.relative_to(ROOT) if log.is_relative_to(ROOT) else log}: {line}",
          file=sys.stderr)
    return line
