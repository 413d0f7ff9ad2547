"""A browser on a call, for the tests and the benchmarks alike: headless Chromium whose fake
microphone plays a WAV, spoken WAVs for it, and the app server an Agents SDK page needs.

- ``chromium(wav, profile)``: Debian's Chromium under Selenium, fake microphone looping ``wav``
  (Chrome's fake capture runs at 48 kHz: ``WAV_RATE``), fake camera, autoplay allowed.
- ``spoken_wav(path, tts, text, lead_s, total_s)``: Piper's words after ``lead_s`` of silence.
- ``AgentsApp``: what an app on the OpenAI Agents SDK for JavaScript runs beside its page
  (``tests/js/webrtc_page.html`` on the SDK's browser bundle): it serves the page and the bundle,
  and mints an ephemeral key for the page with the service's key (``POST /session``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from core import media

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAV_RATE = 48000  # Chrome's fake capture device runs at 48 kHz; no resampling surprises
DESKTOP = (1280, 800)
JS = ROOT / "tests" / "js"
JS_STAMP = JS / "node_modules" / ".omniduplex-install"  # scripts/install.sh writes it once `npm ci` succeeded
SDK_BUNDLE = JS / "node_modules" / "@openai" / "agents-realtime" / "dist" / "bundle"


def speech_48k(tts, text: str) -> np.ndarray:
    pcm24 = np.frombuffer(b"".join(tts.synthesize(text, deterministic=True)), dtype="<i2").astype(np.float32)
    t_in = np.arange(len(pcm24)) / 24000
    t_out = np.arange(int(len(pcm24) * WAV_RATE / 24000)) / WAV_RATE
    return np.interp(t_out, t_in, pcm24)


def write_wav(path: Path, audio: np.ndarray) -> Path:
    return media.write_wav(path, np.clip(audio, -32768, 32767).astype("<i2"), WAV_RATE)


def spoken_wav(path: Path, tts, text: str, lead_s: float = 1.0, total_s: float = 8.0, tail_s: float = 3.0) -> Path:
    """``lead_s`` silence, the spoken ``text``, then silence to at least ``tail_s`` and ``total_s``."""
    speech = speech_48k(tts, text)
    lead = int(lead_s * WAV_RATE)
    audio = np.zeros(max(int(total_s * WAV_RATE), lead + len(speech) + int(tail_s * WAV_RATE)), dtype=np.float32)
    audio[lead:lead + len(speech)] = speech
    return write_wav(path, audio)


def silence_wav(path: Path, seconds: float = 5.0) -> Path:
    return write_wav(path, np.zeros(int(seconds * WAV_RATE), dtype=np.float32))


def chromium(wav: Path, profile: Path, allow_media: bool = True, size: tuple[int, int] = DESKTOP,
             extra_flags: tuple[str, ...] = ()):
    """Headless Chromium whose fake microphone loops ``wav``; the fake camera shows Chrome's test pattern."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    # Without the fake permission UI, --deny-permission-prompts answers the mic prompt "no".
    permission = "--use-fake-ui-for-media-stream" if allow_media else "--deny-permission-prompts"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", permission,
        "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}",
        "--autoplay-policy=no-user-gesture-required", f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}", *extra_flags,
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(30)
    return driver


class AgentsApp:
    """The app server of an Agents SDK page: serves ``webrtc_page.html`` and the SDK's bundle, and
    mints an ephemeral key with the service's ``key`` (``POST /session``); ``minted`` lists them."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.gateway: str | None = None
        self.minted: list[str] = []
        app = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/":
                    self._send(200, (JS / "webrtc_page.html").read_bytes(), "text/html; charset=utf-8")
                elif path.startswith("/sdk/") and path.endswith(".mjs") and "/" not in path[5:]:
                    file = SDK_BUNDLE / path[5:]
                    if file.is_file():
                        self._send(200, file.read_bytes(), "text/javascript")
                        return
                    self._send(404, b"not found", "text/plain")
                else:
                    self._send(404, b"not found", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                if self.path != "/session":
                    self._send(404, b"not found", "text/plain")
                    return
                import httpx

                r = httpx.post(f"{app.gateway}/v1/realtime/client_secrets", timeout=10,
                               headers={"Authorization": f"Bearer {app.key}"},
                               json={"expires_after": {"anchor": "created_at", "seconds": 120},
                                     "session": {"type": "realtime"}})
                if r.status_code != 200:
                    self._send(502, r.content, "application/json")
                    return
                secret = r.json()
                app.minted.append(secret["value"])
                body = json.dumps({"value": secret["value"], "expires_at": secret["expires_at"]}).encode()
                self._send(200, body, "application/json")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sdk_call_results(driver) -> dict:
    """What the Agents SDK page recorded so far (``window.__results``)."""
    return driver.execute_script("return window.__results || null") or {}
