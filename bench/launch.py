"""Start real gateway and worker processes for a benchmark (temp data dir, shared model cache)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
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


# Ports this process has handed out. A probe socket is closed before the caller binds the port, and the
# kernel may give the same port to the next probe, so a gateway port picked right after a worker block
# could land inside it (CI met "gateway.port 51601 collides with worker ports 51601-51601").
_handed_out: set[int] = set()


def _probe_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port() -> int:
    """A free port not handed out before by this process."""
    for _ in range(1000):
        port = _probe_port()
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port left that was not handed out before")


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports, none handed out before by this process."""
    for _ in range(100):
        base = _probe_port()
        block = range(base, base + n)
        if base + n >= 65000 or any(p in _handed_out for p in block):
            continue
        ok = True
        for p in block:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            _handed_out.update(block)
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
                body = httpx.get(f"http://127.0.0.1:{self.gateway_ports[name]}/health", timeout=2).json()
                if body.get("workers_healthy", 0) >= 1 and body.get("cluster", {"ok": True}).get("ok"):
                    return body
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gateway {name} not ready in time: {(self.tmp / f'{name}.log').read_text()[-2000:]}")

    def stop_one(self, name: str) -> None:
        proc = self.procs.pop(name)
        self.gateway_ports.pop(name, None)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _spawn(self, name: str, args: list[str], config_path: Path | None = None) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        log = open(self.tmp / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", *args, "--config", str(config_path or self.config_path)], cwd=ROOT, env=env,
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


def redis_pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A private, non-persistent Debian ``redis-server`` on a free port for the duration; yields
    its ``redis://`` URL (for ``cluster.redis_url``)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed (Debian: apt-get install redis-server); "
                         "several gateways share their queue through it")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(folder)], stdout=open(folder / "redis.log", "ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not redis_pong(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(folder / 'redis.log').read_text()[-1000:]}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def cascade_realtime_url() -> Iterator[str]:
    """A fresh gateway + one cascade worker (no recording, no per-client limits) for the duration;
    yields the realtime URL a bench session connects to."""
    with tempfile.TemporaryDirectory(prefix="omniduplex-bench-") as tmp:
        with Launched(Path(tmp), workers=1, recording={"enabled": False},
                      auth={"per_ip": {"sessions_per_minute": 0, "concurrent": 0}}) as launched:
            launched.wait_ready()
            yield launched.ws_url + "?model=omniduplex-cascade&record=false&app=bench"
