"""TEST DOUBLE of MiniCPM-o 4.5's remote code: not the model, and it has no weights worth the name.

It implements the methods and signatures the real ``modeling_minicpmo.py`` documents (the ones
``core/processors/minicpm_o.py`` calls), so the backend runs its real loading path
(``AutoModel.from_pretrained(..., trust_remote_code=True)``) and real call sequence. Replies are
fixed words and tones. Every call is appended to ``calls.jsonl`` beside the model files, so a
test in another process can check what the backend asked for.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedModel

from .configuration_minicpmo_double import MiniCPMODoubleConfig

RATE = 24000
REPLY = ["I see", " and hear", " you, friend."]


def _tone(seconds: float, freq: float = 330.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.25 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _kind(part) -> str:
    if isinstance(part, str):
        return "text"
    if isinstance(part, np.ndarray):
        assert part.dtype == np.float32 and part.ndim == 1, "audio must be 16 kHz float32 mono"
        return "audio"
    if hasattr(part, "size") and hasattr(part, "mode"):
        return "image"
    raise TypeError(f"unsupported content {type(part).__name__}")


class MiniCPMODouble(PreTrainedModel):
    config_class = MiniCPMODoubleConfig
    base_model_prefix = "double"
    _supports_sdpa = True  # as the real model: the model card loads it with attn_implementation="sdpa"

    def __init__(self, config: MiniCPMODoubleConfig) -> None:
        super().__init__(config)
        self.scale = nn.Parameter(torch.ones(1))
        self.session_id = None
        self.prefilled: list[str] = []
        self.tts_ready = False
        self.post_init()

    def _log(self, method: str, **fields) -> None:
        path = os.path.join(self.config._name_or_path, "calls.jsonl")
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"method": method, **fields}) + "\n")

    def init_tts(self, streaming=True, enable_float16=False, n_timesteps=10, **kwargs):
        self.tts_ready = True
        self._log("init_tts", streaming=streaming, n_timesteps=n_timesteps,
                  init_flags=[self.config.init_vision, self.config.init_audio, self.config.init_tts])

    def reset_session(self, reset_token2wav_cache=True):
        self.session_id = None
        self.prefilled = []
        self._log("reset_session", reset_token2wav_cache=reset_token2wav_cache)

    def init_token2wav_cache(self, prompt_speech_16k):
        self._log("init_token2wav_cache", samples=len(prompt_speech_16k))

    def streaming_prefill(self, session_id, msgs, omni_mode=True, max_slice_nums=None, use_tts_template=True,
                          enable_thinking=False, is_last_chunk=False, **kwargs):
        assert session_id is not None, "session_id cannot be None"
        assert len(msgs) == 1, "the real model prefills one message per call"
        msg = msgs[0]
        assert msg["role"] in ("system", "user", "assistant")
        if self.session_id != session_id:  # the real model's is_first: a new session starts clean
            self.session_id = session_id
            self.prefilled = []
        kinds = [_kind(c) for c in msg["content"]]
        self.prefilled.append(msg["role"])
        text = " ".join(c for c in msg["content"] if isinstance(c, str))
        self._log("streaming_prefill", session_id=session_id, role=msg["role"], kinds=kinds, text=text,
                  is_last_chunk=is_last_chunk)
        return f"<prompt {len(self.prefilled)}>"

    def streaming_generate(self, session_id, bos_input=None, generate_audio=True, audio_token_chunk_size=25,
                           max_new_tokens=256, enable_thinking=False, use_tts_template=True, do_sample=True,
                           enable_speculative_snapshot=False, **kwargs):
        assert session_id == self.session_id, "generate continues the prefilled session"
        slow = any(r == "user" for r in self.prefilled) and "slow" in self._last_text()
        pieces = [f" word{i}" for i in range(40)] if slow else REPLY
        self._log("streaming_generate", session_id=session_id, generate_audio=generate_audio,
                  max_new_tokens=max_new_tokens, temperature=kwargs.get("temperature"))
        try:
            for piece in pieces:
                if slow:
                    time.sleep(0.05)
                if generate_audio:
                    yield torch.from_numpy(_tone(0.3)), piece
                else:
                    yield piece
            if generate_audio:
                yield None, None
        finally:
            self._log("generate_closed")
        self.prefilled.append("assistant")

    def _last_text(self) -> str:
        path = os.path.join(self.config._name_or_path, "calls.jsonl")
        with open(path, encoding="utf-8") as f:
            prefills = [json.loads(line) for line in f if '"streaming_prefill"' in line]
        return prefills[-1]["text"] if prefills else ""

    def as_duplex(self, device=None, **kwargs):
        self._log("as_duplex", kwargs=kwargs)
        return MiniCPMODuplexDouble(self, **kwargs)


class MiniCPMODuplexDouble:
    """The duplex view: one-second units in; after speech followed by a quiet unit it speaks two
    units (``end_of_turn`` on the second), otherwise it listens."""

    def __init__(self, model: MiniCPMODouble, chunk_ms: int = 1000, **kwargs) -> None:
        self.model = model
        self.chunk_ms = chunk_ms
        self.heard_speech = False
        self.quiet = False
        self.speaking = 0
        self.stopped = False

    def prepare(self, prefix_system_prompt=None, suffix_system_prompt=None, ref_audio=None, prompt_wav_path=None,
                context_previous_marker="\n\nprevious: "):
        self.heard_speech = self.quiet = False
        self.speaking = 0
        self.stopped = False
        self.model._log("duplex_prepare", prefix=prefix_system_prompt, suffix=suffix_system_prompt,
                        ref_samples=None if ref_audio is None else len(ref_audio))
        return (prefix_system_prompt or "") + (suffix_system_prompt or "")

    def streaming_prefill(self, audio_waveform=None, frame_list=None, text_list=None, max_slice_nums=1,
                          batch_vision_feed=False):
        if self.stopped:
            return {"success": False, "reason": "stopped"}
        rms = float(np.sqrt(np.mean(np.square(audio_waveform)))) if audio_waveform is not None else 0.0
        self.model._log("duplex_prefill", samples=len(audio_waveform) if audio_waveform is not None else 0,
                        frames=len(frame_list or []), rms=round(rms, 4))
        if rms > 0.01:
            self.heard_speech, self.quiet = True, False
        elif self.heard_speech:
            self.quiet = True
        return {"success": True, "cost_all": 0.0}

    def streaming_generate(self, prompt_wav_path=None, max_new_speak_tokens_per_chunk=20, decode_mode="sampling",
                           temperature=0.7, top_k=20, top_p=0.8, listen_prob_scale=1.0, listen_top_k=None,
                           text_repetition_penalty=1.05, text_repetition_window_size=512):
        if self.heard_speech and self.quiet and not self.speaking:
            self.speaking = 2
            self.heard_speech = False
        if self.speaking:
            self.speaking -= 1
            end = self.speaking == 0
            return {"is_listen": False, "text": "Hello there." if end else "Hi! ", "audio_waveform": _tone(1.0),
                    "end_of_turn": end, "current_time": 0}
        return {"is_listen": True, "text": "", "audio_waveform": np.zeros(RATE, dtype=np.float32),
                "end_of_turn": False, "current_time": 0}

    def set_session_stop(self):
        self.stopped = True
        self.model._log("duplex_stop")

    def set_break_event(self):
        pass

    def clear_break_event(self):
        pass
