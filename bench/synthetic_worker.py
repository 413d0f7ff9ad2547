"""A synthetic worker: a TEST DOUBLE used only by the relay-throughput benchmark.

It answers ``/health`` like a ready worker and, on ``/ws/realtime``, sends ``session.created``
and then audio deltas as fast as the socket takes them (100 ms of 24 kHz PCM16 each, the size
the real worker sends), so the gateway's relay, not a model, is the bottleneck. Never used on a
product path. ``python -m bench.synthetic_worker --port P --events N``.
"""

from __future__ import annotations

import argparse
import base64
import json

import uvicorn
from fastapi import FastAPI, WebSocket

DELTA = base64.b64encode(bytes(4800)).decode()  # 100 ms of 24 kHz PCM16 silence


def create_app(events: int) -> FastAPI:
    app = FastAPI(title="synthetic worker (benchmark test double)")

    @app.get("/health")
    async def health() -> dict:
        return {"worker_id": "synthetic", "state": "IDLE", "model_loaded": True, "slots": 1, "active_sessions": 0,
                "capabilities": ["audio_input", "audio_output", "duplex", "text_output"], "backend": "synthetic"}

    @app.websocket("/ws/realtime")
    async def realtime(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(json.dumps({"type": "session.created", "session": {"id": "synthetic"}}))
        frame = json.dumps({"type": "response.output_audio.delta", "response_id": "resp_x", "item_id": "item_x",
                            "output_index": 0, "content_index": 0, "delta": DELTA}, separators=(",", ":"))
        for _ in range(events):
            await ws.send_text(frame)
        await ws.send_text(json.dumps({"type": "response.done", "response": {"status": "completed"}}))
        await ws.close(1000)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.synthetic_worker")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--events", type=int, default=20000)
    args = parser.parse_args()
    uvicorn.run(create_app(args.events), host="127.0.0.1", port=args.port, log_level="warning",
                ws="websockets-sansio", ws_per_message_deflate=False)


if __name__ == "__main__":
    main()
