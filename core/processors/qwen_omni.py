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

import concurrent.futures
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from core.audio import OUTPUT_RATE
from core.cascade.chunker import SpeechChunker
from core.conversation import ReplyJob, ReplyStats
from core.processors.base import Capability, ModelCapabilities, ModelThreads, ProgressCallback
from core.processors.omni_base import (
    OmniBackendBase,
    OmniOptions,
    parse_device,
    parse_dtype,
)

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
    token2wav_steps: int = Field(10, ge=1, le=50, description="Qwen2.5 DiT ODE steps")
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
                t2w(codes, conditioning=spk["cond"].to(t2w.device).float(),
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
        eos = set(_as_list(self.model.thinker.generation_config.eos_token_id))
        eos |= {self.processor.tokenizer.eos_token_id} - {None}
        speech = _Speech(self, job, inputs, voice) if speak else None
        streamer = _ReplyStreamer(self, job, eos, speech)
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
                    piece_hidden, voice: str, max_codes: int, cancel) -> np.ndarray:
        """Talker + vocoder for one piece of the reply; float32 samples at the vocoder's rate."""
        import torch

        with torch.inference_mode():
            if self.family == "qwen2_5_omni":
                return self._speak25(state, context_ids, ctx_embeds, ctx_hidden, piece_ids, piece_embeds,
                                     piece_hidden, voice, max_codes, cancel)
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

    def _speak25(self, state, context_ids, ctx_embeds, ctx_hidden, piece_ids, piece_embeds, piece_hidden,
                 voice, max_codes, cancel) -> np.ndarray:
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
        t0 = time.perf_counter()
        codes = talker.generate(
            input_ids=talker_ids, input_text_ids=input_text_ids, thinker_reply_part=reply_rest,
            inputs_embeds=inputs_embeds, attention_mask=torch.ones((1, n_ctx + 2), dtype=torch.long, device=dev),
            suppress_tokens=self.codec_suppressed, eos_token_id=[talker.codec_pad_token, talker.codec_eos_token],
            pad_token_id=talker.codec_pad_token, stopping_criteria=self._stopper(cancel),
            **self._talker_sampling(max_codes), **kwargs,
        )[:, talker_ids.shape[1]:]
        stops = (codes == talker.codec_eos_token) | (codes == talker.codec_pad_token)
        length = int(stops[0].nonzero()[0, 0]) if bool(stops.any()) else codes.shape[1]
        codes = codes[:, :length]
        if length == 0 or cancel.is_set():
            return np.zeros(0, dtype=np.float32)
        t1 = time.perf_counter()
        t2w = model.token2wav  # float32 since loading
        wav = t2w(codes.to(t2w.device), conditioning=spk["cond"].to(t2w.device).float(),
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


# --------------------------------------------------------------------------- streaming


class _Speech:
    """Hidden-state capture and the piece queue for one reply.

    The forward hook stores each Thinker step's input embeddings and last hidden state; a step
    that consumed reply token ``j`` is entry ``j + 1`` (entry 0 is the prompt). A piece can be
    spoken once every token in it has its states, i.e. one step after its last token.
    """

    def __init__(self, backend: QwenOmniBackend, job: ReplyJob, inputs: dict, voice: str) -> None:
        import torch

        self.backend = backend
        self.job = job
        self.voice = voice
        self.input_ids = inputs["input_ids"]
        self.embeds: list = []  # [1, n, H] per forward
        self.hidden: list = []
        self.futures: list[concurrent.futures.Future] = []
        cfg = backend.model.config.thinker_config
        self.family = backend.family
        mm_ids = [getattr(cfg, name, None) for name in ("audio_token_index", "image_token_index", "video_token_index",
                                                        "audio_token_id", "image_token_id", "video_token_id")]
        mask = torch.zeros_like(self.input_ids, dtype=torch.bool)
        for token in {t for t in mm_ids if t is not None}:
            mask |= self.input_ids == token
        self.mm_mask = mask
        self.layer = getattr(backend.model.config.talker_config, "accept_hidden_layer", -1) \
            if self.family == "qwen3_omni" else -1
        feature_mask = inputs.get("feature_attention_mask")
        self.state: dict[str, Any] = {"mm": {
            "image_grid_thw": inputs.get("image_grid_thw"), "video_grid_thw": inputs.get("video_grid_thw"),
            "video_second_per_grid": inputs.get("video_second_per_grid"),
            "audio_feature_lengths": feature_mask.sum(dim=1) if feature_mask is not None else None,
            "use_audio_in_video": False,
        }, "pieces": []}
        self.first_done = threading.Event()

    def capture(self, module, args, kwargs, output) -> None:
        states = output.hidden_states
        if states is None:
            return
        embeds, last = states[0], states[self.layer]
        if not self.embeds:
            embeds = embeds.masked_fill(self.mm_mask.unsqueeze(-1), 0)  # generate() zeroes media positions
            if self.family == "qwen3_omni":
                self._prepare_qwen3(states[0], last)
        self.embeds.append(embeds)
        self.hidden.append(last)

    def _prepare_qwen3(self, embeds, hidden) -> None:
        """The Talker's user part comes from the prompt only: build it once per reply."""
        import torch

        model = self.backend.model
        cfg = model.config
        ids = self.input_ids
        length = ids.shape[1]
        positions = torch.arange(length, device=ids.device).unsqueeze(0)
        starts = torch.where(ids == cfg.im_start_token_id, positions, positions.new_full((), -1))
        previous = torch.cummax(starts, dim=-1).values.clamp_min(0)
        roles = ids.gather(1, (previous + 1).clamp_max(length - 1))
        user = roles == cfg.user_token_id
        full = model._get_talker_user_parts(0, length, self.mm_mask, hidden, embeds)
        self.state["user_embeds"] = full[user].unsqueeze(0)
        self.state["user_ids"] = ids[user].unsqueeze(0)
        self.state["assistant_newline"] = ids[:, -1:]  # the prompt ends "<|im_start|>assistant\n"

    def have_states(self, end: int) -> bool:
        return len(self.embeds) >= end + 1

    def submit(self, start: int, end: int, text: str, reply_ids: list[int]) -> None:
        """Speak reply tokens ``[start, end)`` (whose text is ``text``) in the talker thread."""
        import torch

        end = min(end, len(self.embeds) - 1) if self.family == "qwen2_5_omni" else end
        if end <= start or not text.strip():
            return
        dev = self.input_ids.device
        piece_ids = torch.tensor([reply_ids[start:end]], dtype=torch.long, device=dev)
        context_ids = torch.cat([self.input_ids, torch.tensor([reply_ids[:start]], dtype=torch.long, device=dev)],
                                dim=1) if start else self.input_ids
        if self.family == "qwen2_5_omni":
            ctx_embeds = torch.cat(self.embeds[: start + 1], dim=1)
            ctx_hidden = torch.cat(self.hidden[: start + 1], dim=1)
            piece_embeds = torch.cat(self.embeds[start + 1 : end + 1], dim=1)
            piece_hidden = torch.cat(self.hidden[start + 1 : end + 1], dim=1)
        else:
            ctx_embeds = ctx_hidden = piece_embeds = piece_hidden = None
        opts = self.backend.options
        per_token = opts.talker_codes_per_token or (16 if self.family == "qwen2_5_omni" else 5)
        max_codes = min(opts.talker_max_codes, 8 + per_token * (end - start))
        job = self.job

        def speak() -> None:
            if job.cancelled:
                return
            job.begin_segment(text)
            try:
                wav = self.backend.speak_piece(self.state, context_ids, ctx_embeds, ctx_hidden, piece_ids,
                                               piece_embeds, piece_hidden, self.voice, max_codes, job.cancel)
                job.audio(wav, self.backend.options.vocoder_sample_rate)
                if start == 0 and self.state["pieces"]:
                    codes, talker_s, vocoder_s = self.state["pieces"][0]
                    log.info("first audio piece: %d text tokens, %d codes; talker %.0f ms, vocoder %.0f ms",
                             end - start, codes, talker_s * 1000, vocoder_s * 1000)
            finally:
                job.end_segment()

        self.futures.append(self.backend.talker_pool.submit(speak))

    def wait(self) -> None:
        for fut in self.futures:
            fut.result()


class _ReplyStreamer:
    """``transformers`` streamer: text deltas out at once, speakable pieces to ``_Speech``.

    Pieces are cut by the product's ``SpeechChunker`` on the text; each piece is mapped back to
    the tokens it came from (character offsets per token), since the Talker reads tokens.
    """

    def __init__(self, backend: QwenOmniBackend, job: ReplyJob, eos: set[int], speech: _Speech | None) -> None:
        self.tokenizer = backend.processor.tokenizer
        self.job = job
        self.eos = eos
        self.speech = speech
        self.ids: list[int] = []
        self.text = ""  # decoded reply so far, as sent
        self.stream = ""  # what the chunker has seen (its newline folding), for piece -> token mapping
        self.token_end: list[int] = []  # per token: end offset in ``stream``
        self.chunker = SpeechChunker(first_words=backend.options.first_chunk_words)
        self.cursor = 0  # stream offset where the next piece starts
        self.next_token = 0  # first token of the next piece
        self.pending: list[tuple[int, int, str]] = []
        self.prompt_seen = False
        self.ended = False
        self.tools = ToolCallFilter(job, tool_prefill(job.tool_choice)) if job.tools else None

    def put(self, value) -> None:
        if not self.prompt_seen:  # the first call carries the prompt
            self.prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            if self.ended:
                return
            if token in self.eos:
                self.ended = True
                return
            self.ids.append(int(token))
            self._decode()
        self._dispatch(final=False)

    def _decode(self) -> None:
        from core.cascade.chunker import _NEWLINE

        full = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        delta = ""
        # Half a UTF-8 character waits for the rest; a decode that rewrote earlier text (rare
        # tokenizer cleanup) keeps what was already sent.
        if not full.endswith("\ufffd") and full.startswith(self.text):
            delta, self.text = full[len(self.text):], full
        if delta and self.tools is not None:
            delta = self.tools.push(delta)  # a <tool_call> is neither shown nor spoken
        if not delta:
            self.token_end.append(len(self.stream))
            return
        self.job.text(delta)
        if self.speech is None:
            return
        folded = _NEWLINE.sub(" ", delta)
        self.stream += folded
        self.token_end.append(len(self.stream))
        for piece in self.chunker.push(delta):
            self._piece(piece)

    def _piece(self, piece: str) -> None:
        pos = self.stream.find(piece, self.cursor)
        end = (pos if pos >= 0 else self.cursor) + len(piece)
        self.cursor = end
        last = next((i for i, e in enumerate(self.token_end) if e >= end), len(self.token_end) - 1)
        self.pending.append((self.next_token, last + 1, piece))
        self.next_token = last + 1

    def _dispatch(self, final: bool) -> None:
        speech = self.speech
        while self.pending and (final or speech.have_states(self.pending[0][1])):
            start, end, text = self.pending.pop(0)
            speech.submit(start, end, text, self.ids)

    def finish(self) -> None:
        """After generation (with tools): held-back text goes out, an unterminated call is
        parsed, then the last pieces are spoken."""
        if self.tools is None or self.job.cancelled:
            return
        rest = self.tools.finish()
        if rest:
            self.job.text(rest)
            if self.speech is not None:
                from core.cascade.chunker import _NEWLINE

                self.stream += _NEWLINE.sub(" ", rest)
                for piece in self.chunker.push(rest):
                    self._piece(piece)
        self.tools = None
        self.end()

    def end(self) -> None:
        if self.speech is None or self.job.cancelled or self.tools is not None:
            return  # with tools, ``finish`` ends (after the held-back text)
        for piece in self.chunker.flush():
            self._piece(piece)
        self._dispatch(final=True)


# --------------------------------------------------------------------------- helpers


def codec_suppressed(talker_vocab: int, vocoder_codes: int, bos: int, stops: tuple[int, ...]) -> list[int]:
    """Qwen2.5 Talker ids that must never be sampled: its start token, and every id the vocoder
    has no embedding for except the stop tokens. ``generate`` suppresses only the start token; a
    trained Talker never writes the others, but one that does (random weights, a fine-tune gone
    wrong) would index past the vocoder's codebook, which on a GPU is a device-side assert that
    poisons the worker's CUDA context for good."""
    return sorted({bos} | {i for i in range(vocoder_codes, talker_vocab) if i not in stops})


def _as_list(value) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [int(value)]


def load_processor(path: Path, proc_cls):
    """The model's processor. Without torchvision, ``transformers`` cannot build a video processor,
    and the Qwen processors refuse to exist without one; then build it from its parts with no video
    support (camera frames go in as images instead)."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        return proc_cls.from_pretrained(str(path), local_files_only=True)

    class _NoVideoProcessor(proc_cls):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    _NoVideoProcessor.__name__ = proc_cls.__name__
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    template = None
    for name in ("chat_template.jinja", "chat_template.json"):
        file = path / name
        if file.is_file():
            text = file.read_text(encoding="utf-8")
            template = json.loads(text)["chat_template"] if name.endswith(".json") else text
            break
    return _NoVideoProcessor(
        image_processor=AutoImageProcessor.from_pretrained(str(path), local_files_only=True),
        video_processor=None,
        feature_extractor=AutoFeatureExtractor.from_pretrained(str(path), local_files_only=True),
        tokenizer=tokenizer,
        chat_template=template or getattr(tokenizer, "chat_template", None),
    )


# --------------------------------------------------------------------------- function calling

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def tools_block(specs: list[dict]) -> str:
    """Qwen2.5's tool instructions (its chat template's words), for templates that render none."""
    listed = "\n".join(json.dumps(spec, ensure_ascii=False) for spec in specs)
    return ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{listed}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def tool_call_text(name: str, arguments: str) -> str:
    """A past call as the model writes one."""
    try:
        args: Any = json.loads(arguments)
    except ValueError:
        args = arguments
    return f"{TOOL_OPEN}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{TOOL_CLOSE}"


def tool_prefill(tool_choice: str) -> str:
    """The reply's forced start: "required" opens a call, a function's name opens a call to it."""
    if tool_choice == "required":
        return TOOL_OPEN + "\n"
    if tool_choice not in ("auto", "none"):
        return f'{TOOL_OPEN}\n{{"name": {json.dumps(tool_choice)}, "arguments": '
    return ""


class ToolCallFilter:
    """Streamed reply text in, the text to show and speak out; ``<tool_call>`` blocks are held
    back and become ``job.function_call`` as each closes (or at the end). Text that may be the
    start of ``<tool_call>`` waits for the next piece. After the first call nothing more is
    spoken. A block that is not ``{"name": ..., "arguments": {...}}`` JSON naming one of the
    job's tools is dropped with a warning (the reply keeps the text before it)."""

    def __init__(self, job: ReplyJob, prefill: str = "") -> None:
        self.job = job
        self.names = {t.name for t in job.tools}
        self.pending = prefill  # text not yet passed on or parsed
        self.in_call = prefill.startswith(TOOL_OPEN)
        self.called = self.in_call
        self.calls = 0

    def push(self, delta: str) -> str:
        self.pending += delta
        out = ""
        while True:
            if self.in_call:
                end = self.pending.find(TOOL_CLOSE)
                if end < 0:
                    return out
                self._call(self.pending[len(TOOL_OPEN):end])
                self.pending = self.pending[end + len(TOOL_CLOSE):]
                self.in_call = False
                continue
            start = self.pending.find(TOOL_OPEN)
            if start >= 0:
                if not self.called:
                    out += self.pending[:start]
                self.pending = self.pending[start:]
                self.in_call = self.called = True
                continue
            keep = _partial_suffix(self.pending, TOOL_OPEN)
            passed, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
            if not self.called:
                out += passed
            return out

    def finish(self) -> str:
        """The end of the reply: an open block is parsed; other held text is returned."""
        rest, self.pending = self.pending, ""
        if self.in_call:
            self.in_call = False
            self._call(rest[len(TOOL_OPEN):])
            return ""
        return "" if self.called else rest

    def _call(self, body: str) -> None:
        try:
            call = json.loads(body.strip())
            name, args = call["name"], call.get("arguments", {})
            if isinstance(args, str):
                args = json.loads(args)
            if name not in self.names or not isinstance(args, dict):
                raise ValueError(f"{name!r} is not one of the tools" if name not in self.names
                                 else "arguments are not an object")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("qwen_omni: dropped a malformed tool call (%s): %.200r", exc, body)
            return
        self.calls += 1
        self.job.function_call(name, json.dumps(args, ensure_ascii=False))


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that ``marker`` starts with."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
