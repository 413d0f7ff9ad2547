"""A spike, not a product path: what a call's media would cost with RTP and SRTP out of Python
(issue 71). GStreamer's ``webrtcbin`` (native ICE via libnice, DTLS, SRTP, Opus) answers an aiortc
peer's offer as the gateway's ``Call`` does; per call the microphone's Opus is depayloaded, decoded
to 24 kHz mono and handed to Python by an ``appsink`` (a callback per buffer, as a relay to the
worker would need), and a reply is pushed as PCM 100 ms at a time in real time into an ``appsrc``
-> ``opusenc`` (20 ms, 32 kbit/s, complexity 5) -> ``rtpopuspay``. No data channel, no relay to a
worker, no play-head bookkeeping: the media alone, against ``bench calls --parts load``'s gateway.

Needs Debian's GStreamer and its Python bindings (not in the project's install):
``apt-get install gstreamer1.0-plugins-bad gstreamer1.0-nice gir1.2-gst-plugins-bad-1.0 python3-gst-1.0``.
The answerer runs under Debian's ``/usr/bin/python3`` (it has ``gi``), the peers under the venv:

    /usr/bin/python3 devtools/native_call_spike.py serve 8911 &
    .venv/bin/python devtools/native_call_spike.py peers 20 20 $(pgrep -f "native_call_spike.py serve") 40

``peers K HOLD PID PTIME``: K aiortc peers (the bench's ``PacketMic``, PTIME ms packets), the
answerer's CPU over HOLD seconds. Start a fresh answerer per level (it keeps its calls).
"""

from __future__ import annotations


def serve(port: int) -> None:
    import http.server
    import math
    import re
    import struct
    import threading
    import time

    import gi
    gi.require_version("Gst", "1.0")
    gi.require_version("GstWebRTC", "1.0")
    gi.require_version("GstSdp", "1.0")
    from gi.repository import GLib, Gst, GstSdp, GstWebRTC
    Gst.init(None)

    rate = 24000
    tone = b"".join(struct.pack("<h", int(6000 * math.sin(2 * math.pi * 220 * i / rate))) for i in range(rate * 2))
    chunk = rate // 10 * 2
    calls: list = []
    got = {"bytes": 0}

    class Answerer:
        def __init__(self, offer: str) -> None:
            pt = re.search(r"a=rtpmap:(\d+) opus/48000", offer).group(1)
            self.done = threading.Event()
            self.pipe = Gst.parse_launch(
                "webrtcbin name=w bundle-policy=max-bundle "
                f"appsrc name=src is-live=true format=time do-timestamp=true "
                f"caps=audio/x-raw,format=S16LE,rate={rate},channels=1,layout=interleaved "
                f"! opusenc bitrate=32000 frame-size=20 complexity=5 audio-type=voice ! rtpopuspay pt={pt} "
                f"! application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,payload={pt} ! w.")
            self.w = self.pipe.get_by_name("w")
            self.src = self.pipe.get_by_name("src")
            self.cands: list = []
            self.n = 0
            self.w.connect("pad-added", self._pad)
            self.w.connect("on-ice-candidate", lambda _w, m, c: self.cands.append((m, c)))
            self.w.connect("notify::ice-gathering-state", self._gathering)
            self.pipe.set_state(Gst.State.PLAYING)
            _, sdp = GstSdp.SDPMessage.new_from_text(offer)
            desc = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.OFFER, sdp)
            self.w.emit("set-remote-description", desc, Gst.Promise.new_with_change_func(self._remote_set, None))

        def _remote_set(self, _promise, _data) -> None:
            self.w.emit("create-answer", None, Gst.Promise.new_with_change_func(self._answered, None))

        def _answered(self, promise, _data) -> None:
            reply = promise.get_reply()  # kept: the answer lives in this (copied) structure
            self.w.emit("set-local-description", reply.get_value("answer"), Gst.Promise.new())

        def _gathering(self, w, _spec) -> None:
            if w.get_property("ice-gathering-state") == GstWebRTC.WebRTCICEGatheringState.COMPLETE:
                self.done.set()

        def answer(self) -> str:
            self.done.wait(10)
            text = self.w.get_property("local-description").sdp.as_text()
            if "a=candidate" in text:
                return text
            out = []
            for line in text.split("\r\n"):
                out.append(line)
                if line.startswith("a=mid:"):
                    out += ["a=" + c for m, c in self.cands if c and m == 0]
            return "\r\n".join(out)

        def _pad(self, _w, pad) -> None:
            if pad.direction != Gst.PadDirection.SRC:
                return
            mic = Gst.parse_bin_from_description(
                f"rtpopusdepay ! opusdec ! audioconvert ! audioresample ! audio/x-raw,format=S16LE,rate={rate},channels=1 "
                "! appsink name=sink emit-signals=true sync=false", True)
            self.pipe.add(mic)
            mic.get_by_name("sink").connect("new-sample", self._sample)
            mic.sync_state_with_parent()
            pad.link(mic.get_static_pad("sink"))

        def _sample(self, sink):
            got["bytes"] += sink.emit("pull-sample").get_buffer().get_size()
            return Gst.FlowReturn.OK

        def push(self) -> None:
            start = (self.n * chunk) % (len(tone) - chunk)
            self.n += 1
            self.src.emit("push-buffer", Gst.Buffer.new_wrapped(tone[start:start + chunk]))

    def pusher() -> None:
        t0, k = time.monotonic(), 0
        while True:
            k += 1
            time.sleep(max(0.0, t0 + k * 0.1 - time.monotonic()))
            for call in list(calls):
                call.push()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            call = Answerer(self.rfile.read(int(self.headers["content-length"])).decode())
            body = call.answer().encode()
            calls.append(call)
            self.send_response(201)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            body = str(got["bytes"]).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    threading.Thread(target=pusher, daemon=True).start()
    threading.Thread(target=GLib.MainLoop().run, daemon=True).start()
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


async def peers(k: int, hold: float, pid: int, ptime: int, port: int = 8911) -> None:
    import asyncio
    import base64
    import time

    import httpx
    import psutil
    from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

    from bench.calls.client import make_tracks, opus_packets
    from bench.synthetic_worker import voiced_deltas

    _, packet_mic = make_tracks()
    pcm = b"".join(base64.b64decode(d) for d in voiced_deltas(2))
    packets = {ms: opus_packets(pcm, ms=ms) for ms in (20, 40)}
    proc = psutil.Process(pid)
    pcs, frames = [], [0]

    async def reader(track) -> None:
        while True:
            try:
                await track.recv()
            except Exception:  # noqa: BLE001 - the track ended
                return
            frames[0] += 1

    for _ in range(k):
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        mic = packet_mic(packets)
        mic.follow_ptime(ptime)
        pc.addTransceiver(mic, direction="sendrecv")
        pc.on("track", lambda track: asyncio.ensure_future(reader(track)))
        await pc.setLocalDescription(await pc.createOffer())
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(f"http://127.0.0.1:{port}/offer", content=pc.localDescription.sdp)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=r.text, type="answer"))
        pcs.append(pc)
    await asyncio.sleep(5)
    connected = sum(pc.connectionState == "connected" for pc in pcs)
    c0, b0, t0 = sum(proc.cpu_times()[:2]), int(httpx.get(f"http://127.0.0.1:{port}/").text), time.monotonic()
    f0 = frames[0]
    await asyncio.sleep(hold)
    c1, b1, t1 = sum(proc.cpu_times()[:2]), int(httpx.get(f"http://127.0.0.1:{port}/").text), time.monotonic()
    print(f"{k} calls ({connected} connected): answerer {100 * (c1 - c0) / (t1 - t0):.2f} % of a core; "
          f"microphone received {(b1 - b0) / 2 / 24000 / (t1 - t0):.2f} s/s; "
          f"reply frames decoded {(frames[0] - f0) / (t1 - t0):.0f}/s")
    for pc in pcs:
        await pc.close()


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        import asyncio

        asyncio.run(peers(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
