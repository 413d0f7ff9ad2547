"""Conversation items between the protocol and the core: parse what a client sends, render what
the core holds, in either dialect.

A client's item keeps its own ``id``; its content parts are checked and decoded here (base64,
image limits) before anything reaches the conversation, so a bad part leaves nothing behind.
Rendering echoes an item as it was created: same id, type, role, parts in order, status (audio
and image bytes are not sent back; an audio part carries its transcript).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from core.config import LimitsConfig
from core.conversation import Item
from core.conversation.items import MCP_ITEM_TYPES, PartKind
from core.ids import new_id
from core.protocol import ProtocolError
from worker.audio_formats import AudioFormat
from worker.limits import check_image, check_image_b64

MAX_ID_CHARS = 64
MAX_ARGUMENT_CHARS = 100_000
MAX_REASON_CHARS = 2_000
ROLES = ("user", "assistant", "system")
# Content part types each role may carry (GA and beta names).
ROLE_PARTS = {
    "user": ("input_text", "input_audio", "input_image", "text"),
    "system": ("input_text", "text"),
    "assistant": ("output_text", "text", "output_audio", "audio"),
}


@dataclass(slots=True)
class NewItem:
    """A checked client item: a message's decoded parts, or a ready function item."""

    item_id: str | None
    role: str = "user"
    parts: list[tuple[PartKind, Any]] = field(default_factory=list)
    ready: Item | None = None  # function_call / function_call_output


def b64(data: Any, param: str, event_id: str | None = None) -> bytes:
    if not isinstance(data, str):
        raise ProtocolError(f"{param} must be a base64 string", code="invalid_base64", param=param, event_id=event_id)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"{param} is not valid base64", code="invalid_base64", param=param,
                            event_id=event_id) from None


def parse_item(item: Any, limits: LimitsConfig, audio_format: AudioFormat, event_id: str | None = None,
               param: str = "item") -> NewItem:
    """Check one client item (``conversation.item.create`` or a ``response.create`` input)."""

    def fail(message: str, where: str, code: str = "invalid_value") -> ProtocolError:
        return ProtocolError(message, code=code, param=f"{param}.{where}" if where else param, event_id=event_id)

    if not isinstance(item, dict):
        raise fail(f"{param} must be an object", "")
    item_id = item.get("id")
    if item_id is not None and (not isinstance(item_id, str) or not 0 < len(item_id) <= MAX_ID_CHARS):
        raise fail(f"{param}.id must be a string of 1 to {MAX_ID_CHARS} characters", "id")
    kind = item.get("type", "message")
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "")
        for key, value in (("call_id", call_id), ("name", name)):
            if not isinstance(value, str) or not value:
                raise fail(f"a function_call item needs a non-empty string {key}", key)
        if not isinstance(arguments, str) or len(arguments) > MAX_ARGUMENT_CHARS:
            raise fail(f"{param}.arguments must be a JSON string of at most {MAX_ARGUMENT_CHARS} characters",
                       "arguments")
        ready = Item("assistant", item_id=item_id or new_id("item"), type="function_call", call_id=call_id,
                     name=name, arguments=arguments, parts=[])
        return NewItem(item_id, "assistant", ready=ready)
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not call_id:
            raise fail("a function_call_output item needs a non-empty string call_id", "call_id")
        if not isinstance(output, str) or len(output) > MAX_ARGUMENT_CHARS:
            raise fail(f"{param}.output must be a string of at most {MAX_ARGUMENT_CHARS} characters", "output")
        ready = Item("user", item_id=item_id or new_id("item"), type="function_call_output", call_id=call_id,
                     output=output, parts=[])
        return NewItem(item_id, "user", ready=ready)
    if kind == "mcp_approval_response":
        request, approve, reason = item.get("approval_request_id"), item.get("approve"), item.get("reason")
        if not isinstance(request, str) or not request:
            raise fail("an mcp_approval_response item needs the approval_request_id it answers",
                       "approval_request_id")
        if not isinstance(approve, bool):
            raise fail(f"{param}.approve must be true or false", "approve")
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS):
            raise fail(f"{param}.reason must be a string of at most {MAX_REASON_CHARS} characters", "reason")
        ready = Item("user", item_id=item_id or new_id("item"), type="mcp_approval_response",
                     approval_request_id=request, approve=approve, reason=reason, parts=[])
        return NewItem(item_id, "user", ready=ready)
    if kind in MCP_ITEM_TYPES:
        raise fail(f"a client cannot create {kind} items (the server makes them); answer an approval request "
                   "with an mcp_approval_response item", "type")
    if kind != "message":
        raise fail(f"item type {kind!r} is not supported; use 'message', 'function_call', "
                   "'function_call_output' or 'mcp_approval_response'", "type")
    role = item.get("role", "user")
    if role not in ROLES:
        raise fail(f"{param}.role {role!r} must be user, assistant or system", "role")
    content = item.get("content")
    if not isinstance(content, list) or not content:
        raise fail(f"{param}.content must be a non-empty list", "content")
    parts: list[tuple[PartKind, Any]] = []
    for i, part in enumerate(content):
        where = f"content.{i}"
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype not in ROLE_PARTS[role]:
            allowed = ", ".join(ROLE_PARTS[role])
            raise fail(f"content type {ptype!r} is not allowed for role {role}; use {allowed}", f"{where}.type")
        if ptype in ("input_text", "text", "output_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise fail(f"{param}.{where}.text must be a string", f"{where}.text")
            parts.append(("text", text))
        elif ptype in ("output_audio", "audio"):  # an assistant turn given as its transcript
            transcript = part.get("transcript") or part.get("text")
            if not isinstance(transcript, str):
                raise fail(f"{param}.{where}.transcript must be a string", f"{where}.transcript")
            parts.append(("text", transcript))
        elif ptype == "input_audio":
            data = b64(part.get("audio") or "", f"{param}.{where}.audio", event_id)
            parts.append(("audio", audio_format.to_pcm16(data, f"{param}.{where}.audio", event_id)))
        else:  # input_image
            url = part.get("image_url") or ""
            at = f"{param}.{where}.image_url"
            if not isinstance(url, str) or not url.startswith("data:") or "," not in url:
                raise ProtocolError("input_image.image_url must be a data: URL (base64 JPEG or PNG)", param=at,
                                    event_id=event_id)
            check_image_b64(url.split(",", 1)[1], limits, at, event_id)
            image = b64(url.split(",", 1)[1], at, event_id)
            check_image(image, limits, at, event_id)
            parts.append(("image", image))
    return NewItem(item_id, role, parts)


def render_item(item: Item, beta: bool) -> dict[str, Any]:
    """The item as the protocol shows it (``conversation.item.added``, ``retrieved``, outputs)."""
    if item.type in MCP_ITEM_TYPES:
        return render_mcp_item(item)
    out: dict[str, Any] = {"id": item.item_id, "object": "realtime.item", "type": item.type, "status": item.status}
    if item.type == "function_call":
        out.update(call_id=item.call_id, name=item.name, arguments=item.arguments or "")
        return out
    if item.type == "function_call_output":
        out.update(call_id=item.call_id, output=item.output or "")
        return out
    content: list[dict[str, Any]] = []
    for part in item.parts:
        if item.role == "assistant":
            if part.kind == "audio":
                content.append({"type": "audio" if beta else "output_audio", "transcript": part.text or ""})
            else:
                content.append({"type": "text" if beta else "output_text", "text": part.text or ""})
        elif part.kind == "text":
            content.append({"type": "input_text", "text": part.text or ""})
        elif part.kind == "audio":
            content.append({"type": "input_audio", "transcript": part.text})
        elif not beta:  # the beta item types have no image part
            content.append({"type": "input_image"})
    out.update(role=item.role, content=content)
    return out


def render_mcp_item(item: Item) -> dict[str, Any]:
    """An MCP item in OpenAI's shapes (``RealtimeMcpListTools``, ``RealtimeMcpToolCall``,
    ``RealtimeMcpApprovalRequest`` / ``Response``); GA only."""
    out: dict[str, Any] = {"id": item.item_id, "type": item.type}
    if item.type == "mcp_approval_response":
        out.update(approval_request_id=item.approval_request_id, approve=bool(item.approve))
        if item.reason is not None:
            out["reason"] = item.reason
        return out
    out["server_label"] = item.server_label or ""
    if item.type == "mcp_list_tools":
        out["tools"] = list(item.tools or [])
        return out
    out.update(name=item.name or "", arguments=item.arguments or "")
    if item.type == "mcp_call":
        out.update(approval_request_id=item.approval_request_id, output=item.output, error=item.error)
    return out


def in_progress_item(item_id: str) -> dict[str, Any]:
    """An assistant message that a response has just opened."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "status": "in_progress",
            "role": "assistant", "content": []}
