"""Whisper (CTranslate2) and the LLM (torch) must not share one OpenMP runtime.

Sharing it made every LLM decode step ~1.7x slower once Whisper had run (libgomp stops spinning
when its teams' threads outnumber the cores); see ``core/cascade/ctranslate2_import.py``. The
timing lives in ``python -m bench turns``; this checks the binding that causes it, with the
dynamic linker's own report, in a process that imports torch first as the worker does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import numpy as np, torch
torch.ones(64, 64) @ torch.ones(64, 64)
from core.cascade.asr import WhisperAsr
print(WhisperAsr().transcribe(np.zeros(16000, np.float32)).text)
"""


def test_whisper_runs_on_its_own_openmp_runtime_after_torch(tmp_path):
    log = tmp_path / "ld"
    env = dict(os.environ, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=str(log), PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, check=True, timeout=120,
                   capture_output=True)
    lines = [line for f in tmp_path.glob("ld.*") for line in f.read_text(errors="replace").splitlines()
             if "libctranslate2" in line.split(" to ")[0] and "`GOMP_parallel'" in line]
    assert lines, "CTranslate2 never started an OpenMP team"
    targets = {line.split(" to ")[1].split(" [")[0] for line in lines}
    assert all("ctranslate2.libs" in t for t in targets), targets
