"""Test doubles for the conversation core: a scripted backend and an energy "VAD" model.

``ScriptedBackend`` is not a model: it replies with a fixed script of words, one audio segment
per word (a tone whose length is known), at a set pace, and "transcribes" any voiced clip as
``transcript``. ``EnergyVadModel`` stands in for Silero: a window is speech when it is loud.
With both, turn-taking runs deterministically and fast, as LiveKit Agents' scripted fakes do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
import time

import numpy as np

from core.conversation import ReplyJob, ReplyStats
from core.processors.base import Backend, Capability, ModelCapabilities

SEGMENT_S = 0.2  # audio per scripted word


class EnergyVadModel:
    """Silero's ``step`` interface: probability 1 for a loud window, 0 for a quiet one."""

    def step(self, window: np.ndarray, state: np.ndarray) -> tuple[float, np.ndarray]:
        return (1.0 if float(np.sqrt(np.mean(window**2))) > 0.05 else 0.0), state


class _Options:
    audio_chunk_ms = 100
    instructions = "scripted"


class ScriptedBackend(Backend):
    name = "scripted"
    supports_tools = False

    def __init__(self, words: list[str], *, transcript_first: bool = True, step_s: float = 0.0,
                 transcript: str = "hello there", speculative: bool = True,
                 glance: str | Callable[[np.ndarray], str] | None = None,
                 meaning: float | Callable[[str], float] | None = None, leading_spaces: bool = False,
                 transcribe_s: float = 0.0) -> None:
        super().__init__()
        self.capabilities = ModelCapabilities.of(*Capability, transcript_first=transcript_first,
                                                 speculative_reply=speculative, supports_tools=self.supports_tools)
        self.options = _Options()
        self.words = words
        self.step_s = step_s
        self.leading_spaces = leading_spaces  # deltas as a real tokenizer makes them: " word", not "word "
        self.transcript = transcript
        # What a glance at speech over a reply hears (None: no fast recogniser); a callable hears the clip.
        self.glance = glance
        # P(interruption) its scripted reader gives the words (None: the word list); a callable reads them.
        self.meaning = meaning
        self.vad_model = EnergyVadModel()
        self.io_pool = self.threads.pool("scripted-io")
        self.model_pool = self.threads.pool("scripted-model")
        self.transcribe_pool = self.threads.pool("scripted-asr")
        self.jobs: list[ReplyJob] = []
        self.released: list = []
        self.transcribe_s = transcribe_s  # how long a turn's transcript takes
        self.read_aheads: list[str] = []  # the words of each ``read_ahead`` job, in order

    def load(self, progress=None) -> None:
        pass

    @property
    def loaded(self) -> bool:
        return True

    def new_model_state(self) -> dict:
        return {"replies": 0}

    def release_model_state(self, state) -> None:
        self.released.append(state)

    def transcribe_glance(self, audio: np.ndarray) -> str | None:
        return self.glance(audio) if callable(self.glance) else self.glance

    def interruption_probability(self, words: str) -> float | None:
        return self.meaning(words) if callable(self.meaning) else self.meaning

    def read_ahead(self, job: ReplyJob) -> None:
        self.read_aheads.append(job.items[-1].text)

    def transcribe_turn(self, audio: np.ndarray) -> str:
        time.sleep(self.transcribe_s)
        return self.transcript if audio.size and float(np.abs(audio).max()) > 0.05 else ""

    def prepare_image(self, data: bytes) -> str:
        return f"{len(data)} bytes"

    def _run(self, job: ReplyJob) -> ReplyStats:
        return self._say(job, self.words)

    def _say(self, job: ReplyJob, words: list[str]) -> ReplyStats:
        for i, word in enumerate(words):
            if job.cancelled:
                return ReplyStats(stop_reason="cancelled")
            job.text((" " + word if i else word) if self.leading_spaces else word + " ")
            if job.output_audio:
                job.begin_segment(word)
                job.audio(np.full(int(24000 * SEGMENT_S), 0.1, dtype=np.float32), 24000)
                job.end_segment()
            time.sleep(self.step_s)
        job.state["replies"] += 1
        return ReplyStats(output_tokens=len(words), prompt_tokens=len(job.items))

    async def generate_reply(self, job: ReplyJob) -> ReplyStats:
        self.jobs.append(job)
        return await asyncio.get_running_loop().run_in_executor(self.model_pool, self._run, job)

    def close(self) -> None:
        super().close()  # its own threads (built without the runtime's)


class ScriptedToolBackend(ScriptedBackend):
    """A scripted backend that calls functions: offered the function ``call`` names (and not
    just after a result), it calls it with the scripted JSON arguments; otherwise it says its
    words and then the last result it read, so a test sees the result spoken."""

    supports_tools = True

    def __init__(self, words: list[str], call: tuple[str, str] | None = None, **kwargs) -> None:
        super().__init__(words, **kwargs)
        self.call = call

    def _run(self, job: ReplyJob) -> ReplyStats:
        last = job.items[-1] if job.items else None
        after_result = last is not None and last.type == "function_call_output"
        if self.call is not None and not after_result and any(t.name == self.call[0] for t in job.tools):
            job.function_call(*self.call)
            return ReplyStats(output_tokens=1, prompt_tokens=len(job.items))
        return self._say(job, self.words + ((last.output or "").split() if after_result else []))


def tone(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * 220 * t) * 0.5 * 32767).astype("<i2").tobytes()


def quiet(seconds: float, rate: int = 16000) -> bytes:
    return b"\x00\x00" * int(seconds * rate)
