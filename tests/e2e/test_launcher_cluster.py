"""The launcher's cluster flags: ``--gateway-only`` (no local workers) and ``--redis URL|local``
(passed to every child; ``local`` runs a private redis-server first and stops it last, or reuses
one another launcher on this host started)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.config import add_cli_arguments, config_from_cli, load_config
from launcher import redis_server
from launcher import supervisor as sup_mod
from launcher.processes import free_port, spawn_module
from launcher.redis_server import local_redis, redis_command, redis_ping
from launcher.supervisor import GATEWAY, REDIS, Supervisor, child_commands, cli_passthrough
from tests.support.helpers import http_answers, wait_for

PY = sys.executable


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    return parser.parse_args(list(argv))


def commands_for(*argv: str) -> dict[str, list[str]]:
    args = parse(*argv)
    return child_commands(config_from_cli(args), args.config, cli_passthrough(args))


# ---------------------------------------------------------------- (a) children and their flags


def write_config(tmp_path: Path, **cluster) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "data_dir": str(tmp_path / "data"),
        "gateway": {"port": free_port(), "tls": {"mode": "off"}},
        "cluster": {"local_port": free_port(), **cluster},
    }))
    return path


def test_gateway_only_runs_just_the_gateway_with_the_flags_passed_on(tmp_path):
    config = str(write_config(tmp_path))
    commands = commands_for("--config", config, "--gateway-only", "--redis", "redis://10.0.0.5:6379/0",
                            "--port", "8007")
    assert list(commands) == [GATEWAY]
    assert commands[GATEWAY] == [
        PY, "-m", "gateway", "--config", config, "--port", "8007",
        "--redis", "redis://10.0.0.5:6379/0", "--gateway-only",
    ]


def test_gateway_only_beats_workers_and_redis_reaches_every_child(tmp_path):
    config = str(write_config(tmp_path))
    assert list(commands_for("--config", config, "--gateway-only", "--workers", "3")) == [GATEWAY]
    commands = commands_for("--config", config, "--workers", "2", "--redis", "local")
    assert list(commands) == ["worker 0", "worker 1", GATEWAY]
    for argv in commands.values():
        assert argv[argv.index("--redis") + 1] == "local"
        assert "--gateway-only" not in argv
    assert "--redis" not in commands_for("--config", config, "--workers", "1")[GATEWAY]


def test_redis_command_is_loopback_with_its_data_under_data_dir(tmp_path):
    config = load_config(None, {"data_dir": str(tmp_path / "d"), "cluster.local_port": 6401})
    argv = redis_command(config, "/usr/bin/redis-server")
    assert argv[0] == "/usr/bin/redis-server"
    flags = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert flags == {"--port": "6401", "--bind": "127.0.0.1", "--dir": str((tmp_path / "d" / "redis").resolve()),
                     "--appendonly": "yes", "--save": "", "--protected-mode": "yes"}
    assert (tmp_path / "d" / "redis").is_dir()


def test_redis_local_without_redis_server_exits_2_saying_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    config = write_config(tmp_path)
    assert sup_mod.main(["--config", str(config), "--gateway-only", "--redis", "local"]) == 2
    err = capsys.readouterr().err
    assert "redis-server" in err and "sudo apt-get install redis-server" in err
    assert "scripts/install.sh --with-redis" in err
    # the same from config.json alone
    config = write_config(tmp_path, redis_url="local")
    assert sup_mod.main(["--config", str(config), "--gateway-only"]) == 2
    assert "sudo apt-get install redis-server" in capsys.readouterr().err


def test_redis_local_port_held_by_something_else_exits_2(tmp_path, capsys):
    with socket.socket() as squatter:  # accepts connections, never answers
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert redis_ping(port, timeout=0.3) == ""
        config = load_config(None, {"data_dir": str(tmp_path), "cluster.redis_url": "local",
                                    "cluster.local_port": port})
        assert local_redis(config) == 2
    assert f"port {port}" in capsys.readouterr().err
    assert redis_ping(port) is None  # nothing listens now


# ---------------------------------------------------------------- order: redis first, stopped last

FAKE_REDIS = r'''
import signal, socket, sys, threading, time
port = int(sys.argv[1])
def bye(*_):
    print("bye", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
time.sleep(0.5)  # the others must wait for PONG, not for the process
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen()
def serve(conn):
    with conn:
        while conn.recv(64):
            conn.sendall(b"+PONG\r\n")
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''

FAKE_GATEWAY = r'''
import signal, sys, time
def bye(*_):
    time.sleep(0.3)  # still stopping: redis must not go before this ends
    print("bye", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("up", flush=True)
time.sleep(60)
'''


async def test_redis_child_starts_first_and_stops_last(tmp_path):
    config = load_config(None, {"workers.count": 0, "gateway.port": free_port(), "gateway.tls.mode": "off",
                                "cluster.redis_url": "local", "cluster.local_port": free_port()})
    out = io.StringIO()
    sup = Supervisor(
        config,
        {REDIS: [PY, "-c", FAKE_REDIS, str(config.cluster.local_port)], GATEWAY: [PY, "-c", FAKE_GATEWAY]},
        poll_interval_s=0.05, out=out, err=io.StringIO(),
    )
    task = asyncio.create_task(sup.run())
    try:
        deadline = time.monotonic() + 15
        while "[gateway] up" not in out.getvalue():
            assert time.monotonic() < deadline, out.getvalue()
            await asyncio.sleep(0.05)
    finally:
        await sup.stop()
        await task
    lines = out.getvalue().splitlines()
    ready = f"[supervisor] redis is ready on 127.0.0.1:{config.cluster.local_port}"
    started_gateway = next(i for i, line in enumerate(lines) if line.startswith("[supervisor] started gateway"))
    assert lines.index("[supervisor] started redis (pid %d)" % sup.children[REDIS]) < lines.index(ready)
    assert lines.index(ready) < started_gateway
    assert lines.index("[gateway] bye") < lines.index("[redis] bye")
    assert "exited with code" not in out.getvalue()


# ---------------------------------------------------------------- (b) the real thing

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server not installed (bash scripts/install.sh --with-redis)")


def start_launcher(tmp_path: Path, config: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{name}.log"
    return spawn_module("launcher", "--config", str(config), *args, log=log), log


def stop(proc: subprocess.Popen, log: Path) -> float:
    began = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher did not stop within 15 s:\n{log.read_text()}")
    return time.monotonic() - began


def kill_leftovers(proc: subprocess.Popen, log: Path) -> None:
    """After a failure: the children run in their own process groups, so find them by pid."""
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", log.read_text())] if log.exists() else []
    if proc.poll() is None:
        pids += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        proc.kill()
        proc.wait()
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@needs_redis
def test_gateway_only_with_local_redis_starts_reuses_and_stops_it(tmp_path):
    config = write_config(tmp_path)
    tree = json.loads(config.read_text())
    port, redis_port = tree["gateway"]["port"], tree["cluster"]["local_port"]
    assert redis_ping(redis_port) is None
    first, first_log = start_launcher(tmp_path, config, "first", "--gateway-only", "--redis", "local")
    second = second_log = None
    try:
        wait_for("redis PONG", lambda: redis_ping(redis_port) == "+PONG", first, first_log)
        wait_for("the gateway", lambda: http_answers(port), first, first_log)
        # (c) a second gateway on this host shares that Redis instead of starting its own
        port2 = free_port()
        second, second_log = start_launcher(tmp_path, config, "second", "--gateway-only", "--redis", "local",
                                            "--port", str(port2))
        wait_for("the second gateway", lambda: http_answers(port2), second, second_log)
        assert stop(second, second_log) < 15 and second.returncode == 0, second_log.read_text()
        text = second_log.read_text()
        assert f"reusing the Redis already answering on 127.0.0.1:{redis_port}" in text
        assert "started redis" not in text and "started worker" not in text
        assert redis_ping(redis_port) == "+PONG"  # not the second one's to stop

        assert stop(first, first_log) < 15 and first.returncode == 0, first_log.read_text()
    finally:
        for proc, log in ((second, second_log), (first, first_log)):
            if proc is not None:
                kill_leftovers(proc, log)
    text = first_log.read_text()
    assert "[supervisor] started redis" in text and "started worker" not in text
    assert text.index("[supervisor] redis is ready") < text.index("[supervisor] started gateway")
    assert "[supervisor] stopped" in text
    assert redis_ping(redis_port) is None  # the private redis-server is gone with its launcher
    redis_pid = int(re.search(r"started redis \(pid (\d+)\)", text).group(1))
    assert not psutil.pid_exists(redis_pid) or psutil.Process(redis_pid).status() == psutil.STATUS_ZOMBIE
    assert (tmp_path / "data" / "redis" / "appendonlydir").is_dir()
