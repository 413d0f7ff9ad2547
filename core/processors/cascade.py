"""The default backend: an embedded CPU cascade Silero VAD -> Whisper -> SmolLM2 -> Piper.

Streaming is chunked end to end: LLM text streams into ``SpeechChunker``; each speakable piece
goes to the TTS thread while the LLM keeps generating, and audio leaves in ``audio_chunk_ms``
pieces as soon as Piper returns it. The model reads text, so the conversation core transcribes
each turn first (``transcript_first``), speculatively while the VAD waits out the silence
hangover, and may start the reply then (``speculative_reply``). Model work runs on per-stage
single-thread pools; the event loop only routes events.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.audio import OUTPUT_RATE
from core.cascade.chunker import SpeechChunker
from core.cascade.llm import GenerationStats, KvState
from core.cascade.stage_threads import live_stage_threads
from core.cascade.tool_calls import ToolGrammar, grammar_error, parse_choice
from core.cascade.voice_prompt import DEFAULT_INSTRUCTIONS, generation_settings
from core.conversation import ReplyJob, ReplyStats
from core.conversation.audio_input import VAD_RATE
from core.conversation.end_of_turn import HeardText, MessageEnd
from core.errors import BackendNotLoadedError, ContextLengthError, InvalidInputError, InvalidTextError
from core.processors.base import (
    Backend,
    Capability,
    LoadProgress,
    ModelCapabilities,
    ModelThreads,
    ProgressCallback,
    Transcription,
    TranscriptSegment,
)
from core.cascade.chat_completions import check_base_url, until_cancelled

T = TypeVar("T")
log = logging.getLogger(__name__)

HURRY_AHEAD_S = 1.2  # less audio than this ahead of the listener: cut the next piece early


class CascadeOptions(BaseModel):
    """``backend_options`` for ``cascade``; every model path defaults to the bundled package."""

    model_config = ConfigDict(extra="forbid")

    data_dir: str = "data"
    whisper_model_path: str | None = None
    llm_model_path: str | None = None
    voice_path: str | None = None
    instructions: str = DEFAULT_INSTRUCTIONS
    # SmolLM2's threads for a request nobody listens beside (REST), and every stage's on a machine
    # of more than two CPUs unless ``live_threads`` says otherwise.
    threads: int = Field(2, ge=1, le=64)
    # Whisper's and SmolLM2's threads while a session listens (None: ``live_stage_threads``).
    live_threads: int | None = Field(None, ge=1, le=64)
    quantize_lm_head: bool = True
    llm_dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    first_chunk_words: int = Field(2, ge=1, le=20)
    tts_first_priority: bool = True
    audio_chunk_ms: int = Field(100, ge=20, le=1000)
    no_speech_threshold: float = Field(0.6, ge=0.0, le=1.0)
    max_prompt_tokens: int = Field(1536, ge=128, le=8192)
    speculative_reply: bool = True
    warm_up: bool = True
    # Read words by meaning (core/cascade/words_meaning.py: ~300 MB more, ~20 s to fit on the first
    # start, then cached in data_dir): over a reply (off: the judge's word list) and at a pause
    # (semantic_vad; off: its score alone).
    words_meaning: bool = True
    # The LLM stage on an OpenAI-compatible server instead of the embedded SmolLM2
    # (VAD, Whisper and Piper stay local; SmolLM2 still scores turns for semantic_vad).
    llm_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://localhost:11434/v1")
    llm_model: str | None = Field(None, min_length=1, description="model name; default: the first the server lists")
    llm_api_key: str | None = Field(None, description="sent as 'Authorization: Bearer ...'")
    llm_headers: dict[str, str] = Field(default_factory=dict, description="extra HTTP headers on every request")
    llm_extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into every request body")
    llm_connect_timeout_s: float = Field(5.0, gt=0, le=600)
    llm_read_timeout_s: float = Field(20.0, gt=0, le=3600, description="longest wait for the next streamed piece")
    llm_wait_for_server_s: float = Field(300.0, ge=0, description="start-up waits this long for GET /models")

    @field_validator("llm_url")
    @classmethod
    def _llm_url(cls, value: str | None) -> str | None:
        return None if value is None else check_base_url(value, "http://localhost:11434/v1")

    @model_validator(mode="after")
    def _llm_pairs(self) -> CascadeOptions:
        if self.llm_url is None and (self.llm_model or self.llm_api_key or self.llm_headers or self.llm_extra_body):
            raise ValueError("llm_model, llm_api_key, llm_headers and llm_extra_body need llm_url")
        return self


class CascadeBackend(Backend):
    name = "cascade"
    capabilities = ModelCapabilities.of(
        *Capability,
        transcript_first=True,  # SmolLM2 reads text: every turn is transcribed before the reply
        supports_tools=True,  # the model picks call or answer under a grammar (core/cascade/tool_calls.py)
    )

    def __init__(self, options: CascadeOptions | None = None, threads: ModelThreads | None = None) -> None:
        super().__init__(threads)
        self.options = options or CascadeOptions()
        self.live_threads = live_stage_threads(self.options.live_threads, self.options.threads)
        self.remote_llm = None
        if self.options.llm_url:
            from core.cascade.remote_llm import RemoteLlm

            o = self.options
            self.remote_llm = RemoteLlm(o.llm_url, o.llm_model, api_key=o.llm_api_key, headers=o.llm_headers,
                                        extra_body=o.llm_extra_body, connect_timeout_s=o.llm_connect_timeout_s,
                                        read_timeout_s=o.llm_read_timeout_s)
        # semantic_vad: the embedded reply's prefill yields SmolLM2's end-of-message probability;
        # a remote LLM's does not, so SmolLM2 scores turns on its own pass then.
        self.capabilities = replace(type(self).capabilities, speculative_reply=self.options.speculative_reply,
                                    scores_turn_in_reply=self.remote_llm is None)
        self.vad_model = None
        self.asr = None
        self.llm = None
        self.tts = None
        self.describer = None
        self.turn_scorer = None
        self.overlap_meaning = None
        self.turn_meaning = None
        self._loaded = False
        # One thread per stage: stages overlap with each other, never with themselves.
        self.io_pool = self.threads.pool("vad", 2)
        self.asr_pool = self.transcribe_pool = self.threads.pool("asr")
        self.llm_pool = self.threads.pool("llm")
        self.tts_pool = self.threads.pool("tts")
        self.load_seconds: dict[str, float] = {}

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self, progress: ProgressCallback | None = None) -> None:
        from core.cascade.asr import WhisperAsr
        from core.cascade.llm import SmolLm
        from core.cascade.tts import PiperTts
        from core.cascade.vision import FrameDescriber
        from core.conversation.vad import SileroModel

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
        self.asr = timed("asr", 0.05, lambda: WhisperAsr(opts.whisper_model_path, self.live_threads))
        self.tts = timed("tts", 0.15, lambda: PiperTts(opts.voice_path))
        self.describer = timed("vision", 0.25, FrameDescriber)
        self.llm = timed(
            "llm",
            0.3,
            lambda: self._on_llm_thread(lambda: SmolLm(
                Path(opts.data_dir),
                opts.llm_model_path,
                threads=self.live_threads,  # a REST request switches to ``threads`` (``_llm_threads``)
                quantize_head=opts.quantize_lm_head,
                dtype=opts.llm_dtype,
                progress=lambda d: report("llm", 0.35, d),
            )),
        )
        from core.cascade.turn_scorer import EndOfMessageScorer

        self.turn_scorer = EndOfMessageScorer(self.llm, system=opts.instructions)
        if opts.words_meaning:
            from core.cascade.words_meaning import WordsReader, overlap_head, turn_head

            models = Path(opts.data_dir) / "models"
            reader = timed("words_meaning", 0.8, lambda: WordsReader(self.llm.path))
            self.overlap_meaning = timed("overlap_meaning", 0.82, lambda: overlap_head(reader, models))
            self.turn_meaning = timed("turn_meaning", 0.84, lambda: turn_head(reader, models))
        if self.remote_llm is not None:
            timed("llm_server", 0.85, lambda: self.remote_llm.wait_until_up(
                opts.llm_wait_for_server_s, lambda d: report("llm_server", 0.85, d)))
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
        if self.overlap_meaning is not None:
            self.overlap_meaning.probability("Okay.")
            self.turn_meaning.probability("Hello there")

        def warm_llm() -> None:
            self.llm.generate(
                [{"role": "system", "content": self.options.instructions}, {"role": "user", "content": "Hi"}],
                KvState(),
                lambda _t: None,
                threading.Event(),
                max_tokens=2,
            )
            self.turn_scorer.probability("Hi")

        self._on_llm_thread(warm_llm)

    def _on_llm_thread(self, fn: Callable[[], T]) -> T:
        """Run torch work on the one LLM thread, as every turn's LLM work runs.

        torch's OpenMP runtime (libgomp) keeps a thread team per calling thread. A second team
        means more OpenMP threads than cores, and libgomp then puts its workers to sleep between
        parallel regions instead of spinning: each decode step paid a wake-up per operator and
        took ~1.7x as long (19 -> 33 ms on two cores).
        """
        return self.llm_pool.submit(fn).result()

    def resolve_voice(self, voice: str | None) -> str | None:
        return None  # one fixed Piper voice (``voice_path``); the session reports its name

    def health_detail(self) -> dict[str, Any]:
        return {"upstream": self.remote_llm.server.health()} if self.remote_llm is not None else {}

    def close(self) -> None:
        super().close()  # the stage threads are the runtime's (``ModelThreads``)

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


    # ------------------------------------------------------------------ for the conversation core

    def read_ahead(self, job: ReplyJob) -> None:
        """The embedded SmolLM2 reads the words heard so far on its own thread, queued like a
        reply (a reply with tools prompts differently; a remote LLM keeps no cache here)."""
        if self.remote_llm is not None or self.llm is None or job.tools:
            return

        def read() -> None:
            try:
                self.llm.use_threads(self.live_threads)
                n = self.llm.read_ahead(self._prompt(job), job.state, job.cancel)
                log.debug("read ahead %d tokens", n)
            except Exception:  # best effort: the reply prefills them itself
                log.exception("reading ahead failed")

        try:
            self.llm_pool.submit(read)
        except RuntimeError:  # the backend is shutting down
            pass

    def transcribe_turn(self, audio: np.ndarray) -> str:
        """Whisper's transcript of one utterance ('' for noise or no words), with its confidence
        in the last word (``HeardText``, for semantic_vad)."""
        result = self.asr.transcribe(audio)
        text = result.text.strip()
        if not any(ch.isalnum() for ch in text):
            return ""
        if result.no_speech_prob > self.options.no_speech_threshold and result.avg_logprob < -0.7:
            return ""
        return HeardText(text, result.last_word_confidence)

    def transcribe_glance(self, audio: np.ndarray) -> str:
        return self.asr.glance(audio)

    def interruption_probability(self, words: str) -> float | None:
        return None if self.overlap_meaning is None else self.overlap_meaning.probability(words)

    def completion_probability(self, words: str) -> float | None:
        return None if self.turn_meaning is None else self.turn_meaning.probability(words)

    @property
    def reads_completion(self) -> bool:
        return self.turn_meaning is not None

    def end_of_message_probability(self, text: str) -> MessageEnd:
        return self.turn_scorer.message_end(text)

    @property
    def turn_scorer_pool(self) -> concurrent.futures.Executor:
        return self.llm_pool  # the scorer is the LLM: queued ahead of the reply it may release

    def prepare_image(self, data: bytes) -> str:
        return self.describer.describe(data)

    def image_text(self, prepared: Any) -> str:
        return f"[The user shared an image. Simple image analysis, not real vision, says: {prepared}]"

    @staticmethod
    def frame_note(description: str) -> str:
        return f"[Camera frame, described by simple image analysis, not real vision: {description}]"

    def new_model_state(self) -> KvState:
        return KvState()

    def release_model_state(self, state: KvState) -> None:
        # The KV cache is ~45 MB and a closed conversation sits in reference cycles, so it would
        # live until a full GC: under steady load the worker grew by one cache per session
        # between collections (soak test). Queued behind any generation still on the LLM thread.
        try:
            self.llm_pool.submit(state.release)
        except RuntimeError:  # the backend is shutting down
            state.release()

    def _prompt(self, job: ReplyJob, system: str | None = None) -> list[dict[str, str]]:
        """The chat prompt: system, then the history's text (the latest camera frame's note goes
        with the last user turn), oldest turns dropped to fit ``max_prompt_tokens``. Function
        calls and their results are written out as text (a small model has no tool role)."""
        messages = [m for m in (_as_message(i, job.items) for i in job.items) if m["content"]]
        if job.frames and messages and messages[-1]["role"] == "user":
            messages[-1]["content"] = self.frame_note(job.frames[-1]) + "\n" + messages[-1]["content"]
        budget = self.options.max_prompt_tokens - job.config.max_output_tokens
        return [{"role": "system", "content": job.system if system is None else system},
                *self._newest_that_fit(messages, budget)]

    def _newest_that_fit(self, messages: list[dict[str, str]], budget: int) -> list[dict[str, str]]:
        """The longest run of newest messages whose tokens (+4 each for the template) fit
        ``budget``; the last message always (even alone over it). Each message is tokenized at
        most once, newest first, and none older than the first that does not fit: linear in
        what is kept (256 messages of 20,000 characters took 225 s when every drop re-counted
        them all)."""
        kept: list[dict[str, str]] = []
        total = 0
        for message in reversed(messages):
            cost = self.llm.count_tokens(message["content"]) + 4
            if kept and total + cost > budget:
                break
            kept.append(message)
            total += cost
        kept.reverse()
        return kept

    # Truncation: the cascade allows its prompt and reply ``max_prompt_tokens`` (1536 by default, under
    # SmolLM2's 2048: prefill time on a CPU), counted with SmolLM2's tokenizer (also for an ``llm_url``
    # server, whose own is unknown). Images are text notes, and speech is transcribed first.
    image_tokens = 0
    audio_tokens_per_s = 0.0
    message_tokens = 6  # SmolLM2's ChatML: <|im_start|>, the role, newlines, <|im_end|>

    @property
    def context_tokens(self) -> int:
        return self.options.max_prompt_tokens

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text) if self.llm is not None else super().count_tokens(text)

    def check_context(self, system: str, last_message: str) -> None:
        if self.remote_llm is not None or self.llm is None:
            return  # the LLM server judges its own context
        needed = len(self.llm.prompt_tokens([{"role": "system", "content": system},
                                             {"role": "user", "content": last_message}]))
        if needed >= self.llm.max_context:
            raise ContextLengthError(
                f"This model's maximum context length is {self.llm.max_context} tokens. However, the system "
                f"prompt and the last message alone come to {needed} tokens. Please shorten the last message.",
                param="messages")

    def _tool_step(self, job: ReplyJob) -> bool:
        """LLM thread: let the model call a function or choose to answer; True if it called.
        With ``tool_choice: "auto"`` the choice is the model's likelihood of each candidate start
        (``tool_calls.choose_tool``: few-shot examples, calibrated against an empty message);
        the arguments are then greedy under the chosen tool's grammar. After a function's result
        the reply answers (it does not call again)."""
        if not job.tools or (job.items and job.items[-1].type == "function_call_output"
                             and job.tool_choice == "auto"):
            return False
        from core.cascade.tool_calls import choose_tool, tool_prompt

        required = job.tool_choice != "auto"
        messages, fixed = tool_prompt(self._prompt(job)[1:], job.tools, required)
        tools = job.tools
        if not required:
            name, cache, tokens = choose_tool(self.llm, messages, job.tools, fixed)
            if name is None or job.cancelled:
                return False
            tools = [t for t in job.tools if t.name == name]
            job.state.cache, job.state.tokens = cache, tokens  # the arguments go on from this prefill
        grammar = ToolGrammar(self.llm.ll_tokenizer(), tools, True)
        pieces: list[str] = []
        stats = self.llm.generate(messages, job.state, pieces.append, job.cancel, max_tokens=256, constraint=grammar)
        choice = parse_choice("".join(pieces))
        if choice is None or job.cancelled or stats.stop_reason != "stop":
            return False  # out of tokens mid-call: an unfinished call is never sent
        job.function_call(*choice)
        return True

    def check_tools(self, tools: list) -> None:
        """Refuse at ``session.update`` a schema the grammar cannot enforce (not mid-reply).
        A remote LLM server takes any schema: it is passed through."""
        error = grammar_error(tools) if tools and self.remote_llm is None else None
        if error:
            raise InvalidInputError(f"tools: a parameters schema cannot be enforced: {error}", param="tools")

    def _llm_threads(self, job: ReplyJob) -> int:
        """A session that listens hears (VAD, Whisper's glances) while SmolLM2 replies; a REST
        request has the cores to itself."""
        return self.live_threads if job.config.turn_detection is not None else self.options.threads

    async def generate_reply(self, job: ReplyJob) -> ReplyStats:
        """LLM and TTS on their own threads: speakable pieces go to Piper while SmolLM2 goes on."""
        loop = asyncio.get_running_loop()
        cfg = job.config
        segments: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        # Audio the listener has not heard yet, as the TTS thread produces it: when it runs low
        # the chunker stops waiting for a sentence end (no gap after the short first piece).
        spoken = {"first": None, "seconds": 0.0}

        def hurry() -> bool:
            first = spoken["first"]
            return first is not None and spoken["seconds"] - (time.monotonic() - first) < HURRY_AHEAD_S

        chunker = SpeechChunker(first_words=self.options.first_chunk_words, hurry=hurry)
        # While the first piece is being synthesised the LLM waits: on two cores the two
        # stages would otherwise halve each other's speed exactly when latency matters most.
        llm_may_run = threading.Event()
        llm_may_run.set()
        first_piece = [self.options.tts_first_priority and job.output_audio]

        def on_text(delta: str) -> None:  # LLM thread
            job.text(delta)
            if job.output_audio:
                for piece in chunker.push(delta):
                    if first_piece[0]:
                        first_piece[0] = False
                        llm_may_run.clear()
                    segments.put(piece)

        def end_text() -> None:
            if job.output_audio:
                for piece in chunker.flush():
                    segments.put(piece)
                segments.put(None)

        def run_llm():
            try:
                self.llm.use_threads(self._llm_threads(job))
                if job.wants_end_of_message and job.tools and job.items:
                    job.end_of_message(self.turn_scorer.message_end(job.items[-1].text))  # before the tool step
                if self._tool_step(job):
                    return GenerationStats(stop_reason="stop")
                return self.llm.generate(
                    self._prompt(job), job.state, on_text, job.cancel,
                    **generation_settings(cfg.temperature, cfg.max_output_tokens, spoken=job.output_audio),
                    before_step=lambda: llm_may_run.wait(timeout=2.0),
                    end_of_message=job.end_of_message if job.wants_end_of_message else None,
                )
            finally:
                end_text()

        def run_tts() -> None:
            while True:
                try:
                    # A timeout, not a plain get(): if the LLM job never ran (its future was
                    # cancelled while queued) no end marker comes, and this thread must not
                    # wait forever and block every later reply's synthesis.
                    text = segments.get(timeout=0.25)
                except queue.Empty:
                    if job.cancelled:
                        return
                    continue
                if text is None or job.cancelled:
                    return
                job.begin_segment(text)
                try:
                    for pcm in self.tts.synthesize(text, cfg.speed):
                        if job.cancelled:
                            return
                        if spoken["first"] is None:
                            spoken["first"] = time.monotonic()
                        spoken["seconds"] += len(pcm) / 2 / OUTPUT_RATE
                        job.audio_pcm16(pcm)
                    job.end_segment()
                finally:
                    llm_may_run.set()

        if self.remote_llm is not None:
            return await self._remote_reply(job, on_text, end_text, run_tts)
        llm_future = loop.run_in_executor(self.llm_pool, run_llm)
        tts_future = loop.run_in_executor(self.tts_pool, run_tts) if job.output_audio else None
        stats = await llm_future
        if tts_future is not None:
            await tts_future
        return ReplyStats(stats.output_tokens, stats.prompt_tokens,
                          "length" if stats.stop_reason == "length" else "stop",
                          stats.prefill_ms, stats.reused_tokens)

    async def _remote_reply(self, job: ReplyJob, on_text, end_text, run_tts) -> ReplyStats:
        """The reply's text streams from the LLM server (in the event loop: no model thread to
        wait on); a cancel drops the HTTP stream at once, and Piper speaks what has come."""
        loop = asyncio.get_running_loop()
        tts_future = loop.run_in_executor(self.tts_pool, run_tts) if job.output_audio else None
        try:
            stats = await until_cancelled(job, self.remote_llm.reply(job, on_text, self.frame_note))
        finally:
            end_text()
        if tts_future is not None:
            await tts_future
        return stats


def _as_message(item, items) -> dict[str, str]:
    """A history item as a chat message. A call is not written out (a small model copies the
    form into its answer); its result, with the call, goes in as a note in the user's turn."""
    if item.type == "function_call":
        return {"role": "assistant", "content": ""}
    if item.type == "function_call_output":
        call = next((i for i in items if i.type == "function_call" and i.call_id == item.call_id), None)
        what = f"{call.name}({call.arguments})" if call is not None else "a function"
        return {"role": "user", "content": f"[{what} returned: {item.output}]"}
    return {"role": item.role, "content": item.text}


def _compression_ratio(text: str) -> float:
    """gzip ratio of the text, as Whisper reports it (high = repetitive, likely hallucinated)."""
    import zlib

    raw = text.encode("utf-8")
    return round(len(raw) / max(1, len(zlib.compress(raw))), 3)
