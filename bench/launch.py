"""Start real gateway and worker processes for a benchmark (temp data dir, shared model cache).

The processes are started and stopped with :mod:`launcher.processes` (they die with the benchmark,
even one killed with ``kill -9``); a private Redis comes from :mod:`launcher.redis_server`."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from core.config import load_config
from core.worker_auth import auth_headers, load_worker_secret
from launcher.processes import ROOT, free_port, free_ports, spawn_module, stop, stop_all


def raise_fd_limit() -> int:
    """Thousands of sockets need more than the usual 1024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


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
        self.gateway_ports: dict[str, int] = {"gateway": self.port} if start_gateway else {}
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

    @property
    def worker_headers(self) -> dict[str, str]:
        """What a direct call to a worker must carry: the deployment's worker secret."""
        return auth_headers(load_worker_secret(load_config(self.config_path)))

    @property
    def admin_headers(self) -> dict[str, str]:
        """The admin token ({} before the gateway made it): the gateway's /health details need it."""
        path = self.data / "admin_token"
        return {"Authorization": f"Bearer {path.read_text().strip()}"} if path.exists() else {}

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def add_gateway(self, name: str, **overrides: Any) -> int:
        """One more gateway process ``name`` on a free port: this stack's config with ``overrides``
        merged per section (e.g. ``cluster={...}``, ``workers={"count": 0}``); returns its port."""
        config = json.loads(self.config_path.read_text())
        port = free_port()
        config["gateway"] = {**config.get("gateway", {}), "port": port}
        for section, values in overrides.items():
            if isinstance(values, dict):
                config[section] = {**config.get(section, {}), **values}
            else:
                config[section] = values
        path = self.tmp / f"config-{name}.json"
        path.write_text(json.dumps(config))
        self.gateway_ports[name] = port
        self._spawn(name, ["gateway"], path)
        return port

    def gateway_ws(self, name: str) -> str:
        return f"ws://127.0.0.1:{self.gateway_ports[name]}/v1/realtime"

    def wait_gateway(self, name: str, timeout: float = 120.0) -> dict:
        """Until gateway ``name`` sees a healthy worker (and, in a cluster, reaches Redis)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited: {(self.tmp / f'{name}.log').read_text()[-2000:]}")
            try:
                body = httpx.get(f"http://127.0.0.1:{self.gateway_ports[name]}/health", timeout=2,
                                 headers=self.admin_headers).json()
                if body.get("workers_healthy", 0) >= 1 and body.get("cluster", {"ok": True}).get("ok"):
                    return body
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gateway {name} not ready in time: {(self.tmp / f'{name}.log').read_text()[-2000:]}")

    def stop_one(self, name: str) -> None:
        self.gateway_ports.pop(name, None)
        stop(self.procs.pop(name), grace=15)

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _spawn(self, name: str, args: list[str], config_path: Path | None = None) -> None:
        self.procs[name] = spawn_module(*args, "--config", str(config_path or self.config_path),
                                        log=self.tmp / f"{name}.log")

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
                elif all(httpx.get(f"{self.worker_url(i)}/health", timeout=2,
                                   headers=self.worker_headers).json().get("state") == "IDLE"
                         for i in range(self.workers)):
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        raise RuntimeError("benchmark stack not ready in time")

    def stop(self) -> None:
        stop_all(self.procs.values(), grace=15)

    def __enter__(self) -> Launched:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stack_dir(stack: contextlib.ExitStack, prefix: str) -> str:
    """A folder for one stack's logs and configs: kept under ``OMNIDUPLEX_BENCH_LOGS`` when set
    (each stack in its own), else a temporary one removed when ``stack`` closes."""
    kept = os.environ.get("OMNIDUPLEX_BENCH_LOGS")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return tempfile.mkdtemp(prefix=f"{prefix}-", dir=kept)
    return stack.enter_context(tempfile.TemporaryDirectory(prefix=f"omniduplex-{prefix}-"))


@contextlib.contextmanager
def cascade_realtime_url(**sections) -> Iterator[str]:
    """A fresh gateway + one cascade worker (no recording, no per-client limits) for the duration;
    yields the realtime URL a bench session connects to. ``sections``: more config (``tools=...``).
    ``OMNIDUPLEX_BENCH_LOGS=DIR`` keeps the processes' logs and configs after the run, each stack's
    in its own folder under DIR (a run of several stacks overwrites none)."""
    with contextlib.ExitStack() as stack:
        tmp = stack_dir(stack, "stack")
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}, **sections) as launched:
            launched.wait_ready()
            yield launched.ws_url + "?model=omniduplex-cascade&record=false&app=bench"
