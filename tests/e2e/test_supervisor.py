"""Supervisor: restarts with backoff, loading progress and ready lines, clean stop, config errors.

Children are test doubles: tiny ``python -c`` scripts and a fake worker/gateway HTTP server
(``FAKE_SERVER``) whose /health goes LOADING (llm 35%) -> LOADING (tts 80%) -> loaded.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.config import load_config
from launcher.processes import free_port, spawn
from launcher.supervisor import Supervisor, child_commands
from tests.support.helpers import gone

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

FAKE_SERVER = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.monotonic()
STEPS = [(1.0, "llm", 0.35, "loading smollm2"), (2.0, "tts", 0.8, "loading piper")]

class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        t = time.monotonic() - start
        status, body = 200, {"state": "IDLE", "model_loaded": True}
        if role == "gateway" and t < 0.5:
            status, body = 503, {"ok": False}
        elif role == "broken":
            body = {"state": "ERROR", "model_loaded": False, "error": "model load failed: boom",
                    "load_progress": {"stage": "llm", "fraction": 0.5, "detail": ""}}
        elif role == "worker":
            for until, stage, fraction, detail in STEPS:
                if t < until:
                    body = {"state": "LOADING", "model_loaded": False,
                            "load_progress": {"stage": stage, "fraction": fraction, "detail": detail}}
                    break
        body["instance"] = os.environ.get("OMNIDUPLEX_WORKER_INSTANCE")  # the launcher's nonce, as a worker does
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

print(f"fake {role} on {port}", flush=True)
ThreadingHTTPServer((host, port), Health).serve_forever()
'''




def make_config(workers: int = 0, gateway_host: str = "127.0.0.1"):
    return load_config(
        None,
        {
            "workers.count": workers,
            "workers.base_port": free_port(),
            "gateway.port": free_port(),
            "gateway.host": gateway_host,
            "gateway.tls.mode": "off",  # the fake gateway speaks plain HTTP (HTTPS: tests/e2e/test_tls.py)
        },
    )


async def wait_until(predicate, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def start(supervisor: Supervisor) -> asyncio.Task:
    return asyncio.create_task(supervisor.run())


async def test_crashed_child_is_restarted_with_doubling_backoff():
    out, err = io.StringIO(), io.StringIO()
    script = "import sys; print('hello'); print('oops', file=sys.stderr); sys.exit(3)"
    sup = Supervisor(
        make_config(),
        {"crasher": [PY, "-c", script]},
        backoff_base_s=0.05,
        backoff_max_s=0.2,
        out=out,
        err=err,
    )
    task = await start(sup)
    exited = r"\[supervisor\] crasher exited with code 3; restarting in ([\d.]+)s"
    try:
        await wait_until(lambda: len(re.findall(exited, out.getvalue())) >= 5, what="5 restarts")
    finally:
        await sup.stop()
        await task
    text = out.getvalue()
    assert re.findall(exited, text)[:5] == ["0.05", "0.1", "0.2", "0.2", "0.2"]
    assert text.count("[supervisor] started crasher") >= 5
    assert "[crasher] hello" in text
    assert "[crasher] oops" in err.getvalue()


async def test_backoff_resets_after_a_long_enough_run():
    out = io.StringIO()
    sup = Supervisor(
        make_config(),
        {"slow": [PY, "-c", "import time, sys; time.sleep(0.3); sys.exit(1)"]},
        backoff_base_s=0.05,
        stable_after_s=0.2,  # every run counts as "ran long enough"
        out=out,
        err=io.StringIO(),
    )
    task = await start(sup)
    exited = r"\[supervisor\] slow exited with code 1; restarting in ([\d.]+)s"
    try:
        await wait_until(lambda: len(re.findall(exited, out.getvalue())) >= 3, what="3 restarts")
    finally:
        await sup.stop()
        await task
    assert set(re.findall(exited, out.getvalue())) == {"0.05"}


@pytest.mark.parametrize("gateway_host", ["127.0.0.1", "0.0.0.0"])
async def test_progress_lines_then_ready_line(tmp_path, gateway_host):
    fake = tmp_path / "fake_server.py"
    fake.write_text(FAKE_SERVER)
    config = make_config(workers=1, gateway_host=gateway_host)
    wport, gport = config.workers.base_port, config.gateway.port
    out = io.StringIO()
    sup = Supervisor(
        config,
        {
            "worker 0": [PY, str(fake), "worker", "127.0.0.1", str(wport)],
            "gateway": [PY, str(fake), "gateway", gateway_host, str(gport)],
        },
        poll_interval_s=0.1,
        out=out,
        err=io.StringIO(),
    )
    task = await start(sup)
    try:
        await wait_until(lambda: "OmniDuplex is ready" in out.getvalue(), what="the ready line")
    finally:
        await sup.stop()
        await task
    lines = out.getvalue().splitlines()
    ready_line = f"OmniDuplex is ready: http://127.0.0.1:{gport}/"
    for expected in (
        "[worker 0] loading: llm 35% loading smollm2",
        "[worker 0] loading: tts 80% loading piper",
        "[worker 0] ready",
        ready_line,
    ):
        assert expected in lines, f"{expected!r} not in output:\n" + "\n".join(lines)
    assert lines.count("[worker 0] loading: llm 35% loading smollm2") == 1  # printed on change only
    assert lines.index("[worker 0] ready") < lines.index(ready_line)
    assert f"[gateway] fake gateway on {gport}" in lines


async def test_worker_load_error_is_reported_once(tmp_path):
    fake = tmp_path / "fake_server.py"
    fake.write_text(FAKE_SERVER)
    config = make_config(workers=1)
    out, err = io.StringIO(), io.StringIO()
    sup = Supervisor(
        config,
        {"worker 0": [PY, str(fake), "broken", "127.0.0.1", str(config.workers.base_port)]},
        poll_interval_s=0.05,
        out=out,
        err=err,
    )
    task = await start(sup)
    try:
        reported = "[worker 0] ERROR: model load failed: boom"
        await wait_until(lambda: reported in err.getvalue(), what="the error line")
        await asyncio.sleep(0.3)
    finally:
        await sup.stop()
        await task
    assert err.getvalue().count("model load failed: boom") == 1
    assert "[worker 0] loading: llm 50%" in out.getvalue()
    assert "[worker 0] ready" not in out.getvalue()


async def test_worker_not_ready_in_time_warns_and_keeps_running():
    err = io.StringIO()
    sup = Supervisor(
        make_config(workers=1),  # nothing answers on the worker's port
        {"worker 0": [PY, "-c", "import time; time.sleep(60)"]},
        poll_interval_s=0.05,
        ready_timeout_s=0.3,
        out=io.StringIO(),
        err=err,
    )
    task = await start(sup)
    try:
        warning = "WARNING: worker 0 is not ready after 0.3s"
        await wait_until(lambda: warning in err.getvalue(), what="the warning")
        pid = sup.children["worker 0"]
        assert not gone(pid)
    finally:
        await sup.stop()
        await task
    assert gone(pid)


CHILD_WITH_GRANDCHILD = """
import os, signal, subprocess, sys, time
if {stubborn}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild: needs SIGKILL
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("pids", os.getpid(), grandchild.pid, flush=True)
time.sleep(60)
"""


async def test_stop_terminates_children_and_grandchildren():
    out = io.StringIO()
    sup = Supervisor(
        make_config(),
        {
            "stubborn": [PY, "-c", CHILD_WITH_GRANDCHILD.format(stubborn=True)],
            "gateway": [PY, "-c", CHILD_WITH_GRANDCHILD.format(stubborn=False)],
        },
        stop_timeout_s=0.5,
        out=out,
        err=io.StringIO(),
    )
    task = await start(sup)
    pids_line = r"\[(\w+)\] pids (\d+) (\d+)"
    try:
        await wait_until(lambda: len(re.findall(pids_line, out.getvalue())) == 2, what="both children")
        pids = {name: (int(a), int(b)) for name, a, b in re.findall(pids_line, out.getvalue())}
        for child, _ in pids.values():
            assert os.getpgid(child) == child != os.getpgid(0)  # own process group
    finally:
        began = time.monotonic()
        await sup.stop()
        await task
    assert time.monotonic() - began < 5
    every_pid = [pid for pair in pids.values() for pid in pair]
    # A killed process can still be exiting when stop() returns (a full run on two busy cores saw
    # a grandchild a moment after): all must be gone within a second or two.
    try:
        await wait_until(lambda: all(gone(pid) for pid in every_pid), timeout=2.0, what="every pid gone")
    except AssertionError:
        raise AssertionError(f"still running after stop: {[p for p in every_pid if not gone(p)]}") from None
    assert "[supervisor] stubborn did not stop in 0.5s; killing it" in out.getvalue()
    assert "[supervisor] gateway did not stop" not in out.getvalue()
    assert "exited with code" not in out.getvalue()  # stopping is not a crash


def test_sigint_stops_children_and_exits_0(tmp_path):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    script = tmp_path / "run_supervisor.py"
    script.write_text(
        "import sys\n"
        "from core.config import load_config\n"
        "from launcher.supervisor import Supervisor, serve\n"
        f"sup = Supervisor(load_config(None), {{'sleeper': [sys.executable, '-c', {child!r}]}})\n"
        "sys.exit(serve(sup))\n"
    )
    proc = spawn([PY, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "child did not start"
            time.sleep(0.05)
        child_pid = int(pid_file.read_text())
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "[supervisor] stopping" in stdout and "[supervisor] stopped" in stdout
    assert gone(child_pid)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [PY, "-m", "launcher", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30
    )


def test_bad_config_file_exits_2_naming_the_field(tmp_path):
    bad = tmp_path / "badfile.json"
    bad.write_text(json.dumps({"workers": {"count": -1}}))
    result = run_cli("--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert "workers.count" in result.stderr


def test_bad_cli_override_and_missing_file_exit_2(tmp_path):
    result = run_cli("--workers", "-1", cwd=tmp_path)
    assert result.returncode == 2 and "workers.count" in result.stderr
    result = run_cli("--config", "nope.json", cwd=tmp_path)
    assert result.returncode == 2 and "nope.json" in result.stderr


def test_child_commands_pass_config_index_and_overrides():
    config = load_config(None, {"workers.count": 2})
    commands = child_commands(config, "my.json", ["--workers", "2", "--port", "9000"])
    assert list(commands) == ["worker 0", "worker 1", "gateway"]
    assert commands["worker 1"] == [
        PY, "-m", "worker", "--config", "my.json", "--index", "1", "--workers", "2", "--port", "9000"
    ]
    assert commands["gateway"] == [
        PY, "-m", "gateway", "--config", "my.json", "--workers", "2", "--port", "9000"
    ]
    assert child_commands(config, "config.json", [])["gateway"][3:] == ["--config", "config.json"]
