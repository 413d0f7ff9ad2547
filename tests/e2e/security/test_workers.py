"""Issue 32 item 7: no way around the gateway, and no stranger on a worker's port.

- Every call to a worker carries the deployment's worker secret (``<data_dir>/worker_secret``,
  0600); a call without it is refused: HTTP 401, or the WebSocket closed with 1008 and the reason.
  The gateway's own calls (realtime relay, REST jobs, health probes) still work.
- The gateway's ``/health`` tells the public ok or not and the counts; worker URLs and the rest
  need the admin token.
- The launcher exits with a clear error when another process holds a worker's port: before it
  starts anything, and when what answers on the port is not the worker it started (it used to
  print "ready" and let the gateway relay every session to the stranger).
"""

from __future__ import annotations

import asyncio
import io
import json
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import websockets

from core.config import load_config
from core.rest_jobs import CHAT_PATH
from launcher.processes import free_port, spawn, stop
from launcher.supervisor import Supervisor
from tests.support.realtime_client import recv_until
from tests.support.reliability import ws_url
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("workers"), workers=1, recording={"enabled": False}).start()
    yield s
    s.stop()


def test_the_secret_is_generated_once_into_data_dir_with_mode_0600(stack):
    path = stack.data_dir / "worker_secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) >= 32
    assert stack.worker_headers == {"Authorization": f"Bearer {path.read_text().strip()}"}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-the-secret-at-all"}],
                         ids=["no secret", "wrong secret"])
def test_a_worker_refuses_http_calls_without_the_secret(stack, headers):
    for method, path in (("GET", "/health"), ("GET", "/metrics"), ("POST", CHAT_PATH)):
        r = httpx.request(method, f"{stack.worker_url()}{path}", headers=headers, json={}, timeout=5)
        assert r.status_code == 401, (path, r.status_code, r.text)
        assert "worker secret" in r.json()["detail"], r.text
    ok = httpx.get(f"{stack.worker_url()}/health", headers=stack.worker_headers, timeout=5)
    assert ok.status_code == 200 and ok.json()["model_loaded"] is True


@pytest.mark.parametrize("headers", [None, {"Authorization": "Bearer not-the-secret-at-all"}],
                         ids=["no secret", "wrong secret"])
async def test_a_worker_closes_a_websocket_without_the_secret_with_1008(stack, headers):
    url = stack.worker_url().replace("http://", "ws://") + "/ws/realtime?record=false"
    async with websockets.connect(url, additional_headers=headers, open_timeout=5) as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)  # no session.created: it is closed at once
    assert closed.value.rcvd.code == 1008 and "worker secret" in closed.value.rcvd.reason
    # With the secret (what the gateway sends) the same socket gets a session.
    async with websockets.connect(url, additional_headers=stack.worker_headers, open_timeout=5) as ws:
        await recv_until(ws, "session.created", 10)


async def test_the_gateway_still_reaches_its_worker_on_every_path(stack):
    async with websockets.connect(ws_url(stack, record="false"), open_timeout=10) as ws:  # the relay
        await recv_until(ws, "session.created", 15)
    async with httpx.AsyncClient(timeout=60) as http:  # a REST job
        r = await http.post(f"{stack.url}/v1/chat/completions", json={
            "model": "omniduplex-cascade", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200, r.text
    assert stack.health()["workers"][0]["health"] == "healthy"  # the probes


def test_gateway_health_tells_the_public_only_ok_and_counts(stack):
    public = httpx.get(f"{stack.url}/health", timeout=5)
    assert public.status_code == 200
    body = public.json()
    assert body["status"] == "ok" and body["workers_healthy"] == 1
    assert "workers" not in body and str(stack.base_port) not in public.text, body
    wrong = httpx.get(f"{stack.url}/health", headers={"Authorization": "Bearer wrong-token-xxxxxxxxxxxx"}, timeout=5)
    assert "workers" not in wrong.json()
    admin = httpx.get(f"{stack.url}/health", headers=stack.admin_headers, timeout=5).json()
    assert admin["workers"][0]["url"] == stack.worker_url(), admin


def test_the_launcher_exits_when_another_process_holds_a_worker_port(tmp_path):
    """A stranger (here a plain HTTP server) listens on worker 0's port: the launcher says which port
    and why, and exits, instead of crash-looping its worker behind a "ready" line."""
    s = Stack(tmp_path, workers=1)
    stranger = spawn([sys.executable, "-m", "http.server", str(s.base_port), "--bind", "127.0.0.1"],
                     log=tmp_path / "stranger.log")
    try:
        deadline = time.monotonic() + 10
        while True:  # up once it answers
            try:
                httpx.get(f"http://127.0.0.1:{s.base_port}/", timeout=0.5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, (tmp_path / "stranger.log").read_text()
                time.sleep(0.05)
        launcher = s.start_supervisor()
        try:
            code = launcher.wait(20)
        except Exception:
            stop(launcher)
            raise AssertionError("the launcher kept running with its worker's port taken:\n"
                                 + (tmp_path / "supervisor.log").read_text()[-2000:]) from None
        log = (tmp_path / "supervisor.log").read_text()
        assert code != 0, log
        assert f"port {s.base_port}" in log and "already in use" in log, log
        assert "is ready" not in log, log
    finally:
        stop(stranger)


class _Stranger(ThreadingHTTPServer):
    """What answers on the worker's port: a worker of another start (200, not our nonce) or of
    another deployment (401: it does not know our secret)."""

    def __init__(self, port: int, status: int) -> None:
        body = {"state": "IDLE", "model_loaded": True, "instance": "someone-else", "pid": 1}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = json.dumps(body if status == 200 else {"detail": "worker secret"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.parametrize("status", [200, 401], ids=["another start", "another deployment"])
async def test_the_supervisor_exits_when_a_stranger_answers_on_its_workers_port(tmp_path, status):
    """The port was free at start, then taken: the worker this supervisor starts cannot bind and
    exits, while something else answers /health there. Not "ready": an error naming the port."""
    port = free_port()
    config = load_config(None, {"data_dir": str(tmp_path), "workers.count": 1, "workers.base_port": port,
                                "gateway.port": free_port(), "gateway.tls.mode": "off"})
    stranger = _Stranger(port, status)
    out, err = io.StringIO(), io.StringIO()
    crashing_worker = [sys.executable, "-c", "import sys; sys.exit('address already in use')"]
    sup = Supervisor(config, {"worker 0": crashing_worker}, backoff_base_s=0.05, poll_interval_s=0.05,
                     out=out, err=err)
    try:
        await asyncio.wait_for(sup.run(), 15)
    except TimeoutError:
        raise AssertionError(f"the supervisor did not stop:\n{out.getvalue()}\n{err.getvalue()}") from None
    finally:
        stranger.shutdown()
        stranger.server_close()
    assert sup.exit_code == 1
    assert "[worker 0] ready" not in out.getvalue()
    assert f"holds port {port}" in err.getvalue() and "another process" in err.getvalue(), err.getvalue()
    assert (tmp_path / "worker_secret").exists()  # made before the children start
