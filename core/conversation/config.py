"""Per-session conversation settings; the realtime layer maps ``session.update`` onto these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from core.conversation.vad import PAUSE_MS
from core.protocol import IDLE_TIMEOUT_MS_RANGE

# semantic_vad: the longest wait after speech per eagerness (OpenAI's documented 8/4/2 s).
EAGERNESS_MAX_WAIT_MS = {"low": 8000, "medium": 4000, "high": 2000, "auto": 4000}
# Under semantic_vad the words are transcribed after a shorter silence than the VAD's usual
# speculation point: the score, not a fixed hangover, ends the turn.
SEMANTIC_PAUSE_MS = 32
# Our turn_detection fields (not OpenAI's) and their defaults: the session object shows one only
# when it differs.
EXTENSION_DEFAULTS = {"ignore_backchannels": True, "resume_false_interruption": True, "yield_at_onset": True}


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
    # Our extensions (not in OpenAI's object; echoed only when turned off): speech over the
    # assistant's audio is judged first, and a backchannel neither stops nor answers it
    # (``overlap.py``); an interruption with no words after it (a cough) resumes the reply.
    ignore_backchannels: bool = True
    resume_false_interruption: bool = True
    # Issue 47: with ``ignore_backchannels``, the reply stops at a voice's onset (``speech_started``
    # at once, the item cut to what was heard) while the judge decides; a backchannel or noise then
    # resumes it where it stopped. Off: the reply plays on until the judge calls an interruption.
    yield_at_onset: bool = True
    # server_vad only (as OpenAI's): after the last reply has been heard, this long without speech
    # commits the silence and prompts a reply (``idle_timeout.py``). None: off.
    idle_timeout_ms: StrictInt | None = Field(None, ge=IDLE_TIMEOUT_MS_RANGE[0], le=IDLE_TIMEOUT_MS_RANGE[1])

    @model_validator(mode="after")
    def _idle_timeout_server_vad_only(self) -> TurnDetection:
        if self.idle_timeout_ms is not None and self.type != "server_vad":
            raise ValueError(f"idle_timeout_ms is supported with server_vad only, not {self.type}")
        return self

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
        """The protocol's object: OpenAI's semantic_vad carries no VAD tuning fields; our
        extensions only when they differ from the default."""
        extras = {k: getattr(self, k) for k, default in EXTENSION_DEFAULTS.items() if getattr(self, k) != default}
        if self.type == "semantic_vad":
            return {"type": self.type, "eagerness": self.eagerness, "create_response": self.create_response,
                    "interrupt_response": self.interrupt_response, **extras}
        return {**self.model_dump(exclude={"eagerness", *EXTENSION_DEFAULTS}, exclude_none=True), **extras}


class FunctionTool(BaseModel):
    """A function the model may call (``session.tools`` / ``response.tools``)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"] = "function"
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field("", max_length=4096)
    parameters: dict = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolFilter(BaseModel):
    """Which of an MCP server's tools a rule names: by name, by read-only hint, or both (both must
    hold); an empty filter names every tool."""

    model_config = ConfigDict(extra="forbid")

    tool_names: list[str] | None = Field(None, max_length=512)
    read_only: bool | None = None

    def matches(self, name: str, read_only: bool) -> bool:
        return ((self.tool_names is None or name in self.tool_names)
                and (self.read_only is None or self.read_only == read_only))


class ApprovalFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    always: ToolFilter | None = None
    never: ToolFilter | None = None


class McpServerTool(BaseModel):
    """An MCP server whose tools the server lists and calls itself (``session.tools`` entry of
    ``type: "mcp"``; ``core/conversation/mcp_tools.py``). ``headers`` and ``authorization`` go to
    that server only: every dump leaves them out (the session echo, recordings, logs)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["mcp"] = "mcp"
    # The model sees each tool as a function ``<label>__<tool>`` (at most 64 characters).
    server_label: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
    server_url: str = Field(max_length=2048)
    server_description: str | None = Field(None, max_length=4096)
    allowed_tools: list[str] | ToolFilter | None = None
    # Absent: every call waits for the user's approval (as OpenAI's default).
    require_approval: Literal["always", "never"] | ApprovalFilter | None = None
    headers: dict[str, str] | None = Field(None, exclude=True, repr=False)
    authorization: str | None = Field(None, exclude=True, repr=False)

    def offers(self, name: str, read_only: bool) -> bool:
        """Whether ``allowed_tools`` lets the model see this tool."""
        if self.allowed_tools is None:
            return True
        if isinstance(self.allowed_tools, list):
            return name in self.allowed_tools
        return self.allowed_tools.matches(name, read_only)

    def needs_approval(self, name: str, read_only: bool) -> bool:
        """``always``/``never``, or a filter: a tool ``always`` names asks, one ``never`` names
        does not; any other asks, unless only ``always`` was given."""
        rule = self.require_approval
        if rule is None or isinstance(rule, str):
            return rule != "never"
        if rule.always is not None and rule.always.matches(name, read_only):
            return True
        if rule.never is not None and rule.never.matches(name, read_only):
            return False
        return rule.never is not None or rule.always is None

    def secret_headers(self) -> dict[str, str]:
        """What the MCP server gets with each request: ``headers``, and ``authorization`` as a
        bearer token."""
        out = dict(self.headers or {})
        if self.authorization:
            out["Authorization"] = f"Bearer {self.authorization}"
        return out

    def wire(self) -> dict:
        """The session echo's entry: as given, less the secrets (and the unset fields)."""
        return self.model_dump(exclude_none=True)


class Truncation(BaseModel):
    """What a reply's context keeps when the conversation outgrows the model's input limit
    (OpenAI's ``session.truncation``; ``truncation.py``). The limit is the backend's context less
    the reply's ``max_output_tokens`` and the instructions (always kept), or ``post_instructions``
    when that is lower. ``auto``: the oldest items are dropped until the rest fits.
    ``retention_ratio``: until ``retention_ratio`` of the limit is used, so the next truncation
    comes turns later (and the prompt's cached prefix lasts). ``disabled``: nothing is dropped; a
    reply that would not fit fails."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["auto", "disabled", "retention_ratio"] = "auto"
    retention_ratio: float = Field(1.0, ge=0.0, le=1.0)
    post_instructions: StrictInt | None = Field(None, ge=1)

    def wire(self) -> str | dict:
        """The protocol's value: ``"auto"``, ``"disabled"`` or the retention-ratio object."""
        if self.type != "retention_ratio":
            return self.type
        out: dict = {"type": "retention_ratio", "retention_ratio": self.retention_ratio}
        if self.post_instructions is not None:
            out["token_limits"] = {"post_instructions": self.post_instructions}
        return out


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
    # What a reply reads is ``truncation``'s to decide (by tokens); this only bounds the items a
    # session holds in memory, far above what a model's context takes (any mode, ``disabled`` too).
    max_history_messages: int = Field(1024, ge=2, le=4096)
    truncation: Truncation = Field(default_factory=Truncation)
    tools: list[FunctionTool] = Field(default_factory=list, max_length=64)
    mcp_servers: list[McpServerTool] = Field(default_factory=list, max_length=32)
    # "auto" | "none" | "required" | the name of one function to call
    tool_choice: str = "auto"
    transcribe_input: bool = True
    # The room (``room.py``). Our extension: the server cancels the echo of its own reply in the
    # microphone, by default; a WebRTC call turns it off, the browser has cancelled it already.
    echo_cancellation: bool = True
    # OpenAI's ``audio.input.noise_reduction`` type: noise suppression before the VAD (None: off).
    noise_reduction: Literal["near_field", "far_field"] | None = None
