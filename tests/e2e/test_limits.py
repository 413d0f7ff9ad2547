"""Server-enforced limits through the gateway, each with its documented error code and close
code (docs/protocol.md "Errors and close codes"): idle, pause and session-length timeouts end
the session; oversized messages, oversized images and camera frames above the rate are refused
and the session goes on; a frame above the transport cap closes with 1009. Plus unit tests of
the header sniffing and the frame-rate bucket."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import cv2
import numpy as np
import pytest
import websockets

from core.config import LimitsConfig
from core.protocol import ProtocolError
from tests.support.realtime_client import recv_until
from tests.support.stack import Stack
from worker.limits import FrameRate, check_image, image_dimensions, message_too_large

LIMITS = {"max_session_s": 8, "idle_timeout_s": 3, "pause_timeout_s": 2, "max_message_bytes": 65536,
          "max_image_bytes": 20000, "max_image_pixels": 64 * 64, "max_frame_rate": 2}


def jpeg(w: int, h: int, noise: bool = False) -> bytes:
    rng = np.random.default_rng(1)
    img = rng.integers(0, 255, (h, w, 3), dtype=np.uint8) if noise else np.full((h, w, 3), 90, np.uint8)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return buf.tobytes()


def png(w: int, h: int) -> bytes:
    ok, buf = cv2.imencode(".png", np.zeros((h, w, 3), np.uint8))
    assert ok
    return buf.tobytes()


# ---------------------------------------------------------------- unit


def test_image_dimensions_from_headers():
    assert image_dimensions(jpeg(123, 45)) == (123, 45)
    assert image_dimensions(png(7, 300)) == (7, 300)
    assert image_dimensions(b"GIF89a....") is None and image_dimensions(b"\xff\xd8\xff") is None
    lim = LimitsConfig(max_image_bytes=10_000, max_image_pixels=100 * 100)
    check_image(jpeg(100, 100), lim, "image")
    with pytest.raises(ProtocolError, match="101x100 pixels") as exc:
        check_image(jpeg(101, 100), lim, "image")
    assert exc.value.code == "image_too_large"
    with pytest.raises(ProtocolError, match="bytes"):
        check_image(jpeg(90, 90, noise=True), lim, "image")


def test_frame_rate_bucket_and_error_throttle():
    t = [0.0]
    fr = FrameRate(2.0, clock=lambda: t[0])
    assert [fr.allow() for _ in range(3)] == [True, True, False]  # a burst of 2, then refused
    assert fr.should_report() and not fr.should_report()  # one error event per second at most
    t[0] += 0.5
    assert fr.allow() and not fr.allow()
    t[0] += 1.0
    assert fr.should_report() and fr.dropped == 2


def test_message_size_counts_utf8_bytes():
    assert not message_too_large("a" * 100, 100)
    assert message_too_large("a" * 101, 100)
    assert message_too_large("é" * 60, 100) and not message_too_large("é" * 50, 100)


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("limits_stack"), workers=1, limits=LIMITS,
              recording={"enabled": False}).start()
    yield s
    s.stop()


async def connect(stack):
    ws = await websockets.connect(f"ws://127.0.0.1:{stack.port}/v1/realtime?extensions=all", max_size=None)
    await recv_until(ws, "session.created")
    return ws


async def ended(ws, timeout: float = 15.0) -> tuple[dict | None, int, float]:
    """(last error event, close code, seconds until the close)."""
    t0 = time.monotonic()
    last_error = None
    try:
        while True:
            ev = json.loads(await asyncio.wait_for(ws.recv(), timeout))
            if ev["type"] == "error":
                last_error = ev["error"]
    except websockets.ConnectionClosed as closed:
        return last_error, closed.rcvd.code if closed.rcvd else 1006, time.monotonic() - t0
    raise AssertionError("not closed")


async def send(ws, **event) -> None:
    await ws.send(json.dumps(event))


async def test_idle_timeout_ends_with_4001(stack):
    ws = await connect(stack)
    err, code, after = await ended(ws)
    assert (err["code"], code) == ("idle_timeout", 4001) and 2.5 < after < 6


async def test_pause_timeout_ends_with_4002(stack):
    ws = await connect(stack)
    await send(ws, type="session.pause")
    assert (await recv_until(ws, "session.paused"))["pause_timeout_s"] == 2
    err, code, after = await ended(ws)
    assert (err["code"], code) == ("pause_timeout", 4002) and after < 5


async def test_max_session_length_ends_with_4003(stack):
    ws = await connect(stack)
    t0 = time.monotonic()

    async def keep_busy():
        while True:  # a client event a second: never idle
            await send(ws, type="input_audio_buffer.clear")
            await asyncio.sleep(1)

    busy = asyncio.create_task(keep_busy())
    try:
        err, code, _ = await ended(ws, timeout=20)
    finally:
        busy.cancel()
    assert (err["code"], code) == ("session_expired", 4003)
    assert 7.5 < time.monotonic() - t0 < 12


async def test_oversized_message_is_refused_and_the_session_goes_on(stack):
    ws = await connect(stack)
    big = "x" * 70_000  # above max_message_bytes (64 KiB), below the transport cap
    await send(ws, type="conversation.item.create",
               item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": big}]})
    err = (await recv_until(ws, "error"))["error"]
    assert err["code"] == "message_too_large" and "65536" in err["message"]
    await send(ws, type="conversation.item.create", event_id="evt_ok",
               item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]})
    await recv_until(ws, "conversation.item.added")
    # Far above the limit (over twice it): the WebSocket layer itself closes with 1009.
    await ws.send("y" * 300_000)
    _, code, _ = await ended(ws)
    assert code == 1009


async def test_images_over_the_size_or_pixel_limit_are_refused(stack):
    ws = await connect(stack)
    small = base64.b64encode(jpeg(32, 32)).decode()
    wide = base64.b64encode(jpeg(80, 80)).decode()  # 6400 pixels > 4096, a few hundred bytes
    heavy = base64.b64encode(jpeg(60, 60, noise=True) + b"\x00" * 20_000).decode()  # > 20000 bytes
    await send(ws, type="input_image_buffer.append", image=wide)
    err = (await recv_until(ws, "error"))["error"]
    assert err["code"] == "image_too_large" and "80x80" in err["message"] and err["param"] == "image"
    await asyncio.sleep(1.1)  # refill the frame bucket
    await send(ws, type="input_image_buffer.append", image=heavy)
    err = (await recv_until(ws, "error"))["error"]
    assert err["code"] == "image_too_large" and "bytes" in err["message"]
    await asyncio.sleep(1.1)
    await send(ws, type="conversation.item.create", item={"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": f"data:image/jpeg;base64,{wide}"}]})
    err = (await recv_until(ws, "error"))["error"]
    assert err["code"] == "image_too_large" and err["param"] == "item.content.0.image_url"
    await send(ws, type="input_image_buffer.append", image=small)
    assert (await recv_until(ws, "input_image_buffer.appended"))["frames_received"] == 1
    await ws.close()


async def test_camera_frames_above_the_rate_are_dropped(stack):
    ws = await connect(stack)
    frame = base64.b64encode(jpeg(32, 32)).decode()
    for _ in range(6):  # back to back: a burst of 2 passes, the rest are dropped
        await send(ws, type="input_image_buffer.append", image=frame)
    kinds, errors = [], []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            ev = json.loads(await asyncio.wait_for(ws.recv(), 0.3))
        except TimeoutError:
            break
        kinds.append(ev["type"])
        if ev["type"] == "error":
            errors.append(ev["error"])
    assert kinds.count("input_image_buffer.appended") == 2
    assert [e["code"] for e in errors] == ["frame_rate_exceeded"]  # one event, not one per frame
    assert "2 per second" in errors[0]["message"]
    await asyncio.sleep(1.0)
    await send(ws, type="input_image_buffer.append", image=frame)
    assert (await recv_until(ws, "input_image_buffer.appended"))["frames_received"] == 3
    await ws.close()
    # The worker counted every refusal.
    import httpx

    text = (await asyncio.to_thread(httpx.get, f"{stack.worker_url()}/metrics", timeout=5,
                                    headers=stack.worker_headers)).text
    assert 'omniduplex_worker_limit_events_total{code="frame_rate_exceeded"} 4.0' in text
