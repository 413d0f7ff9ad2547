"""What the model backends share (Qwen-Omni, MiniCPM-o, a remote engine): one ``Conversation``
that keeps a multimodal history, runs turn detection, and turns a model's text and waveform
output into protocol events.

A backend only supplies ``run_model(job)``: given the history, it streams text deltas and
speech (float samples at any rate, grouped in *segments*, each the audio of one known piece
of text). Everything else lives here, once: Silero VAD turn detection (the cascade's
``StreamingVad``), barge-in, 24 kHz PCM16 chunking, exact cancel/truncate accounting, and
``ResponseDone`` bookkeeping. Model work runs in the backend's threads; the loop only routes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.audio import OUTPUT_RATE, StreamResampler, float_to_pcm16, pcm16_to_float, resample
from core.errors import (
    BackendNotLoadedError,
    InvalidAudioError,
    InvalidImageError,
    InvalidInputError,
    InvalidTextError,
    NoActiveResponseError,
    ResponseActiveError,
)
from core.processors.base import (
    AudioChunk,
    Backend,
    CancelResult,
    Conversation,
    ConversationConfig,
    ConversationError,
    ConversationEvent,
    HistoryMessage,
    InputCommitted,
    InputTranscript,
    LoadProgress,
    ProgressCallback,
    ResponseDone,
    ResponseStarted,
    SpeechStarted,
    SpeechStopped,
    TextDelta,
    new_id,
)

log = logging.getLogger(__name__)

VAD_RATE = 16000  # every omni model here takes 16 kHz speech
TAIL_SAMPLES = VAD_RATE * 3 // 10
MAX_TEXT_CHARS = 20_000
MAX_BUFFER_SECONDS = 300
MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGE_PIXELS = 40_000_000


class OmniOptions(BaseModel):
    """Options every omni backend takes (``backend.options`` in config.json)."""

    model_config = ConfigDict(extra="forbid")

    data_dir: str = "data"  # injected by AppConfig.backend_options(); unused by most backends
    instructions: str | None = Field(None, description="system prompt when the session sets none")
    audio_chunk_ms: int = Field(100, ge=20, le=1000)
    max_image_side: int = Field(1024, ge=28, le=4096, description="images are downscaled to this")
    max_frames: int = Field(2, ge=1, le=16, description="latest camera frames given to each reply")
    transcribe_input: bool = Field(True, description="ask the model for a transcript of user audio")
    warm_up: bool = True


# --------------------------------------------------------------------------- history & jobs


@dataclass(slots=True)
class OmniItem:
    """One history entry: text, or user speech (16 kHz float32), or images, as the model sees them."""

    role: Literal["system", "user", "assistant"]
    text: str = ""
    audio: np.ndarray | None = None
    images: list[Any] = field(default_factory=list)  # PIL images (RGB)
    image_bytes: list[bytes] = field(default_factory=list)  # the originals (remote engines get these)
    item_id: str = field(default_factory=lambda: new_id("item"))


@dataclass(slots=True)
class Segment:
    """One spoken piece of a reply: its text, how much audio was made and how much went out."""

    text: str
    total_samples: int = 0
    emitted_samples: int = 0


@dataclass(slots=True)
class GenerationStats:
    output_tokens: int = 0
    prompt_tokens: int = 0
    stop_reason: Literal["stop", "length", "cancelled"] = "stop"


class GenerationJob:
    """What a backend's ``run_model`` gets: the prompt and thread-safe ways to emit output.

    ``text``/``audio`` may be called from any thread; events reach the client in call order.
    Audio goes in per segment: ``begin_segment(text)``, ``audio(samples, rate)`` any number of
    times, ``end_segment()``. A segment's text is what truncation keeps when it was heard.
    """

    def __init__(
        self,
        conv: OmniConversation,
        resp: _Response,
        items: list[OmniItem],
        frames: list[Any],
        system: str,
        cfg: ConversationConfig,
    ) -> None:
        self.items = items
        self.frames = frames
        self.system = system
        self.config = cfg
        self.output_audio = resp.output_audio
        self.voice = cfg.voice
        self.cancel = resp.cancel
        self.item_id = resp.item_id  # the assistant item this reply becomes
        self.conversation = conv
        self._conv = conv
        self._resp = resp
        self._chunk_samples = OUTPUT_RATE * conv.backend.options.audio_chunk_ms // 1000
        self._segment: int | None = None
        self._resampler: StreamResampler | None = None
        self._rate = OUTPUT_RATE
        self._pending = np.zeros(0, dtype=np.float32)
        self._segments = 0
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def text(self, delta: str) -> None:
        if delta and not self.cancel.is_set():
            self._conv._call_soon(self._conv._emit_text, self._resp, delta)

    def begin_segment(self, text: str) -> None:
        with self._lock:
            self._begin(text)

    def _begin(self, text: str) -> None:
        self._flush(last=True)
        self._segment = self._segments
        self._segments += 1
        self._resampler = None
        self._conv._call_soon(self._conv._add_segment, self._resp, Segment(text))

    def audio(self, samples: np.ndarray, rate: int) -> None:
        """Float samples in [-1, 1] at ``rate``; resampled to 24 kHz and sent in ``audio_chunk_ms`` pieces."""
        if self.cancel.is_set() or samples is None:
            return
        with self._lock:
            if self._segment is None:  # audio with no segment: one open-ended segment
                self._begin("")
            samples = np.asarray(samples, dtype=np.float32).reshape(-1)
            if self._resampler is None or self._rate != rate:
                self._flush(last=True)
                self._rate = rate
                self._resampler = StreamResampler(rate, OUTPUT_RATE)
            out = self._resampler.process(samples)
            self._push(out)

    def end_segment(self) -> None:
        with self._lock:
            self._flush(last=True)
            self._segment = None
            self._resampler = None

    def _flush(self, last: bool) -> None:
        if self._resampler is not None and last:
            self._push(self._resampler.process(np.zeros(0, dtype=np.float32), last=True))
            self._resampler = None
        if self._pending.size and self._segment is not None:
            self._send(self._pending)
        self._pending = np.zeros(0, dtype=np.float32)

    def _push(self, samples: np.ndarray) -> None:
        buf = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n = self._chunk_samples
        whole = buf.size // n * n
        for off in range(0, whole, n):
            self._send(buf[off : off + n])
        self._pending = buf[whole:].copy()

    def _send(self, samples: np.ndarray) -> None:
        if self.cancel.is_set() or self._segment is None:
            return
        self._conv._call_soon(self._conv._emit_audio, self._resp, self._segment, float_to_pcm16(samples))


@dataclass(slots=True)
class _Response:
    response_id: str
    item_id: str
    output_audio: bool
    cancel: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    text: str = ""
    audio_samples: int = 0
    segments: list[Segment] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    cancel_at: float | None = None

    @property
    def audio_ms(self) -> float:
        return self.audio_samples * 1000.0 / OUTPUT_RATE


# --------------------------------------------------------------------------- turn detection


class AudioInput:
    """Input audio at 16 kHz: a bounded buffer plus Silero VAD (the cascade's ``StreamingVad``).

    ``process`` returns ``(kind, ms, segment)``: ``start``/``end`` of speech, the utterance
    (with prefix padding and a short tail) on ``end``. Runs in a worker thread.
    """

    def __init__(self, vad_model, cfg: ConversationConfig) -> None:
        from core.cascade.vad import StreamingVad

        td = cfg.turn_detection
        self.vad = None if td is None else StreamingVad(vad_model, td.threshold, td.silence_duration_ms)
        self.pad = td.prefix_padding_ms * VAD_RATE // 1000 if td is not None else 0
        self.resampler = StreamResampler(cfg.input_sample_rate, VAD_RATE)
        self.buffer = np.zeros(0, dtype=np.float32)
        self.buffer_start = 0  # stream offset of buffer[0]
        self.stream_samples = 0

    def process(self, samples: np.ndarray) -> tuple[np.ndarray, list[tuple[str, int, np.ndarray | None]]]:
        audio = self.resampler.process(samples)
        self.buffer = np.concatenate([self.buffer, audio]) if self.buffer.size else audio.copy()
        self.stream_samples += audio.size
        if self.buffer.size > MAX_BUFFER_SECONDS * VAD_RATE:
            self.trim(self.stream_samples - MAX_BUFFER_SECONDS * VAD_RATE)
        out: list[tuple[str, int, np.ndarray | None]] = []
        if self.vad is None:
            return audio, out
        for ev in self.vad.process(audio):
            if ev.kind == "start":
                out.append(("start", ev.ms, None))
            elif ev.kind == "end":
                start = self.vad.speech_start_samples - self.pad
                end = self.vad.last_voiced_end_samples + TAIL_SAMPLES
                a = max(0, start - self.buffer_start)
                b = max(a, min(self.buffer.size, end - self.buffer_start))
                out.append(("end", ev.ms, self.buffer[a:b].copy()))
                self.trim(self.vad.last_voiced_end_samples)
        if not self.vad.in_speech:
            self.trim(self.stream_samples - self.pad - VAD_RATE)
        return audio, out

    def trim(self, keep_from: int) -> None:
        drop = keep_from - self.buffer_start
        if drop > 0:
            self.buffer = self.buffer[drop:]
            self.buffer_start += drop

    def take(self) -> np.ndarray:
        """Everything buffered (an explicit commit); the VAD restarts after it, so the committed
        audio cannot end a turn later."""
        segment, self.buffer = self.buffer, np.zeros(0, dtype=np.float32)
        self.buffer_start = self.stream_samples
        if self.vad is not None:
            from core.cascade.vad import StreamingVad

            old = self.vad
            self.vad = StreamingVad(old.model, old.threshold, old.silence_samples * 1000 // VAD_RATE)
            self.vad.processed = self.stream_samples
        return segment

    def clear(self) -> None:
        self.buffer = np.zeros(0, dtype=np.float32)
        self.buffer_start = self.stream_samples


# --------------------------------------------------------------------------- backend


class OmniBackendBase(Backend):
    """Threads, VAD and voices shared by the omni backends; subclasses load their model.

    ``model_pool`` (one thread) owns the model: generations and transcriptions queue there, so
    one slow request never runs two forward passes at once on the same weights.
    """

    options: OmniOptions
    voices: tuple[str, ...] = ()
    default_voice: str | None = None
    turn_detection_types: tuple[str, ...] = ("server_vad",)

    def __init__(self, options: OmniOptions) -> None:
        self.options = options
        self.vad_model = None
        self._loaded = False
        self.model_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-model")
        self.io_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix=f"{self.name}-io")
        self.load_seconds: dict[str, float] = {}

    @property
    def loaded(self) -> bool:
        return self._loaded

    def report(self, progress: ProgressCallback | None, stage: str, fraction: float, detail: str = "") -> None:
        log.info("load %s %.0f%% %s", stage, fraction * 100, detail)
        if progress:
            progress(LoadProgress(stage, fraction, detail))

    def load(self, progress: ProgressCallback | None = None) -> None:
        from core.cascade.vad import SileroModel

        t0 = time.perf_counter()
        self.report(progress, "vad", 0.0)
        self.vad_model = SileroModel()
        self.load_seconds["vad"] = time.perf_counter() - t0
        self.load_model(progress)
        self._loaded = True
        self.report(progress, "ready", 1.0)

    def load_model(self, progress: ProgressCallback | None) -> None:
        raise NotImplementedError

    def resolve_voice(self, voice: str | None) -> str | None:
        """A voice this model has: case-insensitive match, else the default (clients such as the
        official SDK send OpenAI voice names like 'alloy'; refusing them would break the session)."""
        if voice:
            for name in self.voices:
                if name.lower() == voice.lower():
                    return name
            if not self.voices:
                return voice
        return self.default_voice

    def open_conversation(self, config: ConversationConfig | None = None) -> OmniConversation:
        if not self._loaded:
            raise BackendNotLoadedError("backend is not loaded yet")
        return self.conversation_class(self, config or ConversationConfig())

    conversation_class: type[OmniConversation]

    def run_model(self, job: GenerationJob) -> GenerationStats:
        """Blocking generation in ``model_pool``; see ``GenerationJob``."""
        raise NotImplementedError

    async def run_model_async(self, job: GenerationJob) -> GenerationStats:
        """Backends that talk to a server override this and stay on the loop."""
        return await asyncio.get_running_loop().run_in_executor(self.model_pool, self.run_model, job)

    def transcribe_audio(self, audio: np.ndarray) -> str | None:
        """Transcript of a user clip for the client (None: this backend gives none). Blocking."""
        return None

    def close(self) -> None:
        for pool in (self.model_pool, self.io_pool):
            pool.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------- conversation


class OmniConversation(Conversation):
    """The Conversation all omni backends share; see the module docstring."""

    def __init__(self, backend: OmniBackendBase, config: ConversationConfig) -> None:
        self.backend = backend
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[ConversationEvent | None] = asyncio.Queue()
        self._items: deque[OmniItem] = deque()
        self._frames: deque[Any] = deque(maxlen=backend.options.max_frames)
        self._response: _Response | None = None
        self._past_segments: dict[str, list[Segment]] = {}
        self._audio_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._speech_item: str | None = None
        self._idle = asyncio.Event()  # no reply running: transcripts wait for this, replies never wait
        self._idle.set()
        self.config = self._checked(config)
        self._input = AudioInput(backend.vad_model, self.config)

    # ------------------------------------------------------------------ config & state

    def _checked(self, config: ConversationConfig) -> ConversationConfig:
        td = config.turn_detection
        if td is not None and td.type not in self.backend.turn_detection_types:
            raise InvalidInputError(
                f"turn_detection.type {td.type!r} is not supported by backend {self.backend.name}; "
                f"use one of {', '.join(repr(t) for t in self.backend.turn_detection_types)} or null",
                param="turn_detection.type",
            )
        voice = self.backend.resolve_voice(config.voice)
        return config if voice == config.voice else config.model_copy(update={"voice": voice})

    def update(self, config: ConversationConfig) -> None:
        config = self._checked(config)
        old, self.config = self.config, config
        if (
            old.input_sample_rate != config.input_sample_rate
            or old.turn_detection != config.turn_detection
        ):
            self._input = AudioInput(self.backend.vad_model, config)
            self._speech_item = None
        self._on_config(old)

    def _on_config(self, old: ConversationConfig) -> None:
        """Hook for backends with per-mode state (MiniCPM-o's duplex session)."""

    @property
    def history(self) -> list[HistoryMessage]:
        return [HistoryMessage(i.role, i.text, i.item_id) for i in self._items]

    @property
    def items(self) -> list[OmniItem]:
        return list(self._items)

    @property
    def response_active(self) -> bool:
        return self._response is not None

    def _emit(self, event: ConversationEvent) -> None:
        if not self._closed:
            self._queue.put_nowait(event)

    async def events(self) -> AsyncIterator[ConversationEvent]:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    def _spawn(self, coro) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _call_soon(self, fn: Callable, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: the session is gone
            pass

    def _remember(self, item: OmniItem) -> None:
        self._items.append(item)
        while len(self._items) > self.config.max_history_messages:
            self._items.popleft()

    # ------------------------------------------------------------------ audio input

    async def append_audio(self, pcm: bytes) -> None:
        samples = pcm16_to_float(pcm, self.config.input_sample_rate)
        async with self._audio_lock:
            audio16, events = await self._loop.run_in_executor(self.backend.io_pool, self._input.process, samples)
            await self._on_audio(audio16)
            for kind, ms, segment in events:
                await self._on_vad(kind, ms, segment)

    async def _on_audio(self, audio16: np.ndarray) -> None:
        """Hook: every input sample at 16 kHz (MiniCPM-o's duplex mode feeds the model here)."""

    async def _on_vad(self, kind: str, ms: int, segment: np.ndarray | None) -> None:
        td = self.config.turn_detection
        if kind == "start":
            self._speech_item = new_id("item")
            self._emit(SpeechStarted(self._speech_item, ms))
            barge_in = td is not None and td.type == "server_vad" and td.interrupt_response
            if self._response is not None and barge_in:
                await self.cancel_response("turn_detected")
        elif kind == "end":
            item_id = self._speech_item or new_id("item")
            self._speech_item = None
            self._emit(SpeechStopped(item_id, ms))
            if td is None or td.type != "server_vad":
                return  # model_duplex: the model hears everything itself; nothing to commit
            self._commit(item_id, segment)
            if td.create_response and self._response is None and not self._closed:
                await self.create_response()

    def _commit(self, item_id: str, segment: np.ndarray) -> OmniItem:
        self._emit(InputCommitted(item_id, int(segment.size * 1000 / VAD_RATE)))
        item = OmniItem("user", "", audio=segment, item_id=item_id)
        self._remember(item)
        if self.config.transcribe_input and self.backend.options.transcribe_input:
            self._spawn(self._transcribe(item))
        return item

    async def _transcribe(self, item: OmniItem) -> None:
        """The transcript is for the client's display: it waits until the reply it may have
        triggered is done, so it never delays the answer (both need the one model thread)."""
        await asyncio.sleep(0)
        await self._idle.wait()
        try:
            text = await self._loop.run_in_executor(self.backend.model_pool, self.backend.transcribe_audio, item.audio)
        except Exception as exc:  # reported; the session goes on
            log.exception("transcription failed")
            self._emit(ConversationError("transcription_failed", f"transcription failed: {exc}"))
            return
        if text is None:
            return
        item.text = text.strip()
        self._emit(InputTranscript(item.item_id, item.text))

    async def commit_audio(self) -> str | None:
        async with self._audio_lock:
            segment = self._input.take()
            if segment.size < VAD_RATE // 10:
                raise InvalidAudioError(
                    f"input audio buffer holds {segment.size * 1000 // VAD_RATE} ms; commit needs at least 100 ms",
                    param="audio",
                )
        item_id = self._speech_item or new_id("item")
        self._speech_item = None
        self._commit(item_id, segment)
        return item_id

    def clear_audio(self) -> None:
        self._input.clear()

    # ------------------------------------------------------------------ text & images

    async def add_text(self, text: str, role: Literal["user", "assistant", "system"] = "user") -> str:
        if not isinstance(text, str) or not text.strip():
            raise InvalidTextError("text must be a non-empty string", param="text")
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidTextError(f"text of {len(text)} characters exceeds {MAX_TEXT_CHARS}", param="text")
        item = OmniItem(role, text.strip())
        self._remember(item)
        return item.item_id

    async def add_audio_item(self, pcm: bytes) -> tuple[str, str]:
        samples = pcm16_to_float(pcm, self.config.input_sample_rate)
        audio = await self._loop.run_in_executor(
            self.backend.io_pool, resample, samples, self.config.input_sample_rate, VAD_RATE
        )
        item = OmniItem("user", "", audio=audio)
        self._remember(item)
        transcript = ""
        if self.config.transcribe_input and self.backend.options.transcribe_input:
            text = await self._loop.run_in_executor(self.backend.model_pool, self.backend.transcribe_audio, audio)
            transcript = item.text = (text or "").strip()
        return item.item_id, transcript

    def delete_item(self, item_id: str) -> bool:
        for item in self._items:
            if item.item_id == item_id:
                self._items.remove(item)
                return True
        return False

    async def add_image(self, data: bytes, *, frame: bool = False) -> str:
        image = await self._loop.run_in_executor(
            self.backend.io_pool, decode_image, data, self.backend.options.max_image_side
        )
        if frame:
            self._frames.append(image)
            return new_id("item")
        item = OmniItem("user", "", images=[image], image_bytes=[bytes(data)])
        self._remember(item)
        return item.item_id

    # ------------------------------------------------------------------ responses

    def system_prompt(self, instructions: str | None) -> str:
        return instructions or self.config.instructions or self.backend.options.instructions or ""

    async def create_response(
        self,
        *,
        instructions: str | None = None,
        output_audio: bool | None = None,
        max_output_tokens: int | None = None,
    ) -> str:
        if self._response is not None:
            raise ResponseActiveError(f"conversation already has an active response {self._response.response_id}")
        cfg = self.config
        if output_audio is not None or max_output_tokens is not None:
            cfg = cfg.model_copy(update={
                "output_audio": cfg.output_audio if output_audio is None else output_audio,
                "max_output_tokens": max_output_tokens or cfg.max_output_tokens,
            })
        resp = self._start(cfg.output_audio)
        job = GenerationJob(self, resp, list(self._items), list(self._frames), self.system_prompt(instructions), cfg)
        self._spawn(self._run_response(resp, job))
        return resp.response_id

    def _start(self, output_audio: bool) -> _Response:
        resp = _Response(new_id("resp"), new_id("item"), output_audio)
        self._response = resp
        self._idle.clear()
        self._emit(ResponseStarted(resp.response_id, resp.item_id, resp.output_audio))
        return resp

    async def _run_response(self, resp: _Response, job: GenerationJob) -> None:
        status, reason = "completed", None
        try:
            stats = await self.backend.run_model_async(job)
            resp.output_tokens, resp.prompt_tokens = stats.output_tokens, stats.prompt_tokens
            if stats.stop_reason == "length":
                status, reason = "incomplete", "max_output_tokens"
        except asyncio.CancelledError:
            resp.cancel.set()  # session closing: stop the model thread too
            raise
        except Exception as exc:  # one failed reply must not end the session
            log.exception("response failed")
            resp.cancel.set()
            status, reason = "failed", "server_error"
            self._emit(ConversationError("response_failed", f"response failed: {exc}"))
        # call_soon_threadsafe emissions queued by the model thread land before the final event
        await asyncio.sleep(0)
        if not resp.cancelled:
            self._finish(resp, status, reason, resp.text)

    def _finish(self, resp: _Response, status: str, reason: str | None, history_text: str) -> None:
        if self._response is resp:
            self._response = None
            self._idle.set()
        self._past_segments[resp.item_id] = resp.segments
        while len(self._past_segments) > 8:
            self._past_segments.pop(next(iter(self._past_segments)))
        if history_text.strip():
            self._remember(OmniItem("assistant", history_text.strip(), item_id=resp.item_id))
        self._emit(ResponseDone(resp.response_id, resp.item_id, status, reason, resp.text, resp.audio_ms,
                                resp.output_tokens, resp.prompt_tokens))

    def _emit_text(self, resp: _Response, delta: str) -> None:
        if resp.cancelled:
            return
        resp.text += delta
        self._emit(TextDelta(resp.response_id, resp.item_id, delta))

    def _add_segment(self, resp: _Response, segment: Segment) -> None:
        resp.segments.append(segment)

    def _emit_audio(self, resp: _Response, index: int, pcm: bytes) -> None:
        n = len(pcm) // 2
        seg = resp.segments[index]
        seg.total_samples += n  # made, whether or not it goes out: the share heard is of this
        if resp.cancelled:
            return
        resp.audio_samples += n
        seg.emitted_samples += n
        self._emit(AudioChunk(resp.response_id, resp.item_id, pcm, OUTPUT_RATE))

    async def cancel_response(self, reason: str = "client_cancelled") -> CancelResult:
        resp = self._response
        if resp is None:
            raise NoActiveResponseError("there is no active response to cancel")
        resp.cancel_at = time.perf_counter()
        resp.cancelled = True
        resp.cancel.set()
        heard = heard_text(resp.segments, resp.audio_samples, resp.text) if resp.output_audio else resp.text
        self._finish(resp, "cancelled", reason, heard)
        return CancelResult(resp.response_id, resp.item_id, resp.text, resp.audio_ms)

    def truncate(self, item_id: str, audio_end_ms: int) -> str:
        item = next((i for i in self._items if i.item_id == item_id), None)
        if item is None or item.role != "assistant":
            raise InvalidTextError(f"no assistant item {item_id!r} in the conversation", param="item_id")
        segments = self._past_segments.get(item_id)
        if segments is None:
            return item.text
        emitted = sum(s.emitted_samples for s in segments)
        if audio_end_ms < 0 or audio_end_ms * OUTPUT_RATE // 1000 > emitted + OUTPUT_RATE // 50:
            raise InvalidAudioError(
                f"audio_end_ms {audio_end_ms} is beyond the {emitted * 1000 // OUTPUT_RATE} ms of audio sent",
                param="audio_end_ms",
            )
        kept = heard_text(segments, audio_end_ms * OUTPUT_RATE // 1000, item.text).strip()
        if kept:
            item.text = kept
        else:
            self._items.remove(item)
        self._on_history_edited()
        return kept

    def _on_history_edited(self) -> None:
        """Hook: a backend that caches the prompt (MiniCPM-o's KV session) must rebuild it."""

    async def wait_idle(self) -> None:
        """Wait for background work (transcripts, replies) to finish; for tests."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        if self._closed:
            return
        if self._response is not None:
            await self.cancel_response("session_closed")
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self._queue.put_nowait(None)


# --------------------------------------------------------------------------- helpers


def heard_text(segments: list[Segment], samples: int, full_text: str = "") -> str:
    """Text of a reply up to ``samples`` of its audio: whole segments, then a share of the words.

    A segment with no text of its own (an engine that streams audio and text apart) stands for
    the whole reply, so the share is taken of ``full_text``.
    """
    words: list[str] = []
    left = samples
    for seg in segments:
        text = seg.text if seg.text or len(segments) > 1 else full_text
        if seg.total_samples <= 0:
            break
        if left >= seg.total_samples:
            words.extend(text.split())
            left -= seg.total_samples
            continue
        seg_words = text.split()
        words.extend(seg_words[: int(len(seg_words) * left / seg.total_samples)])
        break
    return " ".join(words)


def decode_image(data: bytes, max_side: int) -> Any:
    """JPEG/PNG bytes -> RGB PIL image no larger than ``max_side``; typed errors for bad input."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InvalidImageError("empty image", param="image")
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidImageError(f"image of {len(data)} bytes exceeds {MAX_IMAGE_BYTES} bytes", param="image")
    try:
        image = Image.open(io.BytesIO(data))
        if image.width * image.height > MAX_IMAGE_PIXELS:
            raise InvalidImageError("image has too many pixels", param="image")
        image = image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise InvalidImageError("image could not be decoded (send JPEG or PNG)", param="image") from None
    if max(image.size) > max_side:
        image.thumbnail((max_side, max_side))
    return image


def image_to_jpeg(image: Any, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def parse_dtype(name: str):
    """'float32' / 'bfloat16' / 'float16' / 'auto' -> a torch dtype (auto: bf16 on CUDA, else fp32)."""
    import torch

    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def parse_device(name: str) -> str:
    """'auto' -> 'cuda:0' when CUDA is there, else 'cpu'; anything else is checked and kept."""
    import torch

    if name == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} requested but this torch has no CUDA "
                               f"(torch {torch.__version__}); install a CUDA build, see docs/backends.md")
        index = int(name.split(":", 1)[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"device {name!r} requested but only {torch.cuda.device_count()} CUDA device(s) "
                               "are visible (CUDA_VISIBLE_DEVICES); with one worker per GPU use 'cuda' or 'auto'")
    return name
