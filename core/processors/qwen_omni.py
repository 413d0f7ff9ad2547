"""Qwen2.5-Omni and Qwen3-Omni through ``transformers``, from a local model directory.

Why not ``model.generate(return_audio=True)``: it runs Thinker, then Talker, then Token2Wav one
after the other, so the first sound comes after the whole reply is written (the seeds measured
6.5 s TTFP that way against 0.5 s chunked). Here the Thinker streams its tokens (a streamer
plus a forward hook that keeps each step's hidden states, which the Talker is conditioned on);
the reply text is cut into speakable pieces (``SpeechChunker``: a small first piece, sentences
after), and each piece goes to a Talker + Token2Wav pass in its own thread while the Thinker
keeps writing. Each pass conditions the Talker on the whole prompt and the reply so far, exactly
as ``generate`` builds its inputs, with the piece as the text to speak.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
from pydantic import Field, field_validator

from core.audio import OUTPUT_RATE
from core.conversation import ReplyJob, ReplyStats
from core.processors.base import Capability, ModelCapabilities, ModelThreads, ProgressCallback
from core.processors.first_audio import CodesAt, FirstAudio, waits_for
from core.processors.omni_base import (
    OmniBackendBase,
    OmniOptions,
    parse_device,
    parse_dtype,
)
from core.processors.qwen_loading import as_list, codec_suppressed, load_processor
from core.processors.qwen_streaming import ReplySpeech, ReplyStreamer
from core.processors.qwen_tools import tool_call_text, tool_prefill, tools_block
from core.processors.talker_static import StaticTalker
from core.processors.vocoder_static import StaticVocoder

log = logging.getLogger(__name__)

QWEN_SYSTEM_PROMPT = (
    "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of perceiving "
    "auditory and visual inputs, as well as generating text and speech."
)
FAMILIES = {"qwen2_5_omni": "qwen2_5_omni", "qwen3_omni_moe": "qwen3_omni"}


class QwenOmniOptions(OmniOptions):
    """``backend.options`` for ``qwen_omni``. Only ``model_path`` is required."""

    model_path: str = Field(description="local directory with config.json, weights, processor files")
    family: Literal["auto", "qwen2_5_omni", "qwen3_omni"] = "auto"
    device: str = Field("auto", description="'auto' (cuda:0 if present, else cpu), 'cpu', 'cuda', 'cuda:N'")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = None
    system_prompt: str = Field(QWEN_SYSTEM_PROMPT, description="Qwen needs this prompt to speak; "
                               "session instructions are added after it")
    default_voice: str | None = Field(None, description="default speaker; the model's first one if unset")
    first_chunk_words: int = Field(2, ge=1, le=20)
    frames_as: Literal["auto", "video", "images"] = Field("auto", description="camera frames as a video "
                                                          "clip (needs torchvision) or as images")
    talker_codes_per_token: int | None = Field(None, ge=1, le=200, description="cap on codec frames per text "
                                               "token (default 16 at Qwen2.5's 50 Hz codec, 5 at Qwen3's 12.5 Hz)")
    talker_max_codes: int = Field(2000, ge=8, le=8192)
    talker_sample: bool = Field(True, description="False: greedy codec tokens (reproducible speech, e.g. in tests)")
    talker_temperature: float = Field(0.9, gt=0.0, le=2.0)
    talker_top_k: int = Field(40, ge=1)
    talker_top_p: float = Field(0.8, gt=0.0, le=1.0)
    talker_repetition_penalty: float = Field(1.05, ge=1.0, le=2.0)
    speech_decode: Literal["eager", "static", "cuda_graphs"] = Field(
        "eager", description="Qwen2.5's Talker and vocoder: transformers' code (eager), on fixed tensors (a static "
        "KV cache, talker_static.py; the vocoder's solve, vocoder_static.py), or those replayed as CUDA graphs "
        "(a Talker step per cache size, a vocoder solve per piece length; on a CPU: static)")
    token2wav_steps: int = Field(10, ge=2, le=50, description="Qwen2.5 DiT ODE steps")
    first_audio_blocks: int = Field(1, ge=0, le=8, description=(
        "Qwen2.5: a reply's first audio is let out once the Talker has written this many of the vocoder's "
        "DiT blocks (12 codes, 240 ms each) and the one ahead, before the rest of the first piece (first_audio.py); "
        "0: the first piece is spoken whole"))
    vocoder_sample_rate: int = Field(OUTPUT_RATE, ge=8000, le=48000)
    seed: int | None = None

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in ("auto", "cpu", "cuda", "mps") and not (value.startswith("cuda:") and value[5:].isdigit()):
            raise ValueError("device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
        return value

    @field_validator("model_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not (Path(value) / "config.json").is_file():
            raise ValueError(f"{value!r} has no config.json (it must be a local model directory; "
                             "hub ids are not fetched)")
        return value


class QwenOmniBackend(OmniBackendBase):
    name = "qwen_omni"
    # Qwen's own tool format: tools listed in the system turn, calls as <tool_call> JSON blocks
    # in the reply (parsed while streaming by ``ToolCallFilter``), results as <tool_response>.
    capabilities = ModelCapabilities.of(*Capability, supports_tools=True)

    def __init__(self, options: QwenOmniOptions, threads: ModelThreads | None = None) -> None:
        super().__init__(options, threads)
        self.options: QwenOmniOptions = options
        self.model = None
        self.processor = None
        self.family = None
        self.device = "cpu"
        self.dtype = None
        self.has_video = False
        self.codec_suppressed: list[int] = []  # Qwen2.5 Talker ids never to sample (see ``codec_suppressed``)
        self.static_talker: StaticTalker | None = None  # ``speech_decode`` static or cuda_graphs (Qwen2.5)
        self.vocoder: Any = None  # Token2Wav, or its ``StaticVocoder``
        # The Talker + vocoder run beside the Thinker: one thread, so pieces are spoken in order.
        self.talker_pool = self.threads.pool("qwen-talker")

    # ------------------------------------------------------------------ loading

    def load_model(self, progress: ProgressCallback | None) -> None:
        import torch
        import transformers

        opts = self.options
        path = Path(opts.model_path)
        model_type = json.loads((path / "config.json").read_text()).get("model_type", "")
        family = opts.family if opts.family != "auto" else FAMILIES.get(model_type)
        if family is None:
            raise RuntimeError(f"{path}/config.json has model_type {model_type!r}; qwen_omni loads "
                               f"{', '.join(FAMILIES)} (set family to force one)")
        self.family = family
        self.device = parse_device(opts.device)
        self.dtype = parse_dtype(opts.dtype)
        if opts.seed is not None:
            torch.manual_seed(opts.seed)
        if family == "qwen2_5_omni":
            model_cls, proc_cls = transformers.Qwen2_5OmniForConditionalGeneration, transformers.Qwen2_5OmniProcessor
        else:
            model_cls, proc_cls = transformers.Qwen3OmniMoeForConditionalGeneration, transformers.Qwen3OmniMoeProcessor

        self.report(progress, "processor", 0.05, str(path))
        t0 = time.perf_counter()
        self.processor = load_processor(path, proc_cls)
        self.has_video = getattr(self.processor, "video_processor", None) is not None
        self.load_seconds["processor"] = time.perf_counter() - t0

        self.report(progress, "model", 0.15, f"{family} on {self.device} as {str(self.dtype).split('.')[-1]}")
        t0 = time.perf_counter()
        kwargs: dict[str, Any] = {"dtype": self.dtype, "local_files_only": True}
        if opts.attn_implementation:
            kwargs["attn_implementation"] = opts.attn_implementation
        if self.device.startswith("cuda"):
            kwargs["device_map"] = self.device  # straight to the GPU: no second copy in host memory
        model = model_cls.from_pretrained(str(path), **kwargs)
        if not self.device.startswith("cuda"):
            model.to(self.device)
        self.model = model.eval()
        t2w = getattr(model, "token2wav", None)
        if t2w is not None and family == "qwen2_5_omni":
            t2w.float()  # Token2Wav runs in float32 (as transformers' generate does): once, not in a reply
            talker = model.talker
            self.codec_suppressed = codec_suppressed(
                model.config.talker_config.vocab_size, model.config.token2wav_config.dit_config.num_embeds,
                talker.codec_bos_token, (talker.codec_pad_token, talker.codec_eos_token))
            self.vocoder = t2w
            if opts.speech_decode != "eager":
                graphs = opts.speech_decode == "cuda_graphs"
                self.static_talker = StaticTalker(talker, graphs)
                self.vocoder = StaticVocoder(t2w, graphs)
        predictor = getattr(getattr(model, "talker", None), "code_predictor", None)
        if not self.options.talker_sample and predictor is not None:
            predictor.generation_config.do_sample = False  # Qwen3's residual codes greedy too
        self.load_seconds["model"] = time.perf_counter() - t0
        self.voices = tuple(self._speakers())
        self.default_voice = self.resolve_default_voice()
        if opts.warm_up:
            self.report(progress, "warm_up", 0.9)
            t0 = time.perf_counter()
            self._warm_up()
            self.load_seconds["warm_up"] = time.perf_counter() - t0

    def _speakers(self) -> list[str]:
        if not getattr(self.model, "has_talker", False):
            return []
        if self.family == "qwen2_5_omni":
            return list(self.model.speaker_map)
        return list((self.model.config.talker_config.speaker_id or {}).keys())

    def resolve_default_voice(self) -> str | None:
        wanted = self.options.default_voice
        if wanted and self.voices:
            match = next((v for v in self.voices if v.lower() == wanted.lower()), None)
            if match is None:
                raise RuntimeError(f"default_voice {wanted!r} is not one of this model's voices: "
                                   f"{', '.join(self.voices)}")
            return match
        return self.voices[0] if self.voices else None

    @property
    def speaks(self) -> bool:
        return bool(getattr(self.model, "has_talker", False) and self.voices)

    def _warm_up(self) -> None:
        """One tiny pass through the Thinker and the vocoder, so the first real turn pays no
        first-call costs (on a GPU: kernel selection for each new shape, the vocoder's convolutions)."""
        import torch

        inputs = self._inputs([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], [], [], [])
        self._thinker_generate(inputs, max_new_tokens=2, temperature=0.0, cancel=threading.Event(), streamer=None)
        if self.family == "qwen2_5_omni" and self.speaks:
            spk = self.model.speaker_map[self.default_voice]
            t2w = self.model.token2wav
            codes = torch.zeros((1, 24), dtype=torch.long, device=t2w.device)
            with torch.inference_mode():
                self.vocoder(codes, conditioning=spk["cond"].to(t2w.device).float(),
                    reference_mel=spk["ref_mel"].to(t2w.device).float(), num_steps=self.options.token2wav_steps)
        self._sync()

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def health_detail(self) -> dict[str, Any]:
        """On a GPU: its memory as this worker's PyTorch sees it (allocated now, reserved by the
        caching allocator, the peak), so an operator sees a worker that does not give memory back."""
        if not self.device.startswith("cuda") or self.model is None:
            return {}
        import torch

        mib = 1 << 20
        return {"gpu": {"device": self.device, "name": torch.cuda.get_device_name(self.device),
                        "allocated_mib": round(torch.cuda.memory_allocated(self.device) / mib),
                        "reserved_mib": round(torch.cuda.memory_reserved(self.device) / mib),
                        "peak_allocated_mib": round(torch.cuda.max_memory_allocated(self.device) / mib)}}

    # ------------------------------------------------------------------ prompts

    def _messages(self, job: ReplyJob) -> tuple[list[dict], list, list, list]:
        """Chat-template messages plus the audio/image/video lists the processor wants, in order."""
        audios: list[np.ndarray] = []
        images: list[Any] = []
        videos: list[Any] = []
        system = self.options.system_prompt
        if job.system:
            system = f"{system}\n{job.system}" if system else job.system
        messages: list[dict] = []
        if system:
            messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
        for item in job.items:
            if item.type == "function_call":
                text = tool_call_text(item.name or "", item.arguments or "{}")
                if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_turn"):
                    messages[-1]["content"][0]["text"] += "\n" + text  # parallel calls: one turn
                else:
                    messages.append({"role": "assistant", "content": [{"type": "text", "text": text}],
                                     "tool_turn": True})
                continue
            if item.type == "function_call_output":
                # What Qwen's templates make of a ``tool`` message: a user turn of <tool_response>s.
                part = {"type": "text", "text": f"<tool_response>\n{item.output or ''}\n</tool_response>"}
                if messages and messages[-1]["role"] == "user" and messages[-1].get("tool_turn"):
                    messages[-1]["content"].append({"type": "text", "text": "\n"})
                    messages[-1]["content"].append(part)
                else:
                    messages.append({"role": "user", "content": [part], "tool_turn": True})
                continue
            content: list[dict] = []
            if item.audio is not None:
                content.append({"type": "audio"})
                audios.append(item.audio)
            for image in item.images:
                content.append({"type": "image"})
                images.append(image)
            if item.text_besides_audio:
                content.append({"type": "text", "text": item.text_besides_audio})
            if content and item.role == "user" and messages and messages[-1]["role"] == "user":
                messages[-1]["content"].extend(content)  # one turn: a clip, an image and text together
            elif content:
                messages.append({"role": item.role, "content": content})
        if job.frames:
            # The camera goes with the latest user turn: after its own media, so the order of
            # placeholders in the text matches the order of the image list.
            last_user = next((m for m in reversed(messages) if m["role"] == "user"), None)
            if last_user is None or messages[-1] is not last_user:
                last_user = {"role": "user", "content": []}
                messages.append(last_user)
            if self.options.frames_as != "images" and self.has_video and len(job.frames) >= 2:
                last_user["content"].append({"type": "video"})
                videos.append([np.asarray(f) for f in job.frames])
            else:
                for frame in job.frames:
                    last_user["content"].append({"type": "image"})
                    images.append(frame)
        for message in messages:
            message.pop("tool_turn", None)
        return messages, audios, images, videos

    def prompt_text(self, messages: list[dict], tools: list | None = None, prefill: str = "") -> str:
        """The templated prompt. ``tools`` (``FunctionTool``s) go to the template as OpenAI
        function specs; a template that ignores them (Qwen2.5-Omni's own renders no tools) gets
        Qwen's standard tool block appended to its system turn instead. ``prefill`` starts the
        reply (a forced ``<tool_call>``)."""
        template = self.processor.apply_chat_template
        text = template(messages, add_generation_prompt=True, tokenize=False)
        if tools:
            specs = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                       "parameters": t.parameters}} for t in tools]
            with_tools = template(messages, tools=specs, add_generation_prompt=True, tokenize=False)
            if with_tools != text:
                text = with_tools
            else:
                block = tools_block(specs)
                messages = [dict(m) for m in messages]
                if messages and messages[0]["role"] == "system":
                    messages[0]["content"] = [*messages[0]["content"], {"type": "text", "text": block}]
                else:
                    messages.insert(0, {"role": "system", "content": [{"type": "text", "text": block.lstrip()}]})
                text = template(messages, add_generation_prompt=True, tokenize=False)
        return text + prefill

    def _inputs(self, messages: list[dict], audios: list, images: list, videos: list,
                tools: list | None = None, prefill: str = ""):
        import torch

        text = self.prompt_text(messages, tools, prefill)
        kwargs: dict[str, Any] = {"text": text, "return_tensors": "pt", "padding": True}
        if audios:
            kwargs["audio"] = audios
        if images:
            kwargs["images"] = images
        if videos:
            kwargs["videos"] = videos
        inputs = self.processor(**kwargs)
        out = {}
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                value = value.to(self.device)
                if value.is_floating_point():
                    value = value.to(self.dtype)
            out[key] = value
        return out

    # ------------------------------------------------------------------ generation

    def _thinker_generate(self, inputs: dict, *, max_new_tokens: int, temperature: float, cancel, streamer,
                          hidden: bool = False):
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _Cancel(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool, device=input_ids.device)

        sample = temperature > 0.01
        kwargs = dict(inputs, max_new_tokens=max_new_tokens, do_sample=sample,
                      stopping_criteria=StoppingCriteriaList([_Cancel()]), streamer=streamer)
        if sample:
            kwargs["temperature"] = temperature
        if hidden:
            kwargs["output_hidden_states"] = True  # for the hook; the output keeps none of them
        with torch.inference_mode():
            return self.model.thinker.generate(**kwargs)

    def run_model(self, job: ReplyJob) -> ReplyStats:
        messages, audios, images, videos = self._messages(job)
        prefill = tool_prefill(job.tool_choice) if job.tools else ""
        inputs = self._inputs(messages, audios, images, videos, job.tools, prefill)
        speak = job.output_audio and self.speaks and not prefill
        voice = job.voice if job.voice in self.voices else self.default_voice
        eos = set(as_list(self.model.thinker.generation_config.eos_token_id))
        eos |= {self.processor.tokenizer.eos_token_id} - {None}
        speech = ReplySpeech(self, job, inputs, voice) if speak else None
        streamer = ReplyStreamer(self, job, eos, speech)
        hook = self.model.thinker.register_forward_hook(speech.capture, with_kwargs=True) if speech else None
        stop = "stop"
        try:
            self._thinker_generate(inputs, max_new_tokens=job.config.max_output_tokens,
                                   temperature=job.config.temperature, cancel=job.cancel,
                                   streamer=streamer, hidden=speak)
        finally:
            if hook is not None:
                hook.remove()
        if job.cancel.is_set():
            stop = "cancelled"
        elif not streamer.ended and len(streamer.ids) >= job.config.max_output_tokens:
            stop = "length"
        streamer.finish()
        if speech is not None:
            speech.wait()
        return ReplyStats(len(streamer.ids), int(inputs["input_ids"].shape[1]), stop)

    def transcribe_turn(self, audio: np.ndarray) -> str | None:
        """The Thinker transcribes (Qwen-Omni's documented ASR prompt); greedy, text only."""
        messages = [
            {"role": "system", "content": [{"type": "text", "text": "You are a speech recognition model."}]},
            {"role": "user", "content": [{"type": "audio"},
                                         {"type": "text", "text": "Transcribe the audio into text."}]},
        ]
        inputs = self._inputs(messages, [audio], [], [])
        out = self._thinker_generate(inputs, max_new_tokens=96, temperature=0.0, cancel=threading.Event(), streamer=None)
        ids = out[0, inputs["input_ids"].shape[1]:]
        return self.processor.tokenizer.decode(ids, skip_special_tokens=True).strip()

    # ------------------------------------------------------------------ talker + vocoder

    def speak_piece(self, state: dict, context_ids, ctx_embeds, ctx_hidden, piece_ids, piece_embeds,
                    piece_hidden, voice: str, max_codes: int, cancel,
                    early: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
        """Talker + vocoder for one piece of the reply; float32 samples at the vocoder's rate.
        ``early`` (a reply's first piece, Qwen2.5): the piece's first audio goes to it as soon as
        it exists (``first_audio.py``), and what is returned is the rest."""
        import torch

        with torch.inference_mode():
            if self.family == "qwen2_5_omni":
                return self._speak25(state, context_ids, ctx_embeds, ctx_hidden, piece_ids, piece_embeds,
                                     piece_hidden, voice, max_codes, cancel, early)
            return self._speak3(state, piece_ids, voice, max_codes, cancel)

    def _stopper(self, cancel):
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _Cancel(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool, device=input_ids.device)

        return StoppingCriteriaList([_Cancel()])

    def _talker_sampling(self, max_codes: int) -> dict[str, Any]:
        o = self.options
        if not o.talker_sample:
            return {"max_new_tokens": max_codes, "do_sample": False, "repetition_penalty": o.talker_repetition_penalty}
        return {"max_new_tokens": max_codes, "do_sample": True, "top_k": o.talker_top_k, "top_p": o.talker_top_p,
                "temperature": o.talker_temperature, "repetition_penalty": o.talker_repetition_penalty}

    def _first_audio(self, spk: dict, max_codes: int, early: Callable[[np.ndarray], None] | None,
                     cancel) -> FirstAudio | None:
        """The first piece's early audio, where ``first_audio_blocks`` asks for it and the piece can
        be longer than the codes it waits for."""
        blocks = self.options.first_audio_blocks
        t2w = self.model.token2wav
        if early is None or not blocks or waits_for(t2w.config.dit_config, blocks) >= max_codes:
            return None
        vocoder = self.vocoder if isinstance(self.vocoder, StaticVocoder) else StaticVocoder(t2w, graphs=False)

        def emit(wav: np.ndarray) -> None:
            if not cancel.is_set():
                early(wav)

        return FirstAudio(vocoder, t2w.config.dit_config, spk["cond"].to(t2w.device).float(),
                          spk["ref_mel"].to(t2w.device).float(), self.options.token2wav_steps, blocks, max_codes, emit)

    def _speak25(self, state, context_ids, ctx_embeds, ctx_hidden, piece_ids, piece_embeds, piece_hidden,
                 voice, max_codes, cancel, early=None) -> np.ndarray:
        import torch

        model = self.model
        talker = model.talker
        spk = model.speaker_map[voice]
        dev = context_ids.device
        embed = model.thinker.get_input_embeddings()

        def tok(value: int) -> torch.Tensor:
            return torch.full((1, 1), value, dtype=torch.long, device=dev)

        reply = piece_hidden + piece_embeds  # what the Talker reads, one entry per codec step
        n_ctx = context_ids.shape[1]
        input_text_ids = torch.cat([context_ids, tok(spk["bos_token"]), piece_ids[:, :1]], dim=1)
        talker_ids = torch.cat([torch.full_like(context_ids, talker.codec_mask_token),
                                tok(talker.codec_pad_token), tok(talker.codec_bos_token)], dim=1)
        inputs_embeds = torch.cat([ctx_hidden + ctx_embeds, embed(tok(spk["bos_token"])), reply[:, :1]], dim=1)
        reply_rest = torch.cat([reply[:, 1:], embed(tok(talker.text_eos_token)), embed(tok(talker.text_pad_token))],
                               dim=1)
        kwargs = {k: v for k, v in state["mm"].items() if v is not None}
        ends = [talker.codec_pad_token, talker.codec_eos_token]
        first = self._first_audio(spk, max_codes, early, cancel)
        t0 = time.perf_counter()
        if self.static_talker is not None:
            codes = self.static_talker.generate(
                talker_ids=talker_ids, input_text_ids=input_text_ids, inputs_embeds=inputs_embeds,
                thinker_reply_part=reply_rest, suppress=self.codec_suppressed, eos=ends, stop=cancel.is_set,
                at=(first.at, first.early) if first else None, **self._talker_sampling(max_codes), **kwargs)
        else:
            codes = talker.generate(
                input_ids=talker_ids, input_text_ids=input_text_ids, thinker_reply_part=reply_rest,
                inputs_embeds=inputs_embeds, attention_mask=torch.ones((1, n_ctx + 2), dtype=torch.long, device=dev),
                suppress_tokens=self.codec_suppressed, eos_token_id=ends,
                pad_token_id=talker.codec_pad_token, stopping_criteria=self._stopper(cancel),
                streamer=CodesAt(first.at, ends, first.early) if first else None,
                **self._talker_sampling(max_codes), **kwargs,
            )[:, talker_ids.shape[1]:]
        stops = (codes == talker.codec_eos_token) | (codes == talker.codec_pad_token)
        length = int(stops[0].nonzero()[0, 0]) if bool(stops.any()) else codes.shape[1]
        codes = codes[:, :length]
        if length == 0 or cancel.is_set():
            return np.zeros(0, dtype=np.float32)
        t1 = time.perf_counter()
        t2w = model.token2wav  # float32 since loading
        if first is not None and first.done:
            talked_at, vocoder_s = first.timing
            state["pieces"].append((first.at, talked_at - t0, vocoder_s))  # the first audio's codes, talker s, vocoder s
            return first.rest(codes.to(t2w.device))
        wav = self.vocoder(codes.to(t2w.device), conditioning=spk["cond"].to(t2w.device).float(),
                  reference_mel=spk["ref_mel"].to(t2w.device).float(), num_steps=self.options.token2wav_steps)
        samples = wav.reshape(-1).float().cpu().numpy()
        state["pieces"].append((length, t1 - t0, time.perf_counter() - t1))  # codes, talker s, vocoder s
        return samples

    def _speak3(self, state, piece_ids, voice, max_codes, cancel) -> np.ndarray:
        """Qwen3-Omni: the Talker reads the user turn (thinker states) and the piece's token
        embeddings; a code predictor fills the residual codebooks; Code2Wav decodes them."""
        import torch

        model = self.model
        cfg = model.config
        tcfg = cfg.talker_config
        dev = piece_ids.device
        embed = model.thinker.get_input_embeddings()
        head = torch.tensor([[cfg.im_start_token_id, cfg.assistant_token_id]], device=dev)
        newline = state["assistant_newline"]
        seq = torch.cat([head, newline, piece_ids], dim=1)
        if seq.shape[1] < 5:  # the assistant part needs 3 header tokens and 2 text tokens
            seq = torch.cat([seq, torch.full((1, 5 - seq.shape[1]), cfg.tts_pad_token_id, device=dev)], dim=1)
        thinker_embed = embed(seq)
        specials = torch.tensor([[cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]], device=dev)
        tts_bos, tts_eos, tts_pad = model.talker.text_projection(embed(specials)).chunk(3, dim=1)
        speaker_id = tcfg.speaker_id[voice]
        assistant_embeds, assistant_ids, trailing = model._get_talker_assistant_parts(
            0, seq.shape[1], speaker_id, thinker_embed, tts_pad, tts_bos, tts_eos)
        user_embeds, user_ids = state["user_embeds"], state["user_ids"]
        inputs_embeds = torch.cat([user_embeds, assistant_embeds], dim=1)
        talker_ids = torch.cat([user_ids, assistant_ids], dim=1)
        suppressed = [i for i in range(tcfg.text_config.vocab_size - 1024, tcfg.text_config.vocab_size)
                      if i != tcfg.codec_eos_token_id]
        result = model.talker.generate(
            inputs_embeds=inputs_embeds, trailing_text_hidden=trailing, tts_pad_embed=tts_pad,
            talker_input_ids=talker_ids, attention_mask=torch.ones(talker_ids.shape, dtype=torch.long, device=dev),
            eos_token_id=tcfg.codec_eos_token_id, suppress_tokens=suppressed, output_hidden_states=True,
            return_dict_in_generate=True, stopping_criteria=self._stopper(cancel), **self._talker_sampling(max_codes),
        )
        frames = [hid[-1] for hid in result.hidden_states if hid[-1] is not None]
        if not frames or cancel.is_set():
            return np.zeros(0, dtype=np.float32)
        codes = torch.stack(frames, dim=1).transpose(1, 2)
        seqs = result.sequences[:, : codes.shape[-1]]
        ends = (seqs == tcfg.codec_eos_token_id).nonzero()
        if ends.numel():
            codes = codes[..., : int(ends[0, 1])]
        if codes.shape[-1] == 0:
            return np.zeros(0, dtype=np.float32)
        wav = model.code2wav.chunked_decode(codes.to(model.code2wav.device), chunk_size=300, left_context_size=25)
        return wav.reshape(-1).float().cpu().numpy()
