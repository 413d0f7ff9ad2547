"""Per-session conversation settings; the realtime layer maps ``session.update`` onto these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TurnDetection(BaseModel):
    """Server-side voice activity detection (``server_vad``), or ``model_duplex``: the model hears
    the stream continuously and decides itself when to speak (MiniCPM-o); VAD then only reports
    speech start/stop. Backends list what they support in ``turn_detection_types``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad", "model_duplex"] = "server_vad"
    threshold: float = Field(0.5, ge=0.05, le=0.95)
    prefix_padding_ms: int = Field(300, ge=0, le=2000)
    silence_duration_ms: int = Field(500, ge=100, le=5000)
    create_response: bool = True
    interrupt_response: bool = True


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
