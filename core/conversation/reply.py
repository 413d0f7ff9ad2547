"""One reply in the making: what a backend's generator gets (the request) and how it streams out.

A backend's ``generate`` receives a ``ReplyJob``: the history snapshot, the latest camera
frames, the system prompt and the settings for this one reply, a cancel flag, and thread-safe
ways to emit output. ``text`` and ``audio`` may be called from any thread; events reach the
client in call order. Audio goes in per segment: ``begin_segment(text)``, ``audio(samples, rate)``
any number of times, ``end_segment()``. A segment's text is what truncation keeps when its
audio was heard; audio is resampled to 24 kHz and sent in ``audio_chunk_ms`` pieces.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from core.audio import OUTPUT_RATE, StreamResampler, float_to_pcm16
from core.conversation.config import ConversationConfig
from core.conversation.end_of_turn import MessageEnd
from core.conversation.items import Item


@dataclass(slots=True)
class Segment:
    """One spoken piece of a reply: its text, how much audio was made and how much went out."""

    text: str
    total_samples: int = 0
    emitted_samples: int = 0


@dataclass(slots=True)
class ReplyStats:
    """What a generator reports when it ends; ``prefill_ms``/``reused_tokens`` where it knows them."""

    output_tokens: int = 0
    prompt_tokens: int = 0
    stop_reason: Literal["stop", "length", "cancelled"] = "stop"
    prefill_ms: float | None = None
    reused_tokens: int = 0


@dataclass(slots=True)
class Response:
    """The conversation's record of one reply: ids, what went out, and how to stop it."""

    response_id: str
    item_id: str
    output_audio: bool
    in_conversation: bool = True
    metadata: dict[str, str] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    text: str = ""
    audio_samples: int = 0
    segments: list[Segment] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    cancel_at: float | None = None
    # A speculative reply starts during the silence hangover and stays held (events buffered,
    # nothing sent) until the turn really ends; ``spec`` names the speculation it belongs to.
    held: bool = False
    spec: int | None = None
    spec_text: str = ""  # the words the speculation heard (what the reply answers)
    # semantic_vad: the backend scores the user's words while it prefills this held reply
    # (``ReplyJob.end_of_message``) instead of a separate scoring pass.
    scores_turn: bool = False
    turn_scored: bool = False
    held_events: list = field(default_factory=list)
    pending_finish: tuple | None = None
    calls: list = field(default_factory=list)  # FunctionCall, in the order made
    # Barge-in (``vad_turns.py``, ``replies.py``): every audio piece made (a false interruption replays the rest),
    # what the listener had heard when it was cut, and after a cut with no words yet, output
    # is held (``shadow``: its generator waits at ``gate``) and, once resumed, goes to the response that resumes it.
    pcm: list[bytes] = field(default_factory=list)
    generating: bool = True
    cut_samples: int | None = None
    shadow: bool = False  # cut, not yet stopped: its generator waits at ``gate`` (costs no CPU)
    gate: threading.Event = field(default_factory=lambda: _open_event())
    forward: Response | None = None
    forward_segments: dict[int, int] = field(default_factory=dict)
    tool_round: int = 0  # follow-up replies in a row that speak MCP results (conversation.py)

    @property
    def audio_ms(self) -> float:
        return self.audio_samples * 1000.0 / OUTPUT_RATE


def _open_event() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


class ReplyOwner(Protocol):
    """What a job needs of its conversation: where output lands, on the conversation's loop."""

    backend: Any
    model_state: Any

    def call_soon(self, fn: Callable, *args) -> None: ...
    def emit_text(self, resp: Response, delta: str) -> None: ...
    def add_segment(self, resp: Response, segment: Segment) -> None: ...
    def emit_audio(self, resp: Response, index: int, pcm: bytes) -> None: ...
    def begin_call(self, resp: Response, name: str) -> None: ...
    def call_arguments(self, resp: Response, index: int, delta: str) -> None: ...
    def end_call(self, resp: Response, index: int) -> None: ...
    def turn_scored(self, resp: Response, probability: MessageEnd | float | None) -> None: ...


class ReplyJob:
    """The request and the output channel of one reply (see the module docstring)."""

    def __init__(
        self,
        conv: ReplyOwner,
        resp: Response,
        items: list[Item],
        frames: list[Any],
        system: str,
        cfg: ConversationConfig,
    ) -> None:
        self.items = items
        self.frames = frames
        # The functions this reply may call; ``tool_choice``: "auto", "required" or one name.
        self.tools = [] if cfg.tool_choice == "none" else list(cfg.tools)
        if cfg.tool_choice not in ("auto", "none", "required"):
            self.tools = [t for t in self.tools if t.name == cfg.tool_choice]
        self.tool_choice = cfg.tool_choice if self.tools else "none"
        self.system = system
        self.config = cfg
        self.output_audio = resp.output_audio
        self.voice = cfg.voice
        self.cancel = resp.cancel
        self.item_id = resp.item_id  # the assistant item this reply becomes
        self.owner = conv  # one per conversation: a backend that caches state per conversation keys on it
        self.state = conv.model_state  # the backend's per-conversation state (a KV cache, say)
        self._conv = conv
        self._resp = resp
        self.wants_end_of_message = resp.scores_turn
        self._chunk_samples = OUTPUT_RATE * conv.backend.audio_chunk_ms // 1000
        self._segment: int | None = None
        self._resampler: StreamResampler | None = None
        self._rate = OUTPUT_RATE
        self._pending = np.zeros(0, dtype=np.float32)
        self._segments = 0
        self._calls = 0
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def add_functions(self, functions: list) -> None:
        """Functions beyond the config's (an MCP server's tools), under the same ``tool_choice``."""
        cfg = self.config
        if not functions or cfg.tool_choice == "none":
            return
        tools = list(cfg.tools) + list(functions)
        if cfg.tool_choice not in ("auto", "required"):
            tools = [t for t in tools if t.name == cfg.tool_choice]
        self.tools = tools
        self.tool_choice = cfg.tool_choice if tools else "none"

    def end_of_message(self, probability: MessageEnd | float | None) -> None:
        """The model's probability that the user's last message is complete (a ``MessageEnd``
        adds it without the last word; None: it could not tell), made while prefilling this
        reply (``semantic_vad``). Any thread; once."""
        if self._resp.turn_scored:
            return
        self._resp.turn_scored = True
        self._conv.call_soon(self._conv.turn_scored, self._resp, probability)

    def _wait_gate(self) -> None:
        """A reply cut by a voice with no words yet is held here (on its own thread) until it
        resumes or is stopped; it makes nothing meanwhile, so the user's turn has the CPU."""
        gate = self._resp.gate
        while not gate.wait(0.05):
            if self.cancel.is_set():
                return

    def text(self, delta: str) -> None:
        self._wait_gate()
        if delta and not self.cancel.is_set():
            self._conv.call_soon(self._conv.emit_text, self._resp, delta)

    def function_call(self, name: str, arguments: str) -> None:
        """The reply calls ``name`` with ``arguments`` (a JSON string); any thread. A backend
        that streams arguments calls ``begin_call`` / ``call_arguments`` / ``end_call`` instead."""
        index = self.begin_call(name)
        self.call_arguments(index, arguments)
        self.end_call(index)

    def begin_call(self, name: str) -> int:
        with self._lock:
            index = self._calls
            self._calls += 1
        self._conv.call_soon(self._conv.begin_call, self._resp, name)
        return index

    def call_arguments(self, index: int, delta: str) -> None:
        if delta:
            self._conv.call_soon(self._conv.call_arguments, self._resp, index, delta)

    def end_call(self, index: int) -> None:
        self._conv.call_soon(self._conv.end_call, self._resp, index)

    def begin_segment(self, text: str) -> None:
        with self._lock:
            self._begin(text)

    def _begin(self, text: str) -> None:
        self._flush(last=True)
        self._segment = self._segments
        self._segments += 1
        self._resampler = None
        self._conv.call_soon(self._conv.add_segment, self._resp, Segment(text))

    def audio(self, samples: np.ndarray, rate: int) -> None:
        """Float samples in [-1, 1] at ``rate``; resampled to 24 kHz and sent in ``audio_chunk_ms`` pieces."""
        self._wait_gate()
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
            self._push(self._resampler.process(samples))

    def audio_pcm16(self, pcm: bytes, rate: int = OUTPUT_RATE) -> None:
        """PCM16 mono bytes (a TTS's output): the same as ``audio``."""
        self.audio(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0, rate)

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
        self._conv.call_soon(self._conv.emit_audio, self._resp, self._segment, float_to_pcm16(samples))


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
