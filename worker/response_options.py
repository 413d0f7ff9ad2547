"""``response.create`` options, both dialects: instructions, output modalities, token cap,
``metadata``, ``conversation: "none"`` (an out-of-band reply) and ``input`` (this reply's own
context: new items and references to items in the conversation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from core.config import McpConfig
from core.conversation import Conversation, Item
from core.protocol import Dialect, ProtocolError, ResponseCreate
from worker.session_config import parse_max_tokens, parse_modalities, parse_tools

MAX_METADATA_KEYS = 16
MAX_INPUT_ITEMS = 64


@dataclass(slots=True)
class ResponseOptions:
    event_id: str | None = None
    instructions: str | None = None
    output_audio: bool | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] | None = None
    in_conversation: bool = True
    input_items: list[Item] | None = None
    tools: dict[str, Any] | None = None  # config fields: tools, mcp_servers, tool_choice


def _metadata(value: Any, event_id: str | None) -> dict[str, str] | None:
    if value is None:
        return None
    ok = isinstance(value, dict) and len(value) <= MAX_METADATA_KEYS and all(
        isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512 for k, v in value.items())
    if not ok:
        raise ProtocolError(f"response.metadata must map at most {MAX_METADATA_KEYS} keys (<= 64 characters) to "
                            "strings (<= 512 characters)", code="invalid_value", param="response.metadata",
                            event_id=event_id)
    return dict(value)


class ItemSource(Protocol):
    """What ``input`` needs of the session (``RealtimeSession``): its conversation, to look items
    up, and ``new_item``, to check and prepare a client item."""

    conv: Conversation
    dialect: Dialect
    mcp_config: McpConfig

    async def new_item(self, data: Any, event_id: str | None, param: str = "item") -> tuple[Item, str | None]: ...


async def parse_response_options(ev: ResponseCreate, session: ItemSource) -> ResponseOptions:
    """Check every option before the response starts; a bad one is an error and nothing starts."""
    p = ev.response or {}
    eid = ev.event_id
    if not isinstance(p, dict):
        raise ProtocolError("response must be an object", param="response", event_id=eid)
    instructions = p.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ProtocolError("response.instructions must be a string", param="response.instructions", event_id=eid)
    conversation = p.get("conversation", "auto")
    if conversation not in ("auto", "none"):
        raise ProtocolError(f"response.conversation {conversation!r} must be 'auto' or 'none'",
                            code="invalid_value", param="response.conversation", event_id=eid)
    opts = ResponseOptions(
        event_id=eid,
        instructions=instructions or None,
        output_audio=parse_modalities(p.get("output_modalities", p.get("modalities")), "response.output_modalities"),
        max_output_tokens=parse_max_tokens(p.get("max_output_tokens", p.get("max_response_output_tokens")),
                                           "response.max_output_tokens"),
        metadata=_metadata(p.get("metadata"), eid),
        in_conversation=conversation == "auto",
        tools=parse_tools(p.get("tools"), p.get("tool_choice"), "response", session.mcp_config,
                          allow_mcp=not session.dialect.beta) or None,
    )
    raw = p.get("input")
    if raw is not None:
        if not isinstance(raw, list) or len(raw) > MAX_INPUT_ITEMS:
            raise ProtocolError(f"response.input must be a list of at most {MAX_INPUT_ITEMS} items",
                                code="invalid_value", param="response.input", event_id=eid)
        items: list[Item] = []
        for i, data in enumerate(raw):
            param = f"response.input.{i}"
            if isinstance(data, dict) and data.get("type") == "item_reference":
                ref = session.conv.item(data.get("id") or "")
                if ref is None:
                    raise ProtocolError(f"{param}: no item {data.get('id')!r} in the conversation",
                                        code="item_not_found", param=f"{param}.id", event_id=eid)
                items.append(ref)
                continue
            known = session.conv.item(data["id"]) if isinstance(data, dict) and isinstance(data.get("id"), str) else None
            if known is not None:  # an item of the conversation, named by its id
                items.append(known)
                continue
            item, _ = await session.new_item(data, eid, param)
            items.append(item)
        opts.input_items = items
    return opts
