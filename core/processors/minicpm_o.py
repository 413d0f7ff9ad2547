"""MiniCPM-o 4.5 through its own remote code (``trust_remote_code``), from a local model directory.

Two ways to talk, both on the same loaded model:

* Turn-based and ``server_vad`` (our VAD ends the turn): each message is given to the model's
  ``streaming_prefill`` (one message per call, as it requires), then ``streaming_generate``
  yields ``(waveform chunk, text)`` pairs: each pair is one segment, so truncation is exact.
  The model keeps its KV cache between turns; the history is re-prefilled only when it was
  edited (truncate, delete), a reply was cancelled, or another conversation used the model.
* ``model_duplex`` (a turn-detection type of its own): the model's duplex mode
  (``as_duplex()``). Audio goes in one-second units (``streaming_prefill`` with the latest camera
  frame), and after each unit ``streaming_generate`` says whether the model listens or speaks.
  The model decides when to talk and when its turn ends; replies open and close on its word.
  Our VAD still reports speech start/stop, but commits nothing.

Method names and signatures follow the model's remote code (``modeling_minicpmo.py``:
``init_tts``, ``reset_session``, ``init_token2wav_cache``, ``streaming_prefill``,
``streaming_generate``, ``as_duplex`` -> ``prepare`` / ``streaming_prefill`` /
``streaming_generate`` / ``set_session_stop``). What could not be verified without the weights
is listed in docs/backends.md.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from core.conversation import ConversationError, ConversationParts, Item, ReplyJob, ReplyStats
from core.conversation.audio_input import VAD_RATE
from core.conversation.turn_policy import PassesReportsOn, TurnReports
from core.errors import InvalidInputError
from core.ids import new_id
from core.processors.base import Capability, ModelCapabilities, ModelThreads, ProgressCallback
from core.processors.omni_base import (
    OmniBackendBase,
    OmniOptions,
    parse_device,
    parse_dtype,
)

log = logging.getLogger(__name__)

OUTPUT_RATE_MODEL = 24000  # MiniCPM-o's CosyVoice2-style token2wav speaks at 24 kHz
DUPLEX_PROMPT = "Streaming Omni Conversation."


class MiniCpmOOptions(OmniOptions):
    """``backend.options`` for ``minicpm_o``. Only ``model_path`` is required."""

    model_path: str = Field(description="local directory of openbmb/MiniCPM-o-4_5 (weights + remote code)")
    device: str = Field("auto", description="'auto', 'cpu', 'cuda', 'cuda:N'")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    init_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"init_vision": True, "init_audio": True, "init_tts": True},
        description="passed to from_pretrained (the model card's init_vision/init_audio/init_tts)")
    tts_float16: bool = False
    tts_timesteps: int = Field(10, ge=1, le=50)
    ref_audio: str | None = Field(None, description="WAV of the default voice (16 kHz is read at any rate)")
    voices: dict[str, str] = Field(default_factory=dict, description="voice name -> reference WAV")
    max_slice_nums: int = Field(1, ge=1, le=9, description="HD slices per image")
    enable_thinking: bool = False
    duplex_prompt: str = Field(DUPLEX_PROMPT, description="system prompt of model_duplex sessions")
    duplex_chunk_ms: int = Field(1000, ge=200, le=2000, description="audio per duplex unit (the model's CHUNK_MS)")
    duplex_kwargs: dict[str, Any] = Field(default_factory=dict, description="passed to as_duplex()")
    duplex_generate: dict[str, Any] = Field(
        default_factory=lambda: {"max_new_speak_tokens_per_chunk": 20, "decode_mode": "sampling",
                                 "temperature": 0.7, "top_k": 20, "top_p": 0.8, "listen_prob_scale": 1.0},
        description="passed to the duplex streaming_generate() each unit")

    @field_validator("model_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not (Path(value) / "config.json").is_file():
            raise ValueError(f"{value!r} has no config.json (a local model directory; hub ids are not fetched)")
        return value

    @field_validator("ref_audio")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise ValueError(f"no such file {value!r}")
        return value


class MiniCpmOBackend(OmniBackendBase):
    name = "minicpm_o"
    capabilities = ModelCapabilities.of(*Capability,
                                        turn_detection_types=("server_vad", "semantic_vad", "model_duplex"))

    def __init__(self, options: MiniCpmOOptions, threads: ModelThreads | None = None) -> None:
        super().__init__(options, threads)
        self.options: MiniCpmOOptions = options
        self.model = None
        self.duplex = None
        self.device = "cpu"
        self.references: dict[str, tuple[np.ndarray, str]] = {}  # voice -> (16 kHz samples, path)
        # Which conversation's history the model's KV cache holds (turn-based mode).
        self.session: dict[str, Any] = {"owner": None}
        self.voice_loaded: str | None = None

    def load_model(self, progress: ProgressCallback | None) -> None:
        import torch
        from transformers import AutoModel

        opts = self.options
        self.device = parse_device(opts.device)
        dtype = parse_dtype(opts.dtype)
        for name, path in ({"default": opts.ref_audio} if opts.ref_audio else {}) | opts.voices.items():
            if not Path(path).is_file():
                raise RuntimeError(f"voice {name!r}: no such file {path!r}")
            self.references[name] = (_read_wav_16k(path), path)
        self.voices = tuple(opts.voices)
        self.default_voice = self.voices[0] if self.voices else None
        self.report(progress, "model", 0.1, f"{opts.model_path} on {self.device}")
        t0 = time.perf_counter()
        model = AutoModel.from_pretrained(
            opts.model_path, trust_remote_code=True, local_files_only=True, dtype=dtype,
            attn_implementation=opts.attn_implementation, **opts.init_kwargs,
        )
        self.model = model.eval().to(self.device)
        self.load_seconds["model"] = time.perf_counter() - t0
        if opts.init_kwargs.get("init_tts", True):
            self.report(progress, "tts", 0.8)
            self.model.init_tts(streaming=True, enable_float16=opts.tts_float16, n_timesteps=opts.tts_timesteps)
        if opts.warm_up:
            with torch.inference_mode():
                self.model.reset_session(reset_token2wav_cache=True)

    def _reference(self, voice: str | None) -> tuple[np.ndarray, str] | None:
        return self.references.get(voice or "") or self.references.get("default")

    def _use_voice(self, voice: str | None) -> None:
        """Point the model's TTS at a voice's reference audio (only when it changes)."""
        ref = self._reference(voice)
        key = voice or "default"
        if ref is not None and self.voice_loaded != key:
            self.model.init_token2wav_cache(prompt_speech_16k=ref[0])
            self.voice_loaded = key

    # ------------------------------------------------------------------ turn-based

    def _content(self, item: Item) -> list:
        content: list = []
        if item.audio is not None:
            content.append(item.audio.astype(np.float32))
        content.extend(item.images)
        if item.text_besides_audio:
            content.append(item.text_besides_audio)
        return content

    def run_model(self, job: ReplyJob) -> ReplyStats:
        import torch

        model = self.model
        conv_id = id(job.owner)
        items = [i for i in job.items if self._content(i)]
        ids = [i.item_id for i in items]
        s = self.session
        reuse = (s.get("owner") == conv_id and s.get("clean") and s.get("system") == job.system
                 and ids[: len(s["items"])] == s["items"] and not job.frames)
        with torch.inference_mode():
            if not reuse:
                s.update(owner=conv_id, session_id=new_id("sess"), items=[], clean=True, system=job.system)
                model.reset_session(reset_token2wav_cache=False)
                self.voice_loaded = None
                if job.system:
                    model.streaming_prefill(session_id=s["session_id"], msgs=[{"role": "system",
                                                                                "content": [job.system]}],
                                            omni_mode=False, use_tts_template=True,
                                            enable_thinking=self.options.enable_thinking, is_last_chunk=True)
            todo = items[len(s["items"]):] if reuse else items
            for n, item in enumerate(todo):
                content = self._content(item)
                if n == len(todo) - 1 and job.frames and item.role == "user":
                    content = content + list(job.frames)
                model.streaming_prefill(
                    session_id=s["session_id"], msgs=[{"role": item.role, "content": content}], omni_mode=False,
                    max_slice_nums=self.options.max_slice_nums, use_tts_template=True,
                    enable_thinking=self.options.enable_thinking, is_last_chunk=True,
                )
            s["items"] = ids
            if job.output_audio:
                self._use_voice(job.voice)
            stream = model.streaming_generate(
                session_id=s["session_id"], generate_audio=job.output_audio,
                max_new_tokens=job.config.max_output_tokens, do_sample=job.config.temperature > 0.01,
                temperature=max(job.config.temperature, 0.01), use_tts_template=True,
                enable_thinking=self.options.enable_thinking,
            )
            pieces = 0
            try:
                for out in stream:
                    if job.cancelled:
                        break
                    wave, text = _split(out, job.output_audio)
                    if text or wave is not None:
                        pieces += 1
                    if text:
                        job.text(text)
                    if wave is not None and job.output_audio:
                        job.begin_segment(text or "")
                        job.audio(_samples(wave), OUTPUT_RATE_MODEL)
                        job.end_segment()
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        if job.cancelled:
            s["clean"] = False  # the cache holds a reply the history does not
            return ReplyStats(stop_reason="cancelled")
        s["items"] = ids + [job.item_id]
        tokens = len(getattr(model, "_streaming_generated_token_ids", None) or []) or pieces
        return ReplyStats(output_tokens=tokens)

    def forget(self, owner) -> None:
        """A conversation (``job.owner``) edited its history: its cached session is stale."""
        if self.session.get("owner") == id(owner):
            self.session["clean"] = False

    def turn_policy(self, parts: ConversationParts) -> ModelDuplexTurns:
        return ModelDuplexTurns(self, parts)

    # ------------------------------------------------------------------ duplex

    def duplex_model(self):
        if self.duplex is None:
            kwargs = {"chunk_ms": self.options.duplex_chunk_ms, **self.options.duplex_kwargs}
            self.duplex = self.model.as_duplex(**kwargs)
        return self.duplex

    def duplex_prepare(self, system: str, voice: str | None) -> None:
        duplex = self.duplex_model()
        ref = self._reference(voice)
        self.session["owner"] = None  # the duplex session owns the model's state now
        duplex.prepare(
            prefix_system_prompt=f"<|im_start|>system\n{system}\n<|audio_start|>",
            suffix_system_prompt="<|audio_end|><|im_end|>",
            ref_audio=ref[0] if ref is not None else None,
            prompt_wav_path=ref[1] if ref is not None else None,
        )

    def duplex_unit(self, audio: np.ndarray, frame) -> dict:
        import torch

        duplex = self.duplex_model()
        with torch.inference_mode():
            prefill = duplex.streaming_prefill(audio_waveform=audio, frame_list=[frame] if frame is not None else None,
                                               max_slice_nums=self.options.max_slice_nums)
            if isinstance(prefill, dict) and prefill.get("success") is False and prefill.get("reason"):
                log.debug("duplex prefill skipped: %s", prefill.get("reason"))
            return duplex.streaming_generate(**self.options.duplex_generate)

    def duplex_stop(self) -> None:
        if self.duplex is not None:
            self.duplex.set_session_stop()


class ModelDuplexTurns(PassesReportsOn):
    """MiniCPM-o's turn policy: in ``model_duplex`` the model hears every second of audio and
    decides when it speaks and when its turn ends; replies open and close on its word. The VAD's
    reports (speech started/stopped, no commits) and every other mode are the standard policy's,
    which this wraps. Also tells the backend when the conversation's history was edited (its KV
    session must be rebuilt)."""

    def __init__(self, backend: MiniCpmOBackend, parts: ConversationParts) -> None:
        self.backend = backend
        self.rt = parts.runtime
        self.replies = parts.replies
        self.standard = parts.vad_turns
        self._duplex_on = False
        self._unit_buffer = np.zeros(0, dtype=np.float32)
        self._units_pending = 0
        self._duplex_job: ReplyJob | None = None
        self._muted = False  # a cancelled duplex turn: drop its output until the model ends it
        self._last_frame = None
        self.rt.history_listeners.append(self._history_edited)

    @property
    def duplex(self) -> bool:
        td = self.rt.config.turn_detection
        return td is not None and td.type == "model_duplex"

    def _history_edited(self) -> None:
        self.backend.forget(self.replies)

    # ------------------------------------------------------------------ the standard policy's

    @property
    def report_to(self) -> TurnReports:
        return self.standard

    async def committed(self, item_id: str, segment: np.ndarray) -> None:
        await self.standard.committed(item_id, segment)

    async def respond(self) -> None:
        await self.standard.respond()

    @property
    def busy(self) -> bool:
        return self.standard.busy

    # ------------------------------------------------------------------ duplex

    def configured(self, old) -> None:
        if self.duplex and not self._duplex_on:
            self._duplex_on = True
            self._unit_buffer = np.zeros(0, dtype=np.float32)
            system = self.rt.config.instructions or self.backend.options.duplex_prompt
            self.rt.spawn(self._in_model(self.backend.duplex_prepare, system, self.rt.config.voice))
        elif not self.duplex and self._duplex_on:
            self._duplex_on = False
            self.rt.loop.run_in_executor(self.backend.model_pool, self.backend.duplex_stop)
        self.standard.configured(old)

    async def _in_model(self, fn, *args):
        return await self.rt.in_thread(self.backend.model_pool, fn, *args)

    def reply_requested(self) -> None:
        if self.duplex:
            raise InvalidInputError("in model_duplex mode the model decides when to speak; response.create is "
                                    "not available (switch turn_detection to server_vad or null)",
                                    param="turn_detection.type")
        self.standard.reply_requested()

    def cancelled(self) -> None:
        if self.duplex:
            self._muted = True
            self._duplex_job = None
        self.standard.cancelled()

    def frame_added(self, frame) -> None:
        self._last_frame = frame

    async def heard(self, audio16: np.ndarray) -> None:
        if not self.duplex:
            return
        unit = VAD_RATE * self.backend.options.duplex_chunk_ms // 1000
        self._unit_buffer = np.concatenate([self._unit_buffer, audio16])
        while self._unit_buffer.size >= unit:
            chunk, self._unit_buffer = self._unit_buffer[:unit].copy(), self._unit_buffer[unit:]
            frame, self._last_frame = self._last_frame, None  # each frame goes in once, with its second
            self._units_pending += 1
            if self._units_pending > 3:
                log.warning("duplex model is %d units behind real time", self._units_pending)
            self.rt.spawn(self._unit(chunk, frame))

    async def _unit(self, chunk: np.ndarray, frame) -> None:
        try:
            result = await self._in_model(self.backend.duplex_unit, chunk, frame)
        except Exception as exc:  # a failed unit is reported; the stream goes on
            log.exception("duplex unit failed")
            self.rt.emit(ConversationError("duplex_failed", f"duplex step failed: {exc}"))
            return
        finally:
            self._units_pending -= 1
        if self.rt.closed or not self.duplex:
            return
        self._duplex_result(result or {})

    def _duplex_result(self, result: dict) -> None:
        """The model listened or spoke for one unit: open, feed and close replies accordingly."""
        listening = bool(result.get("is_listen", True))
        end = bool(result.get("end_of_turn", False))
        if self._muted:
            if listening or end:
                self._muted = False
            return
        replies = self.replies
        if not listening:
            if replies.current is None:
                resp = replies.begin(output_audio=True)
                self._duplex_job = ReplyJob(replies, resp, [], [], "", self.rt.config)
            job = self._duplex_job
            text = result.get("text") or ""
            if text:
                job.text(text)
            wave = result.get("audio_waveform")
            if wave is not None:
                job.begin_segment(text)
                job.audio(_samples(wave), OUTPUT_RATE_MODEL)
                job.end_segment()
        if replies.current is not None and (listening or end):
            self._duplex_job = None
            # this unit's text and audio are queued with call_soon: the reply ends after them
            self.rt.loop.call_soon(replies.finish, replies.current)

    async def close(self) -> None:
        if self._duplex_on:
            self._duplex_on = False
            self.rt.loop.run_in_executor(self.backend.model_pool, self.backend.duplex_stop)
        self.backend.forget(self.replies)
        await self.standard.close()




# --------------------------------------------------------------------------- helpers


def _split(out, audio: bool) -> tuple[Any, str]:
    """``streaming_generate`` yields ``(waveform, text)`` with audio, text pieces (or tuples
    whose first element is the text) without; ``(None, None)`` marks its end."""
    if isinstance(out, str):
        return None, out
    if isinstance(out, (tuple, list)) and len(out) >= 2:
        first, second = out[0], out[1]
        if audio:
            return first, second if isinstance(second, str) else ""
        return None, first if isinstance(first, str) else ""
    if isinstance(out, dict):
        return out.get("audio_waveform") if audio else None, out.get("text") or ""
    return None, ""


def _samples(wave) -> np.ndarray:
    if hasattr(wave, "detach"):
        wave = wave.detach().float().cpu().numpy()
    return np.asarray(wave, dtype=np.float32).reshape(-1)


def _read_wav_16k(path: str) -> np.ndarray:
    """A reference recording as 16 kHz mono float32 (any rate or container PyAV reads)."""
    from core.media import decode_audio

    return decode_audio(Path(path).read_bytes(), VAD_RATE)
