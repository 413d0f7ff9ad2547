"""The cascade's LLM stage on an OpenAI-compatible server (``llm_url``): Ollama, vLLM, llama.cpp's
server, LM Studio, ``transformers serve``, a hosted API.

Only the text step moves: VAD, Whisper and Piper stay local, so the server needs no audio
support. Each reply is one streamed ``POST /chat/completions`` with the whole history in
OpenAI's own message format (function calls as ``tool_calls`` and ``tool`` messages, which any
tool-capable server reads natively); text deltas go to the speech chunker as they arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from core.conversation import ReplyJob, ReplyStats
from core.cascade.chat_completions import (
    ChatServer,
    ToolCallStream,
    append_message,
    call_message,
    tool_fields,
    usage_into,
)

log = logging.getLogger(__name__)


class RemoteLlm:
    def __init__(self, url: str, model: str | None, *, api_key: str | None, headers: dict[str, str],
                 extra_body: dict[str, Any], connect_timeout_s: float, read_timeout_s: float) -> None:
        self.server = ChatServer(url, model, api_key=api_key, headers=headers, connect_timeout_s=connect_timeout_s,
                                 read_timeout_s=read_timeout_s, label="LLM server")
        self.extra_body = dict(extra_body)

    @property
    def model(self) -> str | None:
        return self.server.model

    def wait_until_up(self, wait_s: float, progress: Callable[[str], None] | None = None) -> None:
        """Block until the server answers; without ``llm_model``, take the first model it lists."""
        self.server.wait_until_up(wait_s, progress)

    def messages(self, job: ReplyJob, frame_note: Callable[[str], str]) -> list[dict[str, Any]]:
        """System, then the history as chat messages; the latest camera frame's description
        goes with the last user turn (the server gets text, as the embedded model does)."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": job.system}] if job.system else []
        for item in job.items:
            message = call_message(item) if item.type != "message" else (
                {"role": item.role, "content": item.text} if item.text else None)
            if message is not None:
                append_message(messages, message)
        if job.frames and messages and messages[-1]["role"] == "user":
            messages[-1]["content"] = frame_note(job.frames[-1]) + "\n" + messages[-1]["content"]
        return messages

    def request_body(self, job: ReplyJob, frame_note: Callable[[str], str]) -> dict[str, Any]:
        cfg = job.config
        body: dict[str, Any] = {
            "model": self.server.model, "messages": self.messages(job, frame_note), "stream": True,
            "max_tokens": cfg.max_output_tokens, "temperature": cfg.temperature,
            "stream_options": {"include_usage": True},
        }
        body.update(tool_fields(job))
        body.update(self.extra_body)
        return body

    async def reply(self, job: ReplyJob, on_text: Callable[[str], None],
                    frame_note: Callable[[str], str]) -> ReplyStats:
        """Stream one reply: text to ``on_text``, function calls to the job."""
        stats = ReplyStats()
        calls = ToolCallStream(job)
        pieces = 0
        async for chunk in self.server.stream(self.request_body(job, frame_note)):
            usage_into(chunk, stats)
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                content = delta.get("content")
                if isinstance(content, str) and content:
                    pieces += 1
                    on_text(content)
                calls.feed(delta)
                if choice.get("finish_reason") == "length":
                    stats.stop_reason = "length"
        calls.end()
        if not stats.output_tokens:
            stats.output_tokens = pieces  # servers that report no usage: one piece is about a token
        return stats
