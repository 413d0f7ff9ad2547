"""One Qwen-Omni reply as it streams: the Thinker's tokens out as text at once, cut into speakable
pieces, and each piece spoken by the Talker and vocoder in the backend's talker thread while the
Thinker keeps writing (``core/processors/qwen_omni.py`` explains why this is not ``generate``).

``ReplyStreamer`` is the ``transformers`` streamer; ``ReplySpeech`` keeps the hidden states the
Talker is conditioned on and the queue of pieces. Both use only the backend's public parts
(``model``, ``family``, ``options``, ``processor``, ``talker_pool``, ``speak_piece``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

from core.cascade.chunker import SpeechChunker
from core.conversation import ReplyJob
from core.processors.qwen_tools import ToolCallFilter, tool_prefill

log = logging.getLogger(__name__)


class ReplySpeech:
    """Hidden-state capture and the piece queue for one reply.

    The forward hook stores each Thinker step's input embeddings and last hidden state; a step
    that consumed reply token ``j`` is entry ``j + 1`` (entry 0 is the prompt). A piece can be
    spoken once every token in it has its states, i.e. one step after its last token.
    """

    def __init__(self, backend: Any, job: ReplyJob, inputs: dict, voice: str) -> None:
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
            rate = self.backend.options.vocoder_sample_rate
            try:
                wav = self.backend.speak_piece(self.state, context_ids, ctx_embeds, ctx_hidden, piece_ids,
                                               piece_embeds, piece_hidden, self.voice, max_codes, job.cancel,
                                               early=(lambda first: job.audio(first, rate)) if start == 0 else None)
                job.audio(wav, rate)
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


class ReplyStreamer:
    """``transformers`` streamer: text deltas out at once, speakable pieces to ``ReplySpeech``.

    Pieces are cut by the product's ``SpeechChunker`` on the text; each piece is mapped back to
    the tokens it came from (character offsets per token), since the Talker reads tokens.
    """

    def __init__(self, backend: Any, job: ReplyJob, eos: set[int], speech: ReplySpeech | None) -> None:
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
