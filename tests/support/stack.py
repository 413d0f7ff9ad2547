"""Real processes for end-to-end tests: workers and a gateway started with ``python -m``."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx

from core.config import load_config
from core.worker_auth import auth_headers, load_worker_secret
from launcher.processes import ROOT, free_port, free_ports  # noqa: F401 - re-exported for the tests
from launcher.processes import kill, spawn_module, stop_all


def share_model_cache(data_dir: Path) -> Path:
    """``data_dir`` (created) with the repo's converted model cache linked in as its ``models``: a
    backend loaded on it converts the bundled LLM and fits its heads once per checkout, not per test."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (ROOT / "data" / "models").mkdir(parents=True, exist_ok=True)
    if not (data_dir / "models").exists():
        (data_dir / "models").symlink_to(ROOT / "data" / "models")
    return data_dir


class Stack:
    """N workers + one gateway on free ports, sharing the repo's model cache."""

    def __init__(self, tmp: Path, workers: int = 1, worker_host: str = "127.0.0.1",
                 worker_prefix: list[str] | None = None, **overrides) -> None:
        """``worker_host``: the address workers bind and the gateway dials (``workers.host``);
        ``worker_prefix``: a command the workers run under (``["ip", "netns", "exec", ns]``)."""
        self.tmp = tmp
        self.worker_host = worker_host
        self.worker_prefix = list(worker_prefix or [])
        self.base_port = free_ports(workers)
        self.port = free_port()
        # Own data dir (recordings, tokens) per stack; the converted model cache is shared.
        self.data_dir = share_model_cache(tmp / "data")
        config = {
            "data_dir": str(self.data_dir),
            "gateway": {"port": self.port},
            "workers": {"count": workers, "base_port": self.base_port, "host": worker_host},
            "health": {"interval_s": 0.2, "timeout_s": 1.0, "jitter": 0.1},
        }
        for section, values in overrides.items():
            config.setdefault(section, {}).update(values)
        self.config_path = tmp / "config.json"
        self.config_path.write_text(json.dumps(config))
        self.procs: dict[str, subprocess.Popen] = {}
        self.n = workers

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_url(self, i: int = 0) -> str:
        return f"http://{self.worker_host}:{self.base_port + i}"

    def _spawn(self, name: str, args: list[str], prefix: list[str] | None = None) -> None:
        self.procs[name] = spawn_module(*args, "--config", str(self.config_path), prefix=prefix or (),
                                        log=self.tmp / f"{name}.log")

    def start_worker(self, i: int) -> None:
        self._spawn(f"worker{i}", ["worker", "--index", str(i)], self.worker_prefix)

    def start_gateway(self) -> None:
        self._spawn("gateway", ["gateway"])

    def start_supervisor(self) -> subprocess.Popen:
        """``python -m launcher`` instead of :meth:`start`: it runs the workers and the
        gateway itself; its output (with each child's pid) goes to ``supervisor.log``."""
        self._spawn("supervisor", ["launcher"])
        return self.procs["supervisor"]

    def start(self, timeout: float = 180.0) -> Stack:
        for i in range(self.n):
            self.start_worker(i)
        self.start_gateway()
        self.wait_healthy(self.n, timeout)
        return self

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin_token").read_text().strip()

    @property
    def admin_headers(self) -> dict[str, str]:
        """The admin token as a Bearer header ({} before the gateway made it): /health's details need it."""
        path = self.data_dir / "admin_token"
        return {"Authorization": f"Bearer {path.read_text().strip()}"} if path.exists() else {}

    @property
    def worker_headers(self) -> dict[str, str]:
        """What a direct call to a worker must carry: the deployment's worker secret."""
        return auth_headers(load_worker_secret(load_config(self.config_path)))

    def health(self) -> dict:
        """The gateway's /health with its details (worker URLs, upstream), as the admin sees it."""
        return httpx.get(f"{self.url}/health", timeout=2, headers=self.admin_headers).json()

    def worker_health(self, i: int = 0) -> dict:
        return httpx.get(f"{self.worker_url(i)}/health", timeout=2, headers=self.worker_headers).json()

    def wait_healthy(self, count: int, timeout: float = 180.0) -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None and name in ("gateway", "supervisor"):
                    raise RuntimeError(f"{name} exited: {(self.tmp / f'{name}.log').read_text()[-2000:]}")
            try:
                last = self.health()
                if last["workers_healthy"] >= count:
                    return last
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        logs = "\n".join(p.read_text()[-1500:] for p in self.tmp.glob("*.log"))
        raise RuntimeError(f"stack not healthy in {timeout}s: {last}\n{logs}")

    def kill(self, name: str) -> None:
        kill(self.procs[name])

    def stop(self) -> None:
        stop_all(self.procs.values(), grace=10)
