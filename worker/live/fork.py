"""A stored Live session and its fork (issue 72): ``wss /v1/live/sessions/{id}/fork``.

A Live session started with ``store: true`` leaves, beside its recording, what a fork needs to go
on from it (``STORED``): its model, its config (instructions, voice, format, delegation; MCP
credentials are never written) and its history as Live startup items. The history is text: what
was typed, and what was said as transcribed (an assistant reply cut by the listener keeps what
was heard); function calls and images are not carried over. A fork's ``session.start`` holds
overrides only (``ForkSessionConfig``: ``audio.format``, ``delegation``, ``store``; the model is
inherited); the stored config with them applied starts the new session, its history first.
"""

from __future__ import annotations

from typing import Any

from pathlib import Path

from core.conversation.items import Item
from core.protocol import ProtocolError
from core.session_store import STORED_SESSION, read_stored_session

STORED = STORED_SESSION  # in the session's folder, written before its meta says finished
FORK_FIELDS = frozenset({"audio", "client", "delegation", "store"})


def stored_session(model: str, config: dict[str, Any], items: list[Item]) -> dict[str, Any] | None:
    """What a fork of this session starts from; None unless the session asked to be stored."""
    if not config.get("store"):
        return None
    kept = {"format": config.get("format"), "voice": config.get("voice"), "instructions": config.get("instructions"),
            "delegation": _without_credentials(config.get("delegation")), "store": True}
    return {"model": model, "config": kept, "input": history(items)}


def _without_credentials(delegation: Any) -> Any:
    """The delegation with its MCP tools' ``headers`` and ``authorization`` left out (not masked:
    a fork must not send a placeholder to the server as a credential)."""
    responses = delegation.get("responses") if isinstance(delegation, dict) else None
    if not isinstance(responses, dict) or not isinstance(responses.get("tools"), list):
        return delegation
    tools = [{k: v for k, v in tool.items() if k not in ("headers", "authorization")}
             if isinstance(tool, dict) and tool.get("type") == "mcp" else tool for tool in responses["tools"]]
    return {**delegation, "responses": {**responses, "tools": tools}}


def history(items: list[Item]) -> list[dict[str, Any]]:
    """The conversation's messages as Live ``InitialItem``s (text; spoken parts as transcribed)."""
    out = []
    for item in items:
        if item.type != "message" or item.role not in ("user", "assistant", "system"):
            continue
        text = " ".join((part.text or "").strip() for part in item.parts if part.kind in ("text", "audio")).strip()
        if not text:
            continue
        role = "developer" if item.role == "system" else item.role
        out.append({"type": "message", "role": role, "id": item.item_id,
                    "content": [{"type": "output_text" if role == "assistant" else "input_text", "text": text}]})
    return out


def forked_start(stored: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The ``session.start`` config of a fork: the stored one with the client's overrides."""
    unknown = sorted(set(overrides) - FORK_FIELDS)
    if unknown:
        raise ProtocolError(f"a fork's session.start takes overrides only (audio.format, delegation, store; the "
                            f"model and the rest are inherited): {', '.join(unknown)}", code="invalid_value",
                            param=f"session.{unknown[0]}")
    config = stored["config"]
    start: dict[str, Any] = {"instructions": config.get("instructions"), "delegation": config.get("delegation"),
                             "store": config.get("store", True), "input": list(stored.get("input") or []),
                             "audio": {"format": config.get("format"), "output": {"voice": config.get("voice")}}}
    fmt = (overrides.get("audio") or {}).get("format")
    if fmt is not None:
        start["audio"]["format"] = fmt
    delegation = overrides.get("delegation")
    if delegation is not None:
        current = (config.get("delegation") or {}).get("type")
        if current != "responses" or delegation.get("type") != "responses":
            raise ProtocolError("delegation overrides need a stored session with Responses delegation; the "
                                "delegation type cannot change", code="invalid_value", param="session.delegation")
        merged = dict(config.get("delegation") or {})
        for key, value in delegation.items():
            before = merged.get(key)
            merged[key] = {**(before if isinstance(before, dict) else {}), **value} if isinstance(value, dict) else value
        start["delegation"] = merged
    if overrides.get("store") is not None:
        start["store"] = bool(overrides["store"])
    return start


def read_stored(data_dir: str | Path, session_id: str) -> dict[str, Any] | None:
    """The stored document of ``session_id`` (the gateway checked its owner), or None (blocking)."""
    found = read_stored_session(data_dir, session_id)
    return found[1] if isinstance(found, tuple) else None
