"""What a conversation tells the realtime layer, in order: one small frozen dataclass per kind.

The worker's session turns each into protocol events (``worker/session.py``); tests and the
benchmarks read them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    item_id: str
    audio_start_ms: int
    type: Literal["speech_started"] = "speech_started"


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    item_id: str
    audio_end_ms: int
    stream_ms: int | None = None  # how much audio had come when the turn's end was decided (same clock)
    type: Literal["speech_stopped"] = "speech_stopped"


@dataclass(frozen=True, slots=True)
class InputCommitted:
    """A user audio item entered the conversation (after VAD stop or an explicit commit)."""

    item_id: str
    audio_ms: int
    previous_item_id: str | None = None
    type: Literal["input_committed"] = "input_committed"


@dataclass(frozen=True, slots=True)
class InputTranscript:
    item_id: str
    transcript: str
    audio_ms: int = 0  # length of the speech transcribed
    type: Literal["input_transcript"] = "input_transcript"


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    response_id: str
    item_id: str
    output_audio: bool  # per response: response.create may turn audio off for one reply
    in_conversation: bool = True  # False: out of band (``conversation: "none"``), history untouched
    previous_item_id: str | None = None
    metadata: dict[str, str] | None = None
    type: Literal["response_started"] = "response_started"


@dataclass(frozen=True, slots=True)
class TextDelta:
    response_id: str
    item_id: str
    delta: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """PCM16 mono at ``sample_rate`` (always 24 kHz for replies)."""

    response_id: str
    item_id: str
    pcm: bytes
    sample_rate: int = 24000
    type: Literal["audio_chunk"] = "audio_chunk"

    @property
    def duration_ms(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate * 1000.0


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """One function call a reply made: its own item, the call id the client answers with.

    A call of an MCP server's tool (``mcp_tools.py``) has ``server_label`` and the server's own
    tool name in ``tool``; the server runs it (``output`` or ``error`` once done), or, when it
    needs the user's approval (``approval``), it becomes an approval request instead."""

    item_id: str
    call_id: str
    name: str
    arguments: str = ""
    complete: bool = False  # all arguments made (a cancelled reply may leave a call unfinished)
    server_label: str | None = None
    tool: str | None = None
    approval: bool = False
    approval_request_id: str | None = None  # an approved call: the request it answers
    output: str | None = None
    error: dict | None = None

    @property
    def kind(self) -> Literal["function_call", "mcp_call", "mcp_approval_request"]:
        if self.server_label is None:
            return "function_call"
        return "mcp_approval_request" if self.approval else "mcp_call"


@dataclass(frozen=True, slots=True)
class FunctionCallStarted:
    response_id: str
    call: FunctionCall
    type: Literal["function_call_started"] = "function_call_started"


@dataclass(frozen=True, slots=True)
class FunctionCallDelta:
    response_id: str
    call: FunctionCall
    delta: str
    type: Literal["function_call_delta"] = "function_call_delta"


@dataclass(frozen=True, slots=True)
class FunctionCallDone:
    """The call's complete arguments (a JSON string)."""

    response_id: str
    call: FunctionCall
    type: Literal["function_call_done"] = "function_call_done"


@dataclass(frozen=True, slots=True)
class McpCallRunning:
    """The server has sent an MCP call (``response.mcp_call.in_progress``)."""

    response_id: str
    call: FunctionCall
    type: Literal["mcp_call_running"] = "mcp_call_running"


@dataclass(frozen=True, slots=True)
class McpCallFinished:
    """An MCP call's result: ``call.output``, or ``call.error`` when it failed."""

    response_id: str
    call: FunctionCall
    type: Literal["mcp_call_finished"] = "mcp_call_finished"


@dataclass(frozen=True, slots=True)
class McpListStarted:
    """Listing an MCP server's tools began: its ``mcp_list_tools`` item joined the conversation."""

    item_id: str
    server_label: str
    previous_item_id: str | None = None
    type: Literal["mcp_list_started"] = "mcp_list_started"


@dataclass(frozen=True, slots=True)
class McpListFinished:
    """The listing ended: ``tools`` as the item shows them, or ``error`` (why it failed)."""

    item_id: str
    server_label: str
    tools: tuple[dict, ...] = ()
    error: str | None = None
    type: Literal["mcp_list_finished"] = "mcp_list_finished"


@dataclass(frozen=True, slots=True)
class ResponseDone:
    """Final event of a response. ``text``/``audio_ms`` count only what was emitted."""

    response_id: str
    item_id: str
    status: Literal["completed", "cancelled", "incomplete", "failed"]
    reason: str | None
    text: str
    audio_ms: float
    output_tokens: int = 0
    prompt_tokens: int = 0
    in_conversation: bool = True
    metadata: dict[str, str] | None = None
    output_audio: bool = True
    calls: tuple[FunctionCall, ...] = ()
    type: Literal["response_done"] = "response_done"


@dataclass(frozen=True, slots=True)
class ConversationError:
    """A problem that belongs to the session, not to one call (e.g. ASR failed)."""

    code: str
    message: str
    type: Literal["error"] = "error"


@dataclass(frozen=True, slots=True)
class Backchannel:
    """Speech over the assistant's reply that was not an interruption ("mm-hmm", or noise): the
    reply goes on, nothing is committed (``overlap.py``)."""

    item_id: str | None  # the assistant item being heard
    audio_start_ms: int
    audio_end_ms: int
    transcript: str  # '' for noise
    type: Literal["backchannel"] = "backchannel"


@dataclass(frozen=True, slots=True)
class ItemTruncated:
    """The server cut an assistant item to what the listener heard (a barge-in after the reply
    was made, while its audio still played)."""

    item_id: str
    audio_end_ms: int
    type: Literal["item_truncated"] = "item_truncated"


@dataclass(frozen=True, slots=True)
class ResponseResumed:
    """A false interruption (no words came): this response plays the rest of the cut one."""

    response_id: str
    item_id: str
    resumed_item_id: str
    audio_start_ms: int  # where in the cut item it goes on
    type: Literal["response_resumed"] = "response_resumed"


ConversationEvent = (
    SpeechStarted
    | SpeechStopped
    | InputCommitted
    | InputTranscript
    | ResponseStarted
    | TextDelta
    | AudioChunk
    | FunctionCallStarted
    | FunctionCallDelta
    | FunctionCallDone
    | ResponseDone
    | ConversationError
    | Backchannel
    | ItemTruncated
    | ResponseResumed
    | McpCallRunning
    | McpCallFinished
    | McpListStarted
    | McpListFinished
)


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What the client actually received before a cancel: needed for truncation."""

    response_id: str
    item_id: str
    text: str
    audio_ms: float
