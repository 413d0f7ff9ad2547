"""Children die with their parent (``launcher/processes.py``), even a parent killed with ``kill -9``:
the launcher's gateway (and private redis-server), their ports no longer listening, and what ``spawn`` starts, from the main thread
or from a thread that has ended since."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from launcher.processes import free_port, spawn, spawn_module, stop
from launcher.redis_server import redis_ping
from tests.support.helpers import gone, http_answers, wait_for

PY = sys.executable
STARTED = re.compile(r"\[supervisor\] started (\w+) \(pid (\d+)\)")


def listening(port: int) -> bool:
    """Something accepts connections on the port (a TIME_WAIT left by a closed one does not count)."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_launcher_killed_with_sigkill_takes_its_children_and_frees_their_ports(tmp_path):
    port, redis_port = free_port(), free_port()
    with_redis = shutil.which("redis-server") is not None
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "data_dir": str(tmp_path / "data"),
        "gateway": {"port": port, "tls": {"mode": "off"}},
        "cluster": {"local_port": redis_port},
    }))
    log = tmp_path / "launcher.log"
    args = ["--gateway-only", *(["--redis", "local"] if with_redis else [])]
    launcher = spawn_module("launcher", "--config", str(config), *args, log=log)
    children: dict[str, int] = {}
    try:
        wait_for("the gateway", lambda: http_answers(port), launcher, log, timeout=30)
        children = {name: int(pid) for name, pid in STARTED.findall(log.read_text())}
        assert set(children) == ({"gateway", "redis"} if with_redis else {"gateway"}), log.read_text()
        launcher.send_signal(signal.SIGKILL)  # no chance to stop anything itself
        launcher.wait(5)
        deadline = time.monotonic() + 5
        while not (all(gone(pid) for pid in children.values()) and not listening(port)
                   and not listening(redis_port)):
            assert time.monotonic() < deadline, (
                f"left behind: {[n for n, pid in children.items() if not gone(pid)]}, "
                f"listening: gateway {listening(port)}, redis {listening(redis_port)}")
            time.sleep(0.05)
        assert redis_ping(redis_port) is None and not http_answers(port)
    finally:
        stop(launcher, grace=1)
        for pid in children.values():
            if not gone(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)


PARENT = """
import sys, threading, time
from launcher.processes import spawn
sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
main = spawn(sleep)
box = []
thread = threading.Thread(target=lambda: box.append(spawn(sleep)))
thread.start()
thread.join()  # the forking thread has ended: its child must live on all the same
print(main.pid, box[0].pid, flush=True)
time.sleep(60)
"""


def test_spawned_children_outlive_their_thread_but_not_a_killed_parent():
    parent = spawn([PY, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2, pids
        time.sleep(0.3)
        assert not any(gone(pid) for pid in pids)  # a short-lived spawning thread did not take them
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        deadline = time.monotonic() + 5
        while not all(gone(pid) for pid in pids):
            assert time.monotonic() < deadline, [pid for pid in pids if not gone(pid)]
            time.sleep(0.05)
    finally:
        stop(parent, grace=1)


def test_a_child_spawned_from_an_ended_thread_lives_on_here():
    box: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: box.append(spawn([PY, "-c", "import time; time.sleep(60)"])))
    thread.start()
    thread.join()
    try:
        time.sleep(0.3)
        assert box[0].poll() is None
    finally:
        assert stop(box[0], grace=5) == -signal.SIGTERM
