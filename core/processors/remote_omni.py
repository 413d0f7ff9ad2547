"""A worker that fronts a remote omni engine (vLLM-Omni, SGLang-Omni, or anything speaking
OpenAI's chat completions with audio output), so our gateway, pages, queue and recordings
serve it unchanged.

Turn detection, barge-in, history and truncation live in the conversation core (``core/conversation/``);
each reply is one streamed ``POST {base_url}/chat/completions`` with the whole history. Both
documented streaming shapes are read:

* vLLM-Omni: ``"modality": "text" | "audio"`` on each chunk; audio chunks carry a base64 audio
  file (WAV by default) in ``choices[0].delta.content``.
* OpenAI / SGLang-Omni: ``choices[0].delta.audio.data`` (base64 audio; raw PCM16 when
  ``audio.format`` is ``pcm16``) and ``delta.audio.transcript`` or ``delta.content`` for text.

Audio payloads that start with a RIFF header are read as WAV at their own rate, whatever was
asked for. A cancel closes the HTTP stream, which both engines take as an abort.
"""

from __future__ import annotations

import base64
import io
import logging
import time
import wave
from typing import Any, Literal

import httpx
import numpy as np
from pydantic import Field, field_validator

from core.conversation import Item, ReplyJob, ReplyStats
from core.conversation.audio_input import VAD_RATE
from core.media import wav_bytes
from core.processors.base import Capability, ModelCapabilities, ModelThreads, ProgressCallback
from core.cascade.chat_completions import (
    ChatServer,
    ChatServerError,
    ToolCallStream,
    append_message,
    call_message,
    check_base_url,
    error_text,
    tool_fields,
    until_cancelled,
    usage_into,
)
from core.processors.omni_base import (
    OmniBackendBase,
    OmniOptions,
    image_to_jpeg,
)

log = logging.getLogger(__name__)


class RemoteOmniOptions(OmniOptions):
    """``backend.options`` for ``remote_omni``. ``base_url`` and ``model`` are required."""

    base_url: str = Field(description="the engine's OpenAI base URL, e.g. http://gpu-host:8091/v1")
    model: str = Field(min_length=1, description="model name the engine serves")
    api_key: str | None = None
    audio_format: Literal["pcm16", "wav"] = Field("pcm16", description="audio.format asked for (vLLM-Omni: wav)")
    audio_sample_rate: int = Field(24000, ge=8000, le=48000, description="rate of raw pcm16 audio from the engine")
    voices: list[str] = Field(default_factory=list, description="voices offered; empty: any name is passed on")
    default_voice: str | None = Field(None, description="voice when the session names none")
    send_speaker: bool = Field(False, description="also send top-level 'speaker' (vLLM-Omni's field)")
    audio_part: Literal["input_audio", "audio_url"] = Field("input_audio", description="how user audio is sent")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0, description="longest silence between two streamed chunks")
    wait_for_server_s: float = Field(600.0, ge=0, description="load() waits this long for GET /models")
    transcribe_input: bool = Field(False, description="ask the engine for transcripts of user audio "
                                   "(one extra text-only request per turn)")

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_base_url(value, "http://gpu-host:8091/v1")


RemoteEngineError = ChatServerError  # the engine answered with an error, or did not answer


class RemoteOmniBackend(OmniBackendBase):
    name = "remote_omni"
    # Tools go to the engine as chat-completions ``tools``; its streamed ``delta.tool_calls``
    # become the reply's function calls (the engine must be started with tool parsing on).
    capabilities = ModelCapabilities.of(*Capability, supports_tools=True)

    def __init__(self, options: RemoteOmniOptions, threads: ModelThreads | None = None) -> None:
        super().__init__(options, threads)
        self.options: RemoteOmniOptions = options
        self.voices = tuple(options.voices)
        self.default_voice = options.default_voice or (self.voices[0] if self.voices else None)
        self.server = ChatServer(options.base_url, options.model, api_key=options.api_key, headers=options.headers,
                                 connect_timeout_s=options.connect_timeout_s, read_timeout_s=options.read_timeout_s,
                                 label="engine")

    def health_detail(self) -> dict[str, Any]:
        return {"upstream": self.server.health()}

    def load_model(self, progress: ProgressCallback | None) -> None:
        """Wait for the engine to answer ``GET /models`` (it may still be loading its weights)."""
        opts = self.options
        t0 = time.monotonic()
        self.server.wait_until_up(opts.wait_for_server_s, lambda detail: self.report(progress, "engine", 0.5, detail))
        self.load_seconds["engine"] = time.monotonic() - t0

    # ------------------------------------------------------------------ requests

    def request_body(self, job: ReplyJob) -> dict[str, Any]:
        opts = self.options
        messages: list[dict[str, Any]] = []
        if job.system:
            messages.append({"role": "system", "content": job.system})
        for item in job.items:
            message = self._message(item)
            if message is None:
                continue
            append_message(messages, message)
        if job.frames:
            if not messages or messages[-1]["role"] != "user":
                messages.append({"role": "user", "content": []})
            last = messages[-1]
            if isinstance(last["content"], str):
                last["content"] = [{"type": "text", "text": last["content"]}]
            for frame in job.frames:
                last["content"].append(_image_part(image_to_jpeg(frame)))
        body: dict[str, Any] = {
            "model": opts.model, "messages": messages, "stream": True,
            "modalities": ["text", "audio"] if job.output_audio else ["text"],
            "max_tokens": job.config.max_output_tokens, "temperature": job.config.temperature,
            "stream_options": {"include_usage": True},
        }
        body.update(tool_fields(job))
        if job.output_audio:
            voice = job.voice or self.default_voice or "default"
            body["audio"] = {"voice": voice, "format": opts.audio_format}
            if opts.send_speaker:
                body["speaker"] = voice
        body.update(opts.extra_body)
        return body

    def _message(self, item: Item) -> dict[str, Any] | None:
        if item.type != "message":
            return call_message(item)
        if item.role != "user":
            return {"role": item.role, "content": item.text} if item.text else None
        parts: list[dict[str, Any]] = []
        if item.audio is not None:
            data = base64.b64encode(wav_bytes(_pcm16(item.audio), VAD_RATE)).decode()
            if self.options.audio_part == "audio_url":
                parts.append({"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{data}"}})
            else:
                parts.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
        for raw in item.image_bytes:
            parts.append(_image_part(raw))
        if item.text_besides_audio:
            parts.append({"type": "text", "text": item.text_besides_audio})
        return {"role": "user", "content": parts} if parts else None

    async def generate_reply(self, job: ReplyJob) -> ReplyStats:
        return await until_cancelled(job, self._stream(job))

    async def _stream(self, job: ReplyJob) -> ReplyStats:
        stats = ReplyStats()
        calls = ToolCallStream(job)
        async for chunk in self.server.stream(self.request_body(job)):
            self._chunk(job, chunk, stats, calls)
        calls.end()
        job.end_segment()
        return stats

    def _chunk(self, job: ReplyJob, chunk: dict[str, Any], stats: ReplyStats,
               calls: ToolCallStream | None = None) -> None:
        usage_into(chunk, stats)
        modality = chunk.get("modality")
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            audio = delta.get("audio") or {}
            content = delta.get("content")
            if isinstance(audio, dict):
                if audio.get("data"):
                    self._audio(job, audio["data"])
                if audio.get("transcript"):
                    job.text(audio["transcript"])
            if calls is not None:
                calls.feed(delta)
            if isinstance(content, str) and content:
                if modality == "audio":
                    self._audio(job, content)
                else:
                    job.text(content)
            if choice.get("finish_reason") == "length":
                stats.stop_reason = "length"

    def _audio(self, job: ReplyJob, data_b64: str) -> None:
        samples, rate = decode_audio_payload(base64.b64decode(data_b64), self.options.audio_format,
                                             self.options.audio_sample_rate)
        if samples.size:
            job.audio(samples, rate)

    def transcribe_turn(self, audio: np.ndarray) -> str | None:
        """A text-only request asking the engine to transcribe (only with ``transcribe_input``)."""
        if not self.options.transcribe_input:
            return None
        item = Item("user", "", audio=audio)
        message = self._message(item)
        message["content"].append({"type": "text", "text": "Transcribe the audio into text. Reply with the "
                                                            "transcript only."})
        body = {"model": self.options.model, "messages": [message], "modalities": ["text"], "max_tokens": 200,
                "temperature": 0.0, "stream": False, **self.options.extra_body}
        with httpx.Client(timeout=self.server.timeout, headers=self.server.headers, trust_env=False) as client:
            r = client.post(self.server.url, json=body)
        if r.status_code != 200:
            raise RemoteEngineError(f"engine answered HTTP {r.status_code}: {error_text(r.content)}")
        choices = r.json().get("choices") or [{}]
        return (choices[0].get("message") or {}).get("content") or ""


# --------------------------------------------------------------------------- helpers


def _pcm16(samples: np.ndarray) -> bytes:
    from core.audio import float_to_pcm16

    return float_to_pcm16(samples)


def _image_part(raw: bytes) -> dict[str, Any]:
    mime = "image/png" if raw[:8] == b"\x89PNG\r\n\x1a\n" else "image/jpeg"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{base64.b64encode(raw).decode()}"}}


def decode_audio_payload(raw: bytes, fmt: str, pcm_rate: int) -> tuple[np.ndarray, int]:
    """One streamed audio payload -> (float32 mono samples, rate). WAV (by its header) at its
    own rate; raw PCM16 at ``pcm_rate``; anything else through PyAV."""
    if raw[:4] == b"RIFF":
        with wave.open(io.BytesIO(raw)) as w:
            rate, width, channels = w.getframerate(), w.getsampwidth(), w.getnchannels()
            frames = w.readframes(w.getnframes())
        if width == 2:
            samples = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768
        elif width == 4:  # 32-bit PCM (float WAVs are rejected by the wave module)
            samples = np.frombuffer(frames, dtype="<i4").astype(np.float32) / 2**31
        else:
            raise RemoteEngineError(f"unsupported WAV sample width {width * 8} bits")
        if channels > 1:
            samples = samples.reshape(-1, channels).mean(axis=1)
        return samples, rate
    if fmt == "pcm16":
        usable = len(raw) - len(raw) % 2
        return np.frombuffer(raw[:usable], dtype="<i2").astype(np.float32) / 32768, pcm_rate
    from core.media import decode_audio

    return decode_audio(raw, 24000), 24000
