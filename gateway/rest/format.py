"""OpenAI response shapes built from the worker's neutral results (JSON only, no media work).

Streamed chat chunks carry text in ``delta.content`` (text-only replies) or in
``delta.audio.transcript`` (audio replies, as OpenAI does), audio in ``delta.audio.data``
(base64 PCM16 24 kHz); each content chunk also says what it carries in an extension field
``modality`` (``"text"`` or ``"audio"``), which standard clients ignore. Function calls stream
as ``delta.tool_calls``: a first piece with the call's index, id, type and name (arguments
``""``), then pieces of its arguments; the final chunk's ``finish_reason`` is ``"tool_calls"``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

AUDIO_TTL_S = 3600  # ``expires_at`` of audio replies: the server keeps none, so it is nominal


@dataclass
class ChatContext:
    """Ids and options shared by every chunk of one completion."""

    id: str
    model: str
    audio: bool
    created: int = field(default_factory=lambda: int(time.time()))
    audio_id: str = ""

    def chunk(self, delta: dict[str, Any], finish: str | None = None, modality: str | None = None,
              usage: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if modality:
            out["modality"] = modality
        if usage is not None:
            out["usage"] = usage
        return out

    def role_chunk(self) -> dict[str, Any]:
        delta: dict[str, Any] = {"role": "assistant", "content": None if self.audio else ""}
        if self.audio:
            delta["audio"] = {"id": self.audio_id}
        return self.chunk(delta)

    def text_chunk(self, text: str) -> dict[str, Any]:
        if self.audio:
            return self.chunk({"audio": {"id": self.audio_id, "transcript": text}}, modality="text")
        return self.chunk({"content": text}, modality="text")

    def audio_chunk(self, data_b64: str) -> dict[str, Any]:
        return self.chunk({"audio": {"id": self.audio_id, "data": data_b64}}, modality="audio")

    def call_chunk(self, index: int, call_id: str, name: str) -> dict[str, Any]:
        return self.chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]})

    def call_arguments_chunk(self, index: int, delta: str) -> dict[str, Any]:
        return self.chunk({"tool_calls": [{"index": index, "function": {"arguments": delta}}]})

    def final_chunk(self, done: dict[str, Any]) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        if self.audio:
            delta["audio"] = {"id": self.audio_id, "expires_at": self.created + AUDIO_TTL_S}
        return self.chunk(delta, finish=finish_reason(done), usage=usage(done))

    def usage_chunk(self, done: dict[str, Any]) -> dict[str, Any]:
        out = self.chunk({})
        out["choices"] = []
        out["usage"] = usage(done)
        return out

    def completion(self, text: str, done: dict[str, Any], audio_b64: str | None) -> dict[str, Any]:
        calls = done.get("calls") or []
        content = None if self.audio or (calls and not text) else text
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls:
            message["tool_calls"] = [{"id": c["call_id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
        if self.audio and not (calls and not text):  # a bare function call has no audio
            message["audio"] = {"id": self.audio_id, "data": audio_b64 or "", "transcript": text,
                                "expires_at": self.created + AUDIO_TTL_S}
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(done)}],
            "usage": usage(done),
        }


def finish_reason(done: dict[str, Any]) -> str:
    if done.get("calls"):
        return "tool_calls"
    return "length" if done.get("reason") == "max_output_tokens" else "stop"


def usage(done: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = int(done.get("prompt_tokens", 0)), int(done.get("output_tokens", 0))
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if done.get("audio_ms"):
        out["output_audio_seconds"] = round(float(done["audio_ms"]) / 1000, 3)
    return out


def sse(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


# --------------------------------------------------------------------------- transcriptions


def transcription_body(result: dict[str, Any], fmt: str) -> tuple[str | dict[str, Any], str]:
    """(body, media type) for ``response_format``; dict bodies are JSON."""
    text = result["text"]
    seconds = float(result.get("duration", 0.0))
    usage_ = {"type": "duration", "seconds": math.ceil(seconds)}
    if fmt == "json":
        return {"text": text, "usage": usage_}, "application/json"
    if fmt == "text":
        return text + "\n", "text/plain; charset=utf-8"
    segments = result.get("segments", [])
    if fmt == "verbose_json":
        return {
            "task": "transcribe", "language": result.get("language", "english"), "duration": round(seconds, 3),
            "text": text,
            "segments": [{**s, "seek": int(s["start"] // 30) * 3000} for s in segments],
            "usage": usage_,
        }, "application/json"
    if fmt == "srt":
        blocks = [f"{i}\n{_stamp(s['start'], ',')} --> {_stamp(s['end'], ',')}\n{s['text'].strip()}\n"
                  for i, s in enumerate(segments, start=1)]
        return "\n".join(blocks), "text/plain; charset=utf-8"
    blocks = [f"{_stamp(s['start'], '.')} --> {_stamp(s['end'], '.')}\n{s['text'].strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(blocks), "text/vtt; charset=utf-8"


def _stamp(seconds: float, sep: str) -> str:
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"
