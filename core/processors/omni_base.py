"""What the omni model backends share (Qwen-Omni, MiniCPM-o, a remote engine): their options,
one model thread, Silero VAD for turn detection, voices, and image decoding.

The conversation itself (history, turns, barge-in, responses) is the core's
(``core/conversation/``); an omni backend supplies ``run_model(job)``: given the history, it
streams text deltas and speech (float samples at any rate, grouped in *segments*, each the audio
of one known piece of text) through the ``ReplyJob``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from pathlib import Path
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.conversation import ReplyJob, ReplyStats
from core.errors import InvalidImageError
from core.processors.base import Backend, LoadProgress, ModelThreads, ProgressCallback

log = logging.getLogger(__name__)

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
    glance_asr: bool = Field(True, description="load the bundled Whisper (CPU) to read the first words of "
                             "speech over a reply: a backchannel does not interrupt (without it the "
                             "voice's length decides)")
    overlap_meaning: bool = Field(True, description="with glance_asr, read the glanced words by meaning "
                                  "(core/cascade/words_meaning.py on the bundled SmolLM2, CPU); off: a word list")
    context_tokens: int = Field(32768, ge=1024, le=1_048_576, description="the model's context window in "
                                "tokens: a reply's prompt and output share it (session truncation)")


# --------------------------------------------------------------------------- backend


class OmniBackendBase(Backend):
    """Threads, VAD and options shared by the omni backends; subclasses load their model.

    ``model_pool`` (one thread, ``<name>-model``) owns the model: generations and transcriptions queue there, so
    one slow request never runs two forward passes at once on the same weights.
    """

    options: OmniOptions

    def __init__(self, options: OmniOptions, threads: ModelThreads | None = None) -> None:
        super().__init__(threads)
        self.options = options
        self.capabilities = replace(type(self).capabilities, max_frames=options.max_frames,
                                    transcribes_input=options.transcribe_input)
        self._loaded = False
        self.model_pool = self.threads.pool(f"{self.name}-model")
        self.io_pool = self.threads.pool(f"{self.name}-io", 2)
        self.transcribe_pool = self.model_pool
        self.load_seconds: dict[str, float] = {}
        self._glancer = None  # Whisper for the overlap judge (``glance_asr``)
        self._meaning = None  # its reader by meaning (``overlap_meaning``)
        self._glance_pool = None

    @property
    def loaded(self) -> bool:
        return self._loaded

    @property
    def context_tokens(self) -> int:
        """Qwen2.5-Omni's thinker and MiniCPM-o 2.6's Qwen2.5 LLM take 32k tokens (the default)."""
        return self.options.context_tokens

    def report(self, progress: ProgressCallback | None, stage: str, fraction: float, detail: str = "") -> None:
        log.info("load %s %.0f%% %s", stage, fraction * 100, detail)
        if progress:
            progress(LoadProgress(stage, fraction, detail))

    def load(self, progress: ProgressCallback | None = None) -> None:
        from core.conversation.vad import SileroModel

        t0 = time.perf_counter()
        self.report(progress, "vad", 0.0)
        self.vad_model = SileroModel()
        self.load_seconds["vad"] = time.perf_counter() - t0
        if self.options.glance_asr:
            self._load_glancer()
        self.load_model(progress)
        self._loaded = True
        self.report(progress, "ready", 1.0)

    def _load_glancer(self) -> None:
        """Whisper from the bundled package on one CPU thread of its own (~30 ms a glance)."""
        try:
            from core.cascade.asr import WhisperAsr

            t0 = time.perf_counter()
            self._glancer = WhisperAsr(cpu_threads=1)
            self._glance_pool = self.threads.pool(f"{self.name}-glance")
            self.load_seconds["glance_asr"] = time.perf_counter() - t0
        except Exception as exc:  # the judge then goes by the voice's length
            log.warning("no Whisper for glances at speech over a reply (%s): the voice's length decides", exc)
            return
        if self.options.overlap_meaning:
            self._load_meaning()

    def _load_meaning(self) -> None:
        """The cascade's meaning reader for the glanced words, on the bundled SmolLM2 (CPU)."""
        try:
            from core.cascade.llm import converted_model
            from core.cascade.words_meaning import WordsReader, overlap_head

            t0 = time.perf_counter()
            model = converted_model(Path(self.options.data_dir))
            self._meaning = overlap_head(WordsReader(model), model.parent)
            self.load_seconds["overlap_meaning"] = time.perf_counter() - t0
        except Exception as exc:  # the judge then uses its word list
            log.warning("no meaning reader for speech over a reply (%s): the judge's word list decides", exc)

    @property
    def glance_pool(self) -> Any:
        return self._glance_pool or self.transcribe_pool

    def transcribe_glance(self, audio: Any) -> str | None:
        return None if self._glancer is None else self._glancer.glance(audio)

    def interruption_probability(self, words: str) -> float | None:
        return None if self._meaning is None else self._meaning.probability(words)

    def load_model(self, progress: ProgressCallback | None) -> None:
        raise NotImplementedError

    def run_model(self, job: ReplyJob) -> ReplyStats:
        """Blocking generation in ``model_pool``; see ``ReplyJob``."""
        raise NotImplementedError

    async def generate_reply(self, job: ReplyJob) -> ReplyStats:
        """Backends that talk to a server override this and stay on the loop."""
        return await asyncio.get_running_loop().run_in_executor(self.model_pool, self.run_model, job)

    def prepare_image(self, data: bytes) -> Any:
        return decode_image(data, self.options.max_image_side)

    def close(self) -> None:
        super().close()  # the model and io threads are the runtime's (``ModelThreads``)


# --------------------------------------------------------------------------- helpers


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
