"""``./start_all.sh`` as a newcomer runs it: installs (up to date here), starts a worker and the
gateway, reports ready, serves the official SDK, and stops everything on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time

import psutil
from openai import AsyncOpenAI

from launcher.processes import ROOT, free_port, free_ports, spawn



def test_start_all_reaches_ready_and_serves_the_sdk(tmp_path):
    port, base = free_port(), free_ports(1)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "data_dir": str(ROOT / "data"),
        "gateway": {"port": port},
        "workers": {"count": 1, "base_port": base},
        "health": {"interval_s": 0.3},
    }))
    proc = spawn(["bash", str(ROOT / "start_all.sh"), "--config", str(config)], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if "OmniDuplex is ready" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(300), "\n".join(lines[-40:])
        text = "\n".join(lines)
        assert "[worker 0]" in text and f"http://127.0.0.1:{port}/" in text

        async def talk() -> str:
            client = AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{port}/v1",
                                 websocket_base_url=f"ws://127.0.0.1:{port}/v1")
            async with client.realtime.connect(model="omniduplex-cascade") as conn:
                await conn.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                                   "audio": {"input": {"turn_detection": None}}})
                await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                          "content": [{"type": "input_text", "text": "Hi!"}]})
                await conn.response.create()
                async for ev in conn:
                    if ev.type == "response.done":
                        return ev.response.status
            return "no response"

        assert asyncio.run(talk()) == "completed"
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2
    finally:
        proc.send_signal(signal.SIGTERM)  # start_all.sh execs the supervisor, so this reaches it
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    time.sleep(0.5)
    assert proc.returncode == 0
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
