"""Per-session conversation settings; the realtime layer maps ``session.update`` onto these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core.conversation.vad import PAUSE_MS

# semantic_vad: the longest wait after speech per eagerness (OpenAI's documented 8/4/2 s).
EAGERNESS_MAX_WAIT_MS = {"low": 8000, "medium": 4000, "high": 2000, "auto": 4000}
# Under semantic_vad the words are transcribed after a shorter silence than the VAD's usual
# speculation point: the score, not a fixed hangover, ends the turn.
SEMANTIC_PAUSE_MS = 32


class TurnDetection(BaseModel):
    """How a turn ends. ``server_vad``: a fixed silence after speech. ``semantic_vad``: the same
    VAD, but the wait follows an end-of-turn score of what was said (short when the words are a
    complete turn, up to the eagerness's maximum when not; see ``end_of_turn.py``).
    ``model_duplex``: the model hears the stream continuously and decides itself when to speak
    (MiniCPM-o); VAD then only reports speech start/stop. Backends list what they support in
    ``turn_detection_types`` (every one with ``server_vad`` has ``semantic_vad`` too)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad", "semantic_vad", "model_duplex"] = "server_vad"
    threshold: float = Field(0.5, ge=0.05, le=0.95)
    prefix_padding_ms: int = Field(300, ge=0, le=2000)
    silence_duration_ms: int = Field(500, ge=100, le=5000)
    eagerness: Literal["low", "medium", "high", "auto"] = "auto"
    create_response: bool = True
    interrupt_response: bool = True

    @property
    def vad_turns(self) -> bool:
        """Turns end (and are committed) by the server's VAD, with a fixed or a scored wait."""
        return self.type in ("server_vad", "semantic_vad")

    @property
    def end_silence_ms(self) -> int:
        """The silence that ends a turn when nothing shortens it (semantic: the eagerness max)."""
        return EAGERNESS_MAX_WAIT_MS[self.eagerness] if self.type == "semantic_vad" else self.silence_duration_ms

    @property
    def pause_ms(self) -> int:
        """Silence after which the words so far are transcribed (and, semantic, scored)."""
        return SEMANTIC_PAUSE_MS if self.type == "semantic_vad" else PAUSE_MS

    def wire(self) -> dict:
        """The protocol's object: OpenAI's semantic_vad carries no VAD tuning fields."""
        if self.type == "semantic_vad":
            return {"type": self.type, "eagerness": self.eagerness, "create_response": self.create_response,
                    "interrupt_response": self.interrupt_response}
        return self.model_dump(exclude={"eagerness"})


class FunctionTool(BaseModel):
    """A function the model may call (``session.tools`` / ``response.tools``)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = "function"
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field("", max_length=4096)
    parameters: dict = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ConversationConfig(BaseModel):
    """Per-session settings; the realtime layer maps ``session.update`` onto this."""

    model_config = ConfigDict(extra="forbid")

    instructions: str | None = None
    input_sample_rate: Literal[8000, 16000, 24000] = 24000
    turn_detection: TurnDetection | None = Field(default_factory=TurnDetection)
    output_audio: bool = True
    voice: str | None = None
    speed: float = Field(1.0, ge=0.5, le=2.0)
    temperature: float = Field(0.3, ge=0.0, le=2.0)
    max_output_tokens: int = Field(160, ge=1, le=4096)
    max_history_messages: int = Field(16, ge=2, le=256)
    tools: list[FunctionTool] = Field(default_factory=list, max_length=64)
    # "auto" | "none" | "required" | the name of one function to call
    tool_choice: str = "auto"
    transcribe_input: bool = True
