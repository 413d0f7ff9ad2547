"""One session's conversation, the same for every backend: items, turns and responses.

A conversation is composed of parts, each owning its state and talking to the others through
public methods; ``Runtime`` is what they share (the loop and tasks, the ordered event stream, the
item history, the settings):

- ``Hearing`` (``hearing.py``): the input audio, the VAD, transcripts, glances, end of turn;
- the turn policy (``turn_policy.py``; the standard one is ``VadTurns``, ``vad_turns.py``): who
  holds the floor: turns, the overlap judgement, barge-in, resume. A backend that decides turns
  itself supplies its own (``ConversationModel.turn_policy``);
- ``Replies`` (``replies.py``): responses, the play-head clock's cuts, truncation;
- ``ToolCalls`` (``tools.py``): function calls and MCP calls inside replies.

This class is the conversation's face (what the worker's session calls): it checks settings,
edits the history (messages, images, deletions) and hands the rest to the parts. The backend
(``core/processors/``) supplies only what differs by model: a reply generator, transcription,
image preparation, what it offers, and optionally its turn policy.

Two ways a backend can take user speech, chosen by ``backend.capabilities.transcript_first``:
- transcript first (a text LLM, the cascade): each turn is transcribed before the reply, the
  transcript is what the model reads, and a turn with no words is dropped;
- audio (an omni model): the clip itself enters the history and the reply starts at once; its
  transcript, for the client's display only, is made when no reply is running.

Model work runs in the backend's threads; the event loop only routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.audio import pcm16_to_float, resample
from core.conversation.audio_input import VAD_RATE
from core.conversation.config import ConversationConfig
from core.conversation.events import CancelResult, ConversationEvent
from core.conversation.hearing import Hearing
from core.conversation.idle_timeout import IdleTimeout
from core.conversation.items import ROOT, HistoryMessage, Item, Part, PartKind, Role
from core.conversation.mcp_tools import SEPARATOR, McpTools
from core.conversation.model import ConversationModel
from core.conversation.playback import PlaybackClock
from core.conversation.replies import Replies
from core.conversation.reply import Response
from core.conversation.runtime import ConversationStats, Runtime
from core.conversation.tools import ToolCalls
from core.conversation.truncation import ContextWindow
from core.conversation.turn_policy import PassesReportsOn, TurnPolicy
from core.conversation.vad_turns import VadTurns
from core.errors import (
    DuplicateItemError,
    InvalidInputError,
    InvalidTextError,
    ItemNotFoundError,
)
from core.ids import new_id

MAX_TEXT_CHARS = 20_000

__all__ = ["Conversation", "ConversationParts", "ConversationStats"]


@dataclass(frozen=True, slots=True)
class ConversationParts:
    """A conversation's parts, as a backend's own turn policy is given them."""

    runtime: Runtime
    hearing: Hearing
    replies: Replies
    tools: ToolCalls
    vad_turns: VadTurns  # the standard policy, for a backend's policy to wrap


class Conversation(PassesReportsOn):
    """One session's conversation. Not thread-safe: call from one event loop."""

    def __init__(self, backend: ConversationModel, config: ConversationConfig) -> None:
        self.backend = backend
        self.rt = rt = Runtime(backend, self._checked(config))
        self.mcp = McpTools(rt)  # MCP servers' tools, run by the server (the worker sets the connector)
        self.hearing = Hearing(rt, reports=self)  # what it hears goes to the turn policy chosen below
        self.replies = Replies(rt, self.mcp, self._checked, turn_scored=self.hearing.turn_scored)
        self.tools = self.replies.tools
        standard = VadTurns(rt, self.hearing, self.replies)
        own = backend.turn_policy(ConversationParts(rt, self.hearing, self.replies, self.tools, standard))
        self.turns: TurnPolicy = own if own is not None else standard
        self.idle_timeout = IdleTimeout(rt, self.hearing, self.replies, self.turns)  # ``idle_timeout_ms``
        rt.observers.append(self.idle_timeout.observe)
        self.turns.configured(None)

    # ------------------------------------------------------------------ what the hearing reports (``TurnReports``)
    # The hearing exists before the policy that takes its reports (a policy is given the hearing),
    # so the conversation, which chose the policy, passes them on.

    @property
    def report_to(self) -> TurnPolicy:
        return self.turns

    # ------------------------------------------------------------------ config & state

    def _checked(self, config: ConversationConfig) -> ConversationConfig:
        td = config.turn_detection
        types = self.backend.capabilities.turn_detection_types
        if td is not None and td.type not in types:
            raise InvalidInputError(
                f"turn_detection.type {td.type!r} is not supported by backend {self.backend.name}; "
                f"use one of {', '.join(repr(t) for t in types)} or null",
                param="turn_detection.type",
            )
        if (config.tools or config.mcp_servers) and not self.backend.capabilities.supports_tools:
            raise InvalidInputError(f"backend {self.backend.name} cannot call functions; send no tools",
                                    param="tools")
        labels = [s.server_label for s in config.mcp_servers]
        if len(set(labels)) != len(labels):
            raise InvalidInputError("two MCP tools share a server_label; each needs its own", param="tools")
        if config.tool_choice not in ("auto", "none", "required") and config.tool_choice not in {
                t.name for t in config.tools} and config.tool_choice.partition(SEPARATOR)[0] not in labels:
            raise InvalidInputError(f"tool_choice names {config.tool_choice!r}, which is not among the tools",
                                    param="tool_choice")
        self.backend.check_tools(config.tools)
        voice = self.backend.resolve_voice(config.voice)
        return config if voice == config.voice else config.model_copy(update={"voice": voice})

    def update(self, config: ConversationConfig) -> None:
        """Apply new settings (between turns)."""
        config = self._checked(config)
        old, self.rt.config = self.rt.config, config
        self.hearing.reconfigure(old, config)
        self.turns.configured(old)
        self.idle_timeout.configure()
        self.mcp.sync(config.mcp_servers)

    @property
    def config(self) -> ConversationConfig:
        return self.rt.config

    @property
    def stats(self) -> ConversationStats:
        return self.rt.stats

    @property
    def playback(self) -> PlaybackClock:
        """What the listener has heard of the assistant's audio."""
        return self.rt.playback

    @property
    def context(self) -> ContextWindow:
        """What each reply reads under ``truncation``."""
        return self.replies.context

    @property
    def model_state(self) -> Any:
        return self.rt.model_state

    @property
    def history(self) -> list[HistoryMessage]:
        return self.rt.items.messages()

    @property
    def items(self) -> list[Item]:
        return self.rt.items.snapshot()

    @property
    def response_active(self) -> bool:
        return self.replies.active

    def events(self) -> AsyncIterator[ConversationEvent]:
        """Every event, in order, until ``close``."""
        return self.rt.events()

    def call_soon(self, fn: Callable, *args) -> None:
        """Run ``fn`` on the conversation's loop; safe from any thread."""
        self.rt.call_soon(fn, *args)

    # ------------------------------------------------------------------ items

    def item(self, item_id: str) -> Item | None:
        return self.rt.items.get(item_id)

    def previous_item_id(self, item_id: str) -> str | None:
        """The id of the item before ``item_id`` in the history (None if it is first)."""
        return self.rt.items.previous_id(item_id)

    def _check_placement(self, item_id: str | None, previous_item_id: str | None) -> None:
        if item_id is not None and item_id in self.rt.items:
            raise DuplicateItemError(f"the conversation already has an item with id {item_id!r}", param="item.id")
        if previous_item_id not in (None, ROOT) and previous_item_id not in self.rt.items:
            raise ItemNotFoundError(f"previous_item_id {previous_item_id!r} is not in the conversation "
                                    "(use 'root' to place an item first)", param="previous_item_id")

    async def prepare_message(self, role: Role, parts: list[tuple[PartKind, Any]], item_id: str | None = None) -> Item:
        """Build a message from text, speech (PCM16 at the input rate) and images (JPEG/PNG bytes),
        in the client's order: speech is resampled (and transcribed where the backend reads words
        or the client wants a transcript), images prepared. Not placed in the history."""
        if not parts:
            raise InvalidInputError("a message needs at least one content part", param="item.content")
        item = Item(role, item_id=item_id or new_id("item"))
        item.parts.clear()
        clips: list[np.ndarray] = []
        for kind, payload in parts:
            if kind == "text":
                if not isinstance(payload, str) or len(payload) > MAX_TEXT_CHARS:
                    raise InvalidTextError(f"text must be a string of at most {MAX_TEXT_CHARS} characters",
                                           param="text")
                item.parts.append(Part("text", payload))
            elif kind == "audio":
                samples = pcm16_to_float(payload, self.config.input_sample_rate)
                clips.append(await self.rt.in_thread(self.backend.io_pool, resample, samples,
                                                   self.config.input_sample_rate, VAD_RATE))
                item.parts.append(Part("audio", None))
            else:
                prepared = await self.rt.in_thread(self.backend.io_pool, self.backend.prepare_image, payload)
                item.images.append(prepared)
                item.image_bytes.append(bytes(payload))
                item.parts.append(Part("image", self.backend.image_text(prepared)))
        if clips:
            audio = np.concatenate(clips)
            if not self.backend.capabilities.transcript_first:
                item.audio = audio
            transcript = None
            if self.backend.capabilities.transcript_first or self.hearing.transcribes_for_display():
                transcript = await self.rt.in_thread(self.backend.transcribe_pool, self.backend.transcribe_turn, audio)
            item.set_transcript((transcript or "").strip())
        else:
            item.refresh_text()
        if not clips and not item.images and not item.text:
            raise InvalidTextError("text must be a non-empty string", param="text")
        return item

    async def add_message(self, role: Role, parts: list[tuple[PartKind, Any]], *, item_id: str | None = None,
                          previous_item_id: str | None = None) -> Item:
        """Add a message after ``previous_item_id`` (``"root"``: first; None: last)."""
        self._check_placement(item_id, previous_item_id)
        item = await self.prepare_message(role, parts, item_id)
        return self.insert_item(item, previous_item_id)

    def insert_item(self, item: Item, previous_item_id: str | None = None) -> Item:
        """Place a ready item (a message, a function call or its output) in the history."""
        self._check_placement(item.item_id, previous_item_id)  # again: the history may have moved on
        appended = previous_item_id is None or (previous_item_id != ROOT and previous_item_id == self.rt.items.last_id())
        self.rt.items.insert(item, previous_item_id, self.config.max_history_messages)
        if not appended:
            self.rt.history_edited()  # placed inside the history: a cached prompt no longer matches
        return item

    async def add_text(self, text: str, role: Role = "user") -> str:
        """Append a text item to the history; returns its item id."""
        return (await self.add_message(role, [("text", text)])).item_id

    async def add_image(self, data: bytes, *, frame: bool = False) -> str:
        """Add an image (JPEG/PNG). ``frame`` marks a camera frame (only the latest few are kept)."""
        if frame:
            frame = await self.rt.in_thread(self.backend.io_pool, self.backend.prepare_image, data)
            self.rt.frames.append(frame)
            self.turns.frame_added(frame)
            return new_id("item")
        return (await self.add_message("user", [("image", data)])).item_id

    async def add_audio_item(self, pcm: bytes) -> tuple[str, str]:
        """Add a whole user audio clip (PCM16 at the input rate) as one item; returns (id, transcript)."""
        item = await self.add_message("user", [("audio", pcm)])
        return item.item_id, item.text

    def delete_item(self, item_id: str) -> bool:
        """Remove an item from the history; False if there is none with that id."""
        deleted = self.rt.items.remove(item_id)
        if deleted:
            self.rt.history_edited()
        return deleted

    # ------------------------------------------------------------------ responses

    def system_prompt(self, instructions: str | None) -> str:
        return self.replies.system_prompt(instructions)

    async def create_response(
        self,
        *,
        instructions: str | None = None,
        output_audio: bool | None = None,
        max_output_tokens: int | None = None,
        input_items: list[Item] | None = None,
        in_conversation: bool = True,
        metadata: dict[str, str] | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> str:
        """Start a reply to the history so far (optionally overriding settings for this one
        reply); returns its response id. ``input_items``: the context for this reply instead of
        the history; ``in_conversation=False``: an out-of-band reply that leaves the history as
        it is. ``overrides``: other config fields for this reply (``tools``, ``tool_choice``)."""
        self.turns.reply_requested()
        return self.replies.create(instructions=instructions, output_audio=output_audio,
                                   max_output_tokens=max_output_tokens, input_items=input_items,
                                   in_conversation=in_conversation, metadata=metadata, overrides=overrides)

    def begin_response(self, output_audio: bool) -> Response:
        """Open a response record and announce it (the caller produces its output)."""
        return self.replies.begin(output_audio)

    def finish_response(self, resp: Response) -> None:
        """End a response whose output the caller produced (``begin_response``), unless cancelled."""
        self.replies.finish(resp)

    async def cancel_response(self, reason: str = "client_cancelled") -> CancelResult:
        """Stop the active reply now; raises ``NoActiveResponseError`` if there is none. The
        history keeps all that was sent of it (a client's ``truncate`` cuts it to what was heard)."""
        result = self.replies.cancel(reason)
        self.turns.cancelled()
        return result

    def truncate(self, item_id: str, audio_end_ms: int) -> str:
        """Cut an assistant item to what was heard; returns the kept text."""
        return self.replies.truncate(item_id, audio_end_ms)

    # ------------------------------------------------------------------ user audio

    async def append_audio(self, pcm: bytes) -> None:
        """Feed PCM16 mono at ``config.input_sample_rate``; drives VAD when enabled."""
        await self.hearing.append(pcm)

    async def commit_audio(self) -> str | None:
        """Turn buffered audio into a user item (turn-based mode); returns its item id."""
        item_id, segment = await self.hearing.take_buffer()
        await self.turns.committed(item_id, segment)
        return item_id

    def clear_audio(self) -> None:
        """Drop buffered, uncommitted input audio."""
        self.hearing.clear()

    async def listener_gone(self) -> None:
        """The client's connection dropped and the session is held for its return (issue 72): the
        reply it was hearing stops at what the play-head says it heard, as an interruption cuts
        it (the item keeps what was heard; the model reads the cut), and a voice being heard ends
        unkept: nothing is answered while nobody listens, and nothing is invented for the time away."""
        clock = self.playback
        heard_item = clock.item_id if clock.audible else None
        heard = clock.heard_samples() if heard_item is not None else None
        resp = self.replies.current
        if resp is not None and not resp.held:
            self.replies.cancel("client_cancelled", heard_samples=heard if heard_item == resp.item_id else None)
            self.turns.cancelled()
        elif heard_item is not None and heard is not None:
            self.replies.cut_finished(heard_item, heard)
        if heard_item is not None and heard is not None:
            clock.stop(heard_item, heard)
        await self.hearing.drop_voice()

    # ------------------------------------------------------------------ lifetime

    async def wait_idle(self) -> None:
        """Wait for background work (transcripts, replies) to finish; for tests and benches."""
        await self.rt.wait_idle()

    async def close(self) -> None:
        """Cancel work and free resources; idempotent."""
        if self.rt.closed:
            return
        await self.turns.close()
        self.replies.drop_held()
        if self.replies.current is not None:
            await self.cancel_response("session_closed")
        self.rt.closed = True
        self.idle_timeout.stop()
        await self.mcp.close()
        self.rt.close()
        self.backend.release_model_state(self.rt.model_state)
