"""Random realtime event sequences, valid and not, through the gateway to a live worker, and
direct to the worker; path traversal on routes taking a name or id (docs/reliability.md).

Each example: no crash, the session still answers a ``conversation.item.retrieve`` of a bogus
id with an ``error``, then every slot is idle. ``OMNIDUPLEX_LONG=1`` runs many more examples.
"""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.realtime_client import recv_until
from tests.support.reliability import LONG, wait_idle, ws_url
from tests.support.stack import Stack


EXAMPLES = 500 if LONG else 40

b64 = st.binary(max_size=2000).map(lambda b: base64.b64encode(b).decode())
junk = st.one_of(st.none(), st.integers(), st.text(max_size=20), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
event = st.one_of(
    st.builds(lambda a: {"type": "input_audio_buffer.append", "audio": a}, st.one_of(b64, junk, st.just("%%%"))),
    st.sampled_from([{"type": "input_audio_buffer.commit"}, {"type": "input_audio_buffer.clear"},
                     {"type": "response.cancel"}, {"type": "output_audio_buffer.clear"},
                     {"type": "session.pause"}, {"type": "session.resume"}, {"type": "response.create"},
                     {"type": "nope"}, {"type": None}, {}]),
    st.builds(lambda s: {"type": "session.update", "session": s},
              st.one_of(junk, st.fixed_dictionaries({"instructions": st.one_of(st.text(max_size=50), junk)}),
                        st.just({"audio": {"input": {"turn_detection": None}}}))),
    st.builds(lambda t: {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                                       "content": [{"type": "input_text", "text": t}]}},
              st.one_of(st.text(max_size=40), junk)),
    st.builds(lambda i, ms: {"type": "conversation.item.truncate", "item_id": i, "content_index": 0,
                             "audio_end_ms": ms}, st.one_of(st.text(max_size=10), junk),
              st.one_of(st.integers(-10, 10**9), junk)),
    st.builds(lambda i: {"type": "conversation.item.delete", "item_id": i}, junk),
    st.text(max_size=30),  # not JSON at all
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("fuzz"), workers=1,
              auth={"per_ip": {"sessions_per_minute": 100000, "concurrent": 64}}).start()
    yield s
    s.stop()


async def run_sequence(url: str, events: list, headers: dict[str, str] | None = None) -> None:
    async with websockets.connect(url, max_size=None, additional_headers=headers) as ws:
        await recv_until(ws, "session.created")
        for ev in events:
            await ws.send(ev if isinstance(ev, str) else json.dumps(ev))
        await ws.send(json.dumps({"type": "session.resume"}))
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_fuzz_bogus"}))
        while True:  # a reply may be running; the bogus retrieve still gets its error
            ev = await recv_until(ws, "error", timeout=60)
            if ev["error"]["code"] == "item_not_found":
                break


def fuzz(target: str):
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(events=st.lists(event, max_size=12))
    def check(stack, events):
        url = ws_url(stack) if target == "gateway" else stack.worker_url().replace("http", "ws") + "/ws/realtime?record=false"

        async def go() -> None:
            await run_sequence(url, events, None if target == "gateway" else stack.worker_headers)
            await wait_idle(stack, 1.0)

        asyncio.run(go())

    return check


test_fuzz_through_gateway = fuzz("gateway")
test_fuzz_direct_to_worker = fuzz("worker")


async def test_huge_frames_odd_pcm_and_truncate_beyond_audio(stack):
    async with websockets.connect(ws_url(stack), max_size=None) as ws:
        await recv_until(ws, "session.created")
        await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
        await recv_until(ws, "session.updated")
        # 5 MB: over max_message_bytes (4 MiB), under the transport cap: dropped with an error
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (5 * 2**20)}))
        assert (await recv_until(ws, "error"))["error"]["code"] == "message_too_large"
        # odd PCM length
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()}))
        await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        # truncate beyond the audio of an item
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "Say hi."}]}}))
        await ws.send(json.dumps({"type": "response.create"}))
        done = await recv_until(ws, "response.done", timeout=60)
        await ws.send(json.dumps({"type": "conversation.item.truncate", "item_id": done["response"]["output"][0]["id"],
                                  "content_index": 0, "audio_end_ms": 10**8}))
        assert (await recv_until(ws, "error"))["error"]["code"] == "invalid_audio"
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "bogus"}))
        assert (await recv_until(ws, "error"))["error"]["code"] == "item_not_found"
    await wait_idle(stack, 1.0)
    # 10 MB: above the transport cap (2 x 4 MiB + 64 KiB): closed with 1009, nothing leaks
    async with websockets.connect(ws_url(stack), max_size=None) as ws:
        await recv_until(ws, "session.created")
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.send("x" * (10 * 2**20))
            while True:
                await asyncio.wait_for(ws.recv(), 10)
        assert closed.value.rcvd is None or closed.value.rcvd.code in (1009, 1011)
    await wait_idle(stack, 1.0)


TRAVERSALS = ["..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2fconfig.json", "..", "....//....//etc/passwd",
              "%2Fetc%2Fpasswd", "sess_x%00.json", "..%5C..%5Cconfig.json"]
ROUTES = ["/s/{x}", "/api/sessions/{x}", "/api/sessions/{x}/replay.wav", "/api/sessions/{x}/download.zip",
          "/api/sessions/{x}/files/images/{x}", "/api/shares/{x}", "/static/{x}", "/{x}.html",
          "/api/admin/workers/{x}", "/api/admin/queue/{x}", "/api/admin/voices/{x}"]


async def test_path_traversal_never_serves_a_file_outside(stack):
    secret = (stack.data_dir / "admin_token").read_text().strip()
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        for route in ROUTES:
            for x in TRAVERSALS:
                for token in ("", f"?token={secret}"):
                    r = await http.get(route.replace("{x}", x) + token)
                    if x == "..":  # the client resolves a bare ".." itself (e.g. /s/.. is /)
                        assert r.status_code in (200, 307, 401, 404, 405), (route, x, r.status_code)
                    else:
                        assert r.status_code in (400, 401, 403, 404, 405, 422), (route, x, r.status_code)
                    assert b"root:" not in r.content and secret.encode() not in r.content, (route, x)
