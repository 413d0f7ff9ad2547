"""Debian's ``redis-server`` as a child process: the one Redis starter.

- The launcher's ``--redis local`` (``cluster.redis_url: "local"``): :func:`local_redis` decides
  whether to run one (nothing answers on ``cluster.local_port``), to reuse one (another launcher's
  on this host answers PING) or to refuse; :func:`redis_command` is the command the supervisor
  keeps running (persistent: its append-only file in ``<data_dir>/redis``).
- Benchmarks and tests: :func:`start_redis` / :func:`redis_server` run a private, non-persistent
  one on a free port for as long as they need it (started with :mod:`launcher.processes`, so it
  dies with them).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from core.config import AppConfig
from launcher.processes import free_port, kill, spawn, stop

_PING = b"*1\r\n$4\r\nPING\r\n"

INSTALL_HINT = "Debian: sudo apt-get install redis-server   (or: bash scripts/install.sh --with-redis)"


def redis_ping(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> str | None:
    """The first reply line to a RESP ``PING`` on ``host:port``: ``"+PONG"``; an error such as
    ``"-NOAUTH …"`` or ``"-LOADING …"`` (a Redis, not ready for us); ``""`` when something accepts
    the connection but answers nothing Redis-like; None when nothing listens."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(_PING)
            reply = b""
            while b"\r\n" not in reply and len(reply) < 512:
                chunk = sock.recv(512)
                if not chunk:
                    break
                reply += chunk
    except (ConnectionRefusedError, socket.gaierror):
        return None
    except OSError:  # accepted, then silent or reset: not a Redis we can use
        return ""
    line = reply.split(b"\r\n", 1)[0].decode(errors="replace")
    return line if line[:1] in ("+", "-") else ""


def redis_argv(executable: str, port: int, folder: Path, *, persistent: bool) -> list[str]:
    """``redis-server`` on loopback only, its files in ``folder``; ``persistent``: an append-only
    file (no RDB snapshots either way)."""
    return [
        executable, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(Path(folder).resolve()),
        "--appendonly", "yes" if persistent else "no", "--save", "", "--protected-mode", "yes",
    ]


def redis_command(config: AppConfig, executable: str) -> list[str]:
    """The private redis-server of ``--redis local``: loopback only, its append-only file in
    ``<data_dir>/redis`` (made here), no RDB snapshots."""
    data = Path(config.data_dir) / "redis"
    data.mkdir(parents=True, exist_ok=True)
    return redis_argv(executable, config.cluster.local_port, data, persistent=True)


def local_redis(config: AppConfig) -> list[str] | int | None:
    """For ``--redis local``: the redis-server command to supervise; None when a Redis already
    answers on ``127.0.0.1:<cluster.local_port>`` (another launcher's on this host: shared);
    2 (the exit code) with the reason on stderr when none can be had."""
    port = config.cluster.local_port
    reply = redis_ping(port)
    if reply and not reply.startswith(("+PONG", "-LOADING")):  # -NOAUTH, -DENIED: not ours to use
        print(f"omniduplex: --redis local: the Redis on 127.0.0.1:{port} (cluster.local_port) refuses PING "
              f"({reply}); stop it or choose another cluster.local_port", file=sys.stderr)
        return 2
    if reply:  # another launcher's private Redis (or still loading its data)
        print(f"[supervisor] reusing the Redis already answering on 127.0.0.1:{port} (cluster.local_port)",
              flush=True)
        return None
    if reply == "":
        print(f"omniduplex: --redis local: port {port} (cluster.local_port) is taken by something that does "
              "not answer Redis PING; stop it or choose another cluster.local_port", file=sys.stderr)
        return 2
    executable = shutil.which("redis-server")
    if executable is None:
        print("omniduplex: --redis local runs Debian's redis-server, which is not installed (not on PATH).\n"
              "  Install it:  sudo apt-get install redis-server   (or: bash scripts/install.sh --with-redis)\n"
              "  or give an existing Redis instead:  --redis redis://HOST:6379/0", file=sys.stderr)
        return 2
    try:
        return redis_command(config, executable)
    except OSError as exc:
        print(f"omniduplex: --redis local: cannot create {Path(config.data_dir) / 'redis'}: {exc}", file=sys.stderr)
        return 2


class RedisServer:
    """A private, non-persistent ``redis-server`` child on ``port``; its output in ``<folder>/redis.log``."""

    def __init__(self, folder: Path, port: int | None = None, *, timeout: float = 10.0) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError(f"redis-server is not installed ({INSTALL_HINT})")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port if port is not None else free_port()
        self.log = self.folder / "redis.log"
        self.proc = spawn(redis_argv(executable, self.port, self.folder, persistent=False), log=self.log)
        deadline = time.monotonic() + timeout
        while redis_ping(self.port) != "+PONG":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not start: {self.log.read_text(errors='replace')[-1000:]}")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        """For ``cluster.redis_url``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 5 s."""
        stop(self.proc, grace=5.0)

    def kill(self) -> None:
        """``kill -9``: an outage, as a test wants it."""
        kill(self.proc)


def start_redis(folder: Path, port: int | None = None, *, timeout: float = 10.0) -> RedisServer:
    """A private Redis on ``port`` (default: a free one), answering PING once this returns."""
    return RedisServer(folder, port, timeout=timeout)


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A private, non-persistent Redis on a free port for the duration; yields its ``redis://`` URL."""
    server = start_redis(folder)
    try:
        yield server.url
    finally:
        server.stop()
