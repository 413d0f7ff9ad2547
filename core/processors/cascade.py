"""The default backend: an embedded CPU cascade Silero VAD -> Whisper -> SmolLM2 -> Piper.

Streaming is chunked end to end: LLM text streams into ``SpeechChunker``; each speakable piece
goes to the TTS thread while the LLM keeps generating, and audio leaves in ``audio_chunk_ms``
pieces as soon as Piper returns it. While the VAD waits out the silence hangover it already
transcribes the utterance speculatively, so the transcript is usually ready when the turn ends.
Model work runs on per-stage single-thread pools; the event loop only routes events.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.audio import OUTPUT_RATE, StreamResampler, pcm16_to_float
from core.cascade.chunker import SpeechChunker
from core.cascade.llm import KvState
from core.cascade.vad import StreamingVad
from core.errors import (
    BackendNotLoadedError,
    InvalidAudioError,
    InvalidInputError,
    InvalidTextError,
    NoActiveResponseError,
    ResponseActiveError,
)
from core.processors.base import (
    AudioChunk,
    Backend,
    CancelResult,
    Capability,
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
    Transcription,
    TranscriptSegment,
    new_id,
)

log = logging.getLogger(__name__)

VAD_RATE = 16000
TAIL_SAMPLES = VAD_RATE * 3 // 10  # audio kept after the last voiced sample for ASR
DEFAULT_INSTRUCTIONS = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
MAX_TEXT_CHARS = 20_000
MAX_BUFFER_SECONDS = 300


HURRY_AHEAD_S = 1.2  # less audio than this ahead of the listener: cut the next piece early


class CascadeOptions(BaseModel):
    """``backend_options`` for ``cascade``; every model path defaults to the bundled package."""

    model_config = ConfigDict(extra="forbid")

    data_dir: str = "data"
    whisper_model_path: str | None = None
    llm_model_path: str | None = None
    voice_path: str | None = None
    instructions: str = DEFAULT_INSTRUCTIONS
    threads: int = Field(2, ge=1, le=64)
    quantize_lm_head: bool = True
    llm_dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    first_chunk_words: int = Field(2, ge=1, le=20)
    tts_first_priority: bool = True
    audio_chunk_ms: int = Field(100, ge=20, le=1000)
    no_speech_threshold: float = Field(0.6, ge=0.0, le=1.0)
    max_prompt_tokens: int = Field(1536, ge=128, le=8192)
    speculative_reply: bool = True
    warm_up: bool = True


class CascadeBackend(Backend):
    name = "cascade"
    capabilities = frozenset(Capability)

    def __init__(self, options: CascadeOptions | None = None) -> None:
        self.options = options or CascadeOptions()
        self.vad_model = None
        self.asr = None
        self.llm = None
        self.tts = None
        self.describer = None
        self._loaded = False
        # One thread per stage: stages overlap with each other, never with themselves.
        self.vad_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="vad")
        self.asr_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="asr")
        self.llm_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm")
        self.tts_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tts")
        self.load_seconds: dict[str, float] = {}

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self, progress: ProgressCallback | None = None) -> None:
        from core.cascade.asr import WhisperAsr
        from core.cascade.llm import SmolLm
        from core.cascade.tts import PiperTts
        from core.cascade.vad import SileroModel
        from core.cascade.vision import FrameDescriber

        opts = self.options

        def report(stage: str, fraction: float, detail: str = "") -> None:
            log.info("load %s %.0f%% %s", stage, fraction * 100, detail)
            if progress:
                progress(LoadProgress(stage, fraction, detail))

        def timed(stage: str, fraction: float, fn):
            report(stage, fraction)
            t0 = time.perf_counter()
            value = fn()
            self.load_seconds[stage] = time.perf_counter() - t0
            return value

        self.vad_model = timed("vad", 0.0, SileroModel)
        self.asr = timed("asr", 0.05, lambda: WhisperAsr(opts.whisper_model_path, opts.threads))
        self.tts = timed("tts", 0.15, lambda: PiperTts(opts.voice_path))
        self.describer = timed("vision", 0.25, FrameDescriber)
        self.llm = timed(
            "llm",
            0.3,
            lambda: SmolLm(
                Path(opts.data_dir),
                opts.llm_model_path,
                threads=opts.threads,
                quantize_head=opts.quantize_lm_head,
                dtype=opts.llm_dtype,
                progress=lambda d: report("llm", 0.35, d),
            ),
        )
        if opts.warm_up:
            timed("warm_up", 0.9, self._warm_up)
        self._loaded = True
        report("ready", 1.0)

    def _warm_up(self) -> None:
        """One tiny pass through each model so the first real turn pays no first-call costs."""
        from core.cascade.llm import KvState

        pcm = b"".join(self.tts.synthesize("Hello there."))
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
        from core.audio import resample

        self.asr.transcribe(resample(audio, OUTPUT_RATE, VAD_RATE))
        self.llm.generate(
            [{"role": "system", "content": self.options.instructions}, {"role": "user", "content": "Hi"}],
            KvState(),
            lambda _t: None,
            threading.Event(),
            max_tokens=2,
        )

    def open_conversation(self, config: ConversationConfig | None = None) -> CascadeConversation:
        if not self._loaded:
            raise BackendNotLoadedError("backend is not loaded yet")
        return CascadeConversation(self, config or ConversationConfig())

    def close(self) -> None:
        for pool in (self.vad_pool, self.asr_pool, self.llm_pool, self.tts_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ one-shot (REST)

    def transcribe(
        self, samples: np.ndarray, *, language: str | None = None, prompt: str | None = None,
        temperature: float = 0.0, cancel: threading.Event | None = None,
    ) -> Transcription:
        if not self._loaded:
            raise BackendNotLoadedError("backend is not loaded yet")
        code = (language or "en").strip().lower()
        if code in ("english", "en"):
            code = "en"
        elif not self.asr.has_language(code):
            raise InvalidInputError(
                f"language {language!r} is not supported by this speech model"
                + ("" if self.asr.multilingual else " (English only: use 'en')"),
                param="language",
            )
        timed = self.asr.transcribe_timed(samples, code, prompt, temperature, cancel)
        threshold = self.options.no_speech_threshold
        segments = tuple(
            TranscriptSegment(
                i, s.start, s.end, s.text, s.tokens, s.avg_logprob,
                _compression_ratio(s.text), s.no_speech_prob, temperature,
            )
            for i, s in enumerate(
                s for s in timed
                if any(ch.isalnum() for ch in s.text) and not (s.no_speech_prob > threshold and s.avg_logprob < -0.7)
            )
        )
        text = "".join(s.text for s in segments).strip()
        return Transcription(text, "english" if code == "en" else code, samples.size / VAD_RATE, segments)

    def synthesize(self, text: str, *, speed: float = 1.0, voice: str | None = None) -> Iterator[bytes]:
        """A small first piece (as replies do) so the first audio leaves early; sentences after."""
        if not self._loaded:
            raise BackendNotLoadedError("backend is not loaded yet")
        chunker = SpeechChunker(first_words=self.options.first_chunk_words)
        pieces = chunker.push(text.strip() + " ") + chunker.flush()
        if not any(any(ch.isalnum() for ch in piece) for piece in pieces):
            raise InvalidTextError("the input has nothing speakable (no letters or digits)", param="input")
        for piece in pieces:
            yield from self.tts.synthesize(piece, speed)


@dataclass(slots=True)
class _Segment:
    """One synthesised piece of the reply: its text and how much of its audio went out."""

    text: str
    total_samples: int = 0
    emitted_samples: int = 0


@dataclass(slots=True)
class _Response:
    response_id: str
    item_id: str
    output_audio: bool
    cancel: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    text: str = ""
    audio_samples: int = 0
    segments: list[_Segment] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    cancel_at: float | None = None
    # Speculative replies start during the silence hangover and stay held (events buffered,
    # nothing sent) until the turn really ends; ``spec`` names the speculation they belong to.
    held: bool = False
    spec: int | None = None
    held_events: list = field(default_factory=list)
    pending_finish: tuple | None = None

    @property
    def audio_ms(self) -> float:
        return self.audio_samples * 1000.0 / OUTPUT_RATE


@dataclass(slots=True)
class ConversationStats:
    """Figures the benchmark reads; cheap to keep."""

    last_cancel_stop_ms: float | None = None
    last_prefill_ms: float | None = None
    last_reused_tokens: int = 0
    speculative_hits: int = 0
    speculative_misses: int = 0
    speculative_replies_used: int = 0
    speculative_replies_dropped: int = 0


class CascadeConversation(Conversation):
    def __init__(self, backend: CascadeBackend, config: ConversationConfig) -> None:
        self._backend = backend
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[ConversationEvent | None] = asyncio.Queue()
        self._history: deque[HistoryMessage] = deque()
        self._kv = KvState()
        self._response: _Response | None = None
        self._past_segments: dict[str, list[_Segment]] = {}
        self._frame_note: str | None = None
        self._audio_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.stats = ConversationStats()
        self.config = config
        self._reset_audio_state()

    # ------------------------------------------------------------------ config & state

    def _new_vad(self) -> StreamingVad | None:
        td = self.config.turn_detection
        if td is None:
            return None
        return StreamingVad(self._backend.vad_model, td.threshold, td.silence_duration_ms)

    def _reset_audio_state(self) -> None:
        self._vad = self._new_vad()
        self._resampler = StreamResampler(self.config.input_sample_rate, VAD_RATE)
        self._buffer = np.zeros(0, dtype=np.float32)
        self._buffer_start = 0  # stream offset (16 kHz samples) of _buffer[0]
        self._stream_samples = 0
        self._speech_item: str | None = None
        self._speculation: tuple[int, concurrent.futures.Future] | None = None
        self._spec_generation = 0

    def update(self, config: ConversationConfig) -> None:
        old = self.config
        self.config = config
        if (
            old.input_sample_rate != config.input_sample_rate
            or (old.turn_detection is None) != (config.turn_detection is None)
        ):
            self._reset_audio_state()
        elif self._vad is not None and config.turn_detection is not None:
            self._vad.configure(config.turn_detection.threshold, config.turn_detection.silence_duration_ms)

    @property
    def history(self) -> list[HistoryMessage]:
        return list(self._history)

    @property
    def response_active(self) -> bool:
        return self._response is not None and not self._response.held

    def _emit(self, event: ConversationEvent) -> None:
        if not self._closed:
            self._queue.put_nowait(event)

    async def events(self) -> AsyncIterator[ConversationEvent]:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    def _emit_for(self, resp: _Response, event: ConversationEvent) -> None:
        if resp.held:
            resp.held_events.append(event)
        else:
            self._emit(event)

    def _spawn(self, coro) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _remember(self, message: HistoryMessage) -> None:
        self._history.append(message)
        while len(self._history) > self.config.max_history_messages:
            self._history.popleft()

    # ------------------------------------------------------------------ audio input

    async def append_audio(self, pcm: bytes) -> None:
        samples = pcm16_to_float(pcm, self.config.input_sample_rate)
        async with self._audio_lock:
            vad_events = await self._loop.run_in_executor(
                self._backend.vad_pool, self._ingest, samples
            )
            for kind, ms, segment in vad_events:
                await self._on_vad(kind, ms, segment)

    def _ingest(self, samples: np.ndarray) -> list[tuple[str, int, np.ndarray | None]]:
        """VAD thread: resample, buffer, detect; cut the utterance when speech ends."""
        audio = self._resampler.process(samples)
        self._buffer = np.concatenate([self._buffer, audio]) if self._buffer.size else audio.copy()
        self._stream_samples += audio.size
        if self._buffer.size > MAX_BUFFER_SECONDS * VAD_RATE:
            drop = self._buffer.size - MAX_BUFFER_SECONDS * VAD_RATE
            self._buffer = self._buffer[drop:]
            self._buffer_start += drop
        if self._vad is None:
            return []
        out: list[tuple[str, int, np.ndarray | None]] = []
        td = self.config.turn_detection
        pad = td.prefix_padding_ms * VAD_RATE // 1000 if td else 0
        for ev in self._vad.process(audio):
            segment = None
            if ev.kind in ("pause", "end"):
                start = self._vad.speech_start_samples - pad
                end = self._vad.last_voiced_end_samples + TAIL_SAMPLES
                segment = self._slice(start, end)
                # At a pause only ~100 ms after the last word has arrived; Whisper hears the
                # last word worse without a tail ("France" -> "friends"), so pad with silence.
                want = end - max(start, self._buffer_start)
                if segment.size < want:
                    segment = np.concatenate([segment, np.zeros(want - segment.size, dtype=np.float32)])
            if ev.kind == "end":
                keep_from = self._vad.last_voiced_end_samples
                self._trim(keep_from)
            out.append((ev.kind, ev.ms, segment))
        if not self._vad.in_speech:
            self._trim(self._stream_samples - max(pad, 0) - VAD_RATE)
        return out

    def _slice(self, start: int, end: int) -> np.ndarray:
        a = max(0, start - self._buffer_start)
        b = max(a, min(self._buffer.size, end - self._buffer_start))
        return self._buffer[a:b].copy()

    def _trim(self, keep_from: int) -> None:
        drop = keep_from - self._buffer_start
        if drop > 0:
            self._buffer = self._buffer[drop:]
            self._buffer_start += drop

    async def _on_vad(self, kind: str, ms: int, segment: np.ndarray | None) -> None:
        td = self.config.turn_detection
        if kind == "start":
            self._drop_held()
            self._speech_item = new_id("item")
            self._emit(SpeechStarted(self._speech_item, ms))
            if self._response is not None and td is not None and td.interrupt_response:
                await self.cancel_response("turn_detected")
        elif kind == "pause":
            self._spec_generation += 1
            generation = self._spec_generation
            fut = self._backend.asr_pool.submit(self._backend.asr.transcribe, segment)
            self._speculation = (generation, fut)
            fut.add_done_callback(lambda f: self._call_soon(self._speculate_reply, generation, f))
        elif kind == "resume":
            self._spec_generation += 1
            self._speculation = None
            self._drop_held()
        elif kind == "end":
            item_id = self._speech_item or new_id("item")
            self._speech_item = None
            self._emit(SpeechStopped(item_id, ms))
            spec = self._speculation
            valid = spec is not None and spec[0] == self._spec_generation
            self._speculation = None
            self._emit(InputCommitted(item_id, int(segment.size * 1000 / VAD_RATE)))
            create = td is not None and td.create_response
            self._spawn(
                self._finish_turn(item_id, segment, spec[1] if valid else None, create, spec[0] if valid else None)
            )

    def _call_soon(self, fn, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: the session is gone
            pass

    def _speculate_reply(self, generation: int, fut: concurrent.futures.Future) -> None:
        """Start the reply to a speculative transcript while the hangover runs; hold its output."""
        td = self.config.turn_detection
        if (
            self._closed
            or generation != self._spec_generation
            or td is None
            or not td.create_response
            or not self._backend.options.speculative_reply
            or self._response is not None
            or fut.exception() is not None
        ):
            return
        text = self._clean_transcript(fut.result())
        if not text:
            return
        resp = _Response(new_id("resp"), new_id("item"), self.config.output_audio, held=True, spec=generation)
        self._start_response(resp, self._prompt(None, pending_user=text))

    def _drop_held(self) -> None:
        resp = self._response
        if resp is not None and resp.held:
            resp.cancelled = True
            resp.cancel.set()
            self._response = None
            self.stats.speculative_replies_dropped += 1

    def _release_held(self, resp: _Response) -> None:
        resp.held = False
        self.stats.speculative_replies_used += 1
        for event in resp.held_events:
            self._emit(event)
        resp.held_events.clear()
        if resp.pending_finish is not None:
            self._finish(resp, *resp.pending_finish)

    async def _finish_turn(
        self,
        item_id: str,
        segment: np.ndarray,
        speculative: concurrent.futures.Future | None,
        create_response: bool,
        spec: int | None = None,
    ) -> None:
        try:
            if speculative is not None:
                self.stats.speculative_hits += 1
                result = await asyncio.wrap_future(speculative)
            else:
                self.stats.speculative_misses += 1
                result = await self._loop.run_in_executor(
                    self._backend.asr_pool, self._backend.asr.transcribe, segment
                )
        except Exception as exc:  # reported to the client; the session goes on
            log.exception("transcription failed")
            self._emit(ConversationError("transcription_failed", f"transcription failed: {exc}"))
            return
        text = self._clean_transcript(result)
        if self.config.transcribe_input:
            self._emit(InputTranscript(item_id, text))
        held = self._response if self._response is not None and self._response.held else None
        if held is not None and (spec is None or held.spec != spec or not text):
            self._drop_held()
            held = None
        if not text:
            return
        self._remember(HistoryMessage("user", text, item_id))
        if held is not None:
            self._release_held(held)
        elif create_response and self._response is None and not self._closed:
            await self.create_response()

    def _clean_transcript(self, result) -> str:
        text = result.text.strip()
        if not any(ch.isalnum() for ch in text):
            return ""
        if result.no_speech_prob > self._backend.options.no_speech_threshold and result.avg_logprob < -0.7:
            return ""
        return text

    async def commit_audio(self) -> str | None:
        async with self._audio_lock:
            segment = self._buffer
            if segment.size < VAD_RATE // 10:
                raise InvalidAudioError(
                    f"input audio buffer holds {segment.size * 1000 // VAD_RATE} ms; commit needs at least 100 ms",
                    param="audio",
                )
            self._buffer = np.zeros(0, dtype=np.float32)
            self._buffer_start = self._stream_samples
            self._vad = self._new_vad()  # the committed audio must not end a turn later
            if self._vad is not None:
                self._vad.processed = self._stream_samples
        item_id = self._speech_item or new_id("item")
        self._speech_item = None
        self._emit(InputCommitted(item_id, int(segment.size * 1000 / VAD_RATE)))
        await self._finish_turn(item_id, segment, None, create_response=False)
        return item_id

    def clear_audio(self) -> None:
        self._buffer = np.zeros(0, dtype=np.float32)
        self._buffer_start = self._stream_samples
        self._speculation = None
        self._spec_generation += 1

    # ------------------------------------------------------------------ text & images

    async def add_text(self, text: str, role: Literal["user", "assistant", "system"] = "user") -> str:
        if not isinstance(text, str) or not text.strip():
            raise InvalidTextError("text must be a non-empty string", param="text")
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidTextError(f"text of {len(text)} characters exceeds {MAX_TEXT_CHARS}", param="text")
        message = HistoryMessage(role, text.strip())
        self._remember(message)
        return message.item_id

    async def add_audio_item(self, pcm: bytes) -> tuple[str, str]:
        samples = pcm16_to_float(pcm, self.config.input_sample_rate)
        from core.audio import resample

        audio = await self._loop.run_in_executor(
            self._backend.vad_pool, resample, samples, self.config.input_sample_rate, VAD_RATE
        )
        result = await self._loop.run_in_executor(self._backend.asr_pool, self._backend.asr.transcribe, audio)
        text = self._clean_transcript(result)
        item_id = new_id("item")
        if text:
            self._remember(HistoryMessage("user", text, item_id))
        return item_id, text

    def delete_item(self, item_id: str) -> bool:
        for message in self._history:
            if message.item_id == item_id:
                self._history.remove(message)
                return True
        return False

    async def add_image(self, data: bytes, *, frame: bool = False) -> str:
        note = await self._loop.run_in_executor(
            self._backend.vad_pool, self._backend.describer.describe, data
        )
        item_id = new_id("item")
        if frame:
            self._frame_note = note
        else:
            self._remember(
                HistoryMessage(
                    "user",
                    f"[The user shared an image. Simple image analysis, not real vision, says: {note}]",
                    item_id,
                )
            )
        return item_id

    # ------------------------------------------------------------------ responses

    def _prompt(self, instructions: str | None, pending_user: str | None = None) -> list[dict[str, str]]:
        system = instructions or self.config.instructions or self._backend.options.instructions
        messages = [{"role": m.role, "content": m.content} for m in self._history]
        if pending_user is not None:
            messages.append({"role": "user", "content": pending_user})
        if self._frame_note and messages and messages[-1]["role"] == "user":
            messages[-1]["content"] = (
                f"[Camera frame, described by simple image analysis, not real vision: {self._frame_note}]\n"
                + messages[-1]["content"]
            )
        llm = self._backend.llm
        budget = self._backend.options.max_prompt_tokens - self.config.max_output_tokens
        while len(messages) > 1 and sum(llm.count_tokens(m["content"]) + 4 for m in messages) > budget:
            messages.pop(0)
        return [{"role": "system", "content": system}, *messages]

    async def create_response(
        self,
        *,
        instructions: str | None = None,
        output_audio: bool | None = None,
        max_output_tokens: int | None = None,
    ) -> str:
        self._drop_held()
        if self._response is not None:
            raise ResponseActiveError(
                f"conversation already has an active response {self._response.response_id}"
            )
        cfg = self.config
        if output_audio is not None or max_output_tokens is not None:
            cfg = cfg.model_copy(
                update={
                    "output_audio": cfg.output_audio if output_audio is None else output_audio,
                    "max_output_tokens": max_output_tokens or cfg.max_output_tokens,
                }
            )
        resp = _Response(new_id("resp"), new_id("item"), cfg.output_audio)
        self._start_response(resp, self._prompt(instructions), cfg)
        return resp.response_id

    def _start_response(
        self, resp: _Response, messages: list[dict[str, str]], cfg: ConversationConfig | None = None
    ) -> None:
        self._response = resp
        self._emit_for(resp, ResponseStarted(resp.response_id, resp.item_id, resp.output_audio))
        self._spawn(self._run_response(resp, messages, cfg or self.config))

    async def _run_response(
        self, resp: _Response, messages: list[dict[str, str]], cfg: ConversationConfig
    ) -> None:
        backend = self._backend
        segments: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        # Audio the listener has not heard yet, as the TTS thread produces it: when it runs low
        # the chunker stops waiting for a sentence end (no gap after the short first piece).
        spoken = {"first": None, "seconds": 0.0}

        def hurry() -> bool:
            first = spoken["first"]
            return first is not None and spoken["seconds"] - (time.monotonic() - first) < HURRY_AHEAD_S

        chunker = SpeechChunker(first_words=backend.options.first_chunk_words, hurry=hurry)
        loop = self._loop
        # While the first piece is being synthesised the LLM waits: on two cores the two
        # stages would otherwise halve each other's speed exactly when latency matters most.
        llm_may_run = threading.Event()
        llm_may_run.set()
        first_piece = [backend.options.tts_first_priority and resp.output_audio]

        def on_text(delta: str) -> None:  # LLM thread
            loop.call_soon_threadsafe(self._emit_text, resp, delta)
            if resp.output_audio:
                for piece in chunker.push(delta):
                    if first_piece[0]:
                        first_piece[0] = False
                        llm_may_run.clear()
                    segments.put(piece)

        def before_step() -> None:
            llm_may_run.wait(timeout=2.0)

        def run_llm():
            try:
                return backend.llm.generate(
                    messages, self._kv, on_text, resp.cancel,
                    max_tokens=cfg.max_output_tokens, temperature=cfg.temperature,
                    before_step=before_step,
                )
            finally:
                if resp.output_audio:
                    for piece in chunker.flush():
                        segments.put(piece)
                    segments.put(None)

        chunk_samples = OUTPUT_RATE * backend.options.audio_chunk_ms // 1000

        def run_tts() -> None:
            while True:
                try:
                    # A timeout, not a plain get(): if the LLM job never ran (its future was
                    # cancelled while queued) no end marker comes, and this thread must not
                    # wait forever and block every later reply's synthesis.
                    text = segments.get(timeout=0.25)
                except queue.Empty:
                    if resp.cancel.is_set():
                        return
                    continue
                if text is None or resp.cancel.is_set():
                    return
                seg = _Segment(text)
                index = len(resp.segments)
                resp.segments.append(seg)
                try:
                    for pcm in backend.tts.synthesize(text, cfg.speed):
                        if resp.cancel.is_set():
                            return
                        seg.total_samples += len(pcm) // 2
                        if spoken["first"] is None:
                            spoken["first"] = time.monotonic()
                        spoken["seconds"] += len(pcm) / 2 / OUTPUT_RATE
                        for off in range(0, len(pcm), chunk_samples * 2):
                            loop.call_soon_threadsafe(
                                self._emit_audio, resp, index, pcm[off : off + chunk_samples * 2]
                            )
                finally:
                    llm_may_run.set()

        status, reason = "completed", None
        try:
            llm_future = loop.run_in_executor(backend.llm_pool, run_llm)
            tts_future = loop.run_in_executor(backend.tts_pool, run_tts) if resp.output_audio else None
            stats = await llm_future
            resp.output_tokens = stats.output_tokens
            resp.prompt_tokens = stats.prompt_tokens
            self.stats.last_prefill_ms = stats.prefill_ms
            self.stats.last_reused_tokens = stats.reused_tokens
            if tts_future is not None:
                await tts_future
            if stats.stop_reason == "length":
                status, reason = "incomplete", "max_output_tokens"
        except asyncio.CancelledError:
            resp.cancel.set()  # session closing: stop the threads even if a job never started
            raise
        except Exception as exc:  # one failed reply must not end the session
            log.exception("response failed")
            resp.cancel.set()
            status, reason = "failed", "server_error"
            self._emit_for(resp, ConversationError("response_failed", f"response failed: {exc}"))
        # Let queued call_soon_threadsafe emissions land before the final event.
        await asyncio.sleep(0)
        if resp.cancelled:
            if resp.cancel_at is not None:
                self.stats.last_cancel_stop_ms = (time.perf_counter() - resp.cancel_at) * 1000
            return
        self._finish(resp, status, reason, resp.text)

    def _finish(self, resp: _Response, status: str, reason: str | None, history_text: str) -> None:
        if resp.held:
            resp.pending_finish = (status, reason, history_text)
            return
        if self._response is resp:
            self._response = None
        self._past_segments[resp.item_id] = resp.segments
        while len(self._past_segments) > 8:
            self._past_segments.pop(next(iter(self._past_segments)))
        if history_text.strip():
            self._remember(HistoryMessage("assistant", history_text.strip(), resp.item_id))
        self._emit_for(
            resp,
            ResponseDone(
                resp.response_id, resp.item_id, status, reason, resp.text, resp.audio_ms, resp.output_tokens,
                resp.prompt_tokens,
            )
        )

    def _emit_text(self, resp: _Response, delta: str) -> None:
        if resp.cancelled:
            return
        resp.text += delta
        self._emit_for(resp, TextDelta(resp.response_id, resp.item_id, delta))

    def _emit_audio(self, resp: _Response, index: int, pcm: bytes) -> None:
        if resp.cancelled:
            return
        n = len(pcm) // 2
        resp.audio_samples += n
        resp.segments[index].emitted_samples += n
        self._emit_for(resp, AudioChunk(resp.response_id, resp.item_id, pcm, OUTPUT_RATE))

    async def cancel_response(self, reason: str = "client_cancelled") -> CancelResult:
        resp = self._response
        if resp is None or resp.held:
            raise NoActiveResponseError("there is no active response to cancel")
        resp.cancel_at = time.perf_counter()
        resp.cancelled = True
        resp.cancel.set()
        heard = _spoken_text(resp.segments, resp.audio_samples) if resp.output_audio else resp.text
        self._finish(resp, "cancelled", reason, heard)
        return CancelResult(resp.response_id, resp.item_id, resp.text, resp.audio_ms)

    def truncate(self, item_id: str, audio_end_ms: int) -> str:
        segments = self._past_segments.get(item_id)
        message = next((m for m in self._history if m.item_id == item_id), None)
        if message is None or message.role != "assistant":
            raise InvalidTextError(f"no assistant item {item_id!r} in the conversation", param="item_id")
        if segments is None:
            return message.content
        emitted = sum(s.emitted_samples for s in segments)
        if audio_end_ms < 0 or audio_end_ms * OUTPUT_RATE // 1000 > emitted + OUTPUT_RATE // 50:
            raise InvalidAudioError(
                f"audio_end_ms {audio_end_ms} is beyond the {emitted * 1000 // OUTPUT_RATE} ms of audio sent",
                param="audio_end_ms",
            )
        kept = _spoken_text(segments, audio_end_ms * OUTPUT_RATE // 1000)
        if kept.strip():
            message.content = kept.strip()
        else:
            self._history.remove(message)
        return kept.strip()

    async def wait_idle(self) -> None:
        """Wait for background work (transcriptions, replies) to finish; for tests and benches."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        if self._closed:
            return
        self._drop_held()
        if self._response is not None:
            await self.cancel_response("session_closed")
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self._queue.put_nowait(None)
        # The KV cache is ~45 MB and this conversation sits in reference cycles, so it would live
        # until a full GC: under steady load the worker grew by one cache per session between
        # collections (soak test). Queued behind any generation still finishing on the LLM thread.
        try:
            self._backend.llm_pool.submit(self._kv.release)
        except RuntimeError:  # the backend is shutting down
            self._kv.release()


def _compression_ratio(text: str) -> float:
    """gzip ratio of the text, as Whisper reports it (high = repetitive, likely hallucinated)."""
    import zlib

    raw = text.encode("utf-8")
    return round(len(raw) / max(1, len(zlib.compress(raw))), 3)


def _spoken_text(segments: list[_Segment], samples: int) -> str:
    """Text of the reply up to ``samples`` of audio: whole pieces, then a share of the words."""
    words: list[str] = []
    left = samples
    for seg in segments:
        if seg.total_samples <= 0:
            break
        if left >= seg.total_samples:
            words.extend(seg.text.split())
            left -= seg.total_samples
            continue
        seg_words = seg.text.split()
        words.extend(seg_words[: int(len(seg_words) * left / seg.total_samples)])
        break
    return " ".join(words)
