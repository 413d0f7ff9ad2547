"""Start real gateway and worker processes for a benchmark (temp data dir, shared model cache)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def raise_fd_limit() -> int:
    """Thousands of sockets need more than the usual 1024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports."""
    for _ in range(100):
        base = free_port()
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok and base + n < 65000:
            return base
    raise RuntimeError("no free port block")


class Launched:
    """Processes started for one benchmark; ``stop()`` ends them all."""

    def __init__(self, tmp: Path, workers: int = 1, start_gateway: bool = True, worker_urls: list[str] | None = None,
                 slots: int = 1, **overrides: Any) -> None:
        self.tmp = tmp
        self.data = tmp / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        (ROOT / "data" / "models").mkdir(parents=True, exist_ok=True)
        if not (self.data / "models").exists():
            (self.data / "models").symlink_to(ROOT / "data" / "models")
        self.base_port = free_ports(max(1, workers))
        self.port = free_port()
        config: dict[str, Any] = {
            "data_dir": str(self.data),
            "gateway": {"port": self.port},
            "workers": {"count": workers, "base_port": self.base_port, "urls": worker_urls or [], "slots": slots},
            "health": {"interval_s": 0.5, "timeout_s": 2.0},
        }
        for section, values in overrides.items():
            if isinstance(values, dict):
                config.setdefault(section, {}).update(values)
            else:
                config[section] = values
        self.config_path = tmp / "config.json"
        self.config_path.write_text(json.dumps(config))
        self.procs: dict[str, subprocess.Popen] = {}
        self.workers = workers
        for i in range(workers):
            self._spawn(f"worker{i}", ["worker", "--index", str(i)])
        if start_gateway:
            self._spawn("gateway", ["gateway"])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def worker_url(self, i: int = 0) -> str:
        return f"http://127.0.0.1:{self.base_port + i}"

    def worker_ws(self, i: int = 0) -> str:
        return f"ws://127.0.0.1:{self.base_port + i}/ws/realtime"

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def _spawn(self, name: str, args: list[str]) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", *args, "--config", str(self.config_path)], cwd=ROOT, env=env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: {(self.tmp / f'{name}.log').read_text()[-2000:]}")
            try:
                if "gateway" in self.procs:
                    if httpx.get(f"{self.url}/health", timeout=2).json()["workers_healthy"] >= self.workers:
                        return
                elif all(httpx.get(f"{self.worker_url(i)}/health", timeout=2).json().get("state") == "IDLE"
                         for i in range(self.workers)):
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        raise RuntimeError("benchmark stack not ready in time")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def __enter__(self) -> Launched:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def cascade_realtime_url() -> Iterator[str]:
    """A fresh gateway + one cascade worker (no recording, no per-client limits) for the duration;
    yields the realtime URL a bench session connects to."""
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            yield launched.ws_url + "?model=omniduplex-cascade&record=false&app=bench"
