"""Delegation as a Live client sees it: to the client's application, or Responses delegation.

Client delegation (``delegation.type`` ``client``): the model is offered one hidden function
(``tool_calls.DELEGATION_TOOL``); calling it hands the request over: ``session.delegation.created``
with target ``client`` and no task text (Live's delegations carry none: the client reads the
transcript). The call gets an output at once, so the conversation stays whole, and no reply
follows: the application answers with commentary (``delegation_id`` set), which the model says,
or thinking, which it keeps.

The session's own model is the "backend": when it calls a function, the call is a delegation
(``session.delegation.created``, target ``responses``) and streams as ``response.event``s
(``response.created``, ``response.output_item.done`` with the call, then ``response.completed``).
The client runs the function, adds its output (``response.item.create``) and continues
(``response.create``, refused with ``function_call_outputs_required`` while a call has no
output); the reply that follows is the same delegation's next response, with its own
``response.created`` / ``response.completed``. Meanwhile the model acknowledges the delegation
aloud ("One moment."), ``acknowledgement_delay_ms`` after the call, unless commentary, thinking or
the output came first; only when the session sets the delay (Live says it immediately by
default; a small model asked for an acknowledgement answers the question instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from core.ids import new_id
from core.live_events import live_event
from core.protocol import ProtocolError

ACKNOWLEDGE = ("Do not answer yet: the answer is being looked up. Say only a very short acknowledgement, "
               "such as \"One moment.\" or \"Let me check.\", and nothing else.")

Emit = Callable[[dict[str, Any]], None]


class Delegations:
    def __init__(self, emit: Emit, acknowledge: Callable[[], None], now_ms: Callable[[], int]) -> None:
        self._emit = emit  # in order with the reply's audio (the pacer's queue)
        self._acknowledge = acknowledge  # asks the model for a spoken acknowledgement
        self._now_ms = now_ms
        self._by_response: dict[str, str] = {}  # response id -> delegation id
        self._calls: dict[str, set[str]] = {}  # delegation id -> call ids still without an output
        self.latest: str | None = None
        self._client: dict[str, str] = {}  # response id -> its delegation to the client
        self.known: set[str] = set()  # every delegation of the session (what delegation_id may name)
        self._timer: asyncio.TimerHandle | None = None

    def to_client(self, response_id: str) -> str:
        """The model called the hidden delegation function in ``response_id``: a delegation to the
        client (once per response); its id."""
        delegation = self._client.get(response_id)
        if delegation is None:
            delegation = self._client[response_id] = new_id("dlg")
            self.known.add(delegation)
            self._emit(live_event("session.delegation.created", offset_ms=self._now_ms(), delegation={
                "id": delegation, "type": "delegation", "target": "client"}))
        return delegation

    def called(self, response_id: str, item: dict[str, Any]) -> None:
        """The model called a function in ``response_id``: a delegation (its first call) and the call."""
        delegation = self._by_response.get(response_id)
        if delegation is None:
            delegation = self._by_response[response_id] = self.latest = new_id("dlg")
            self.known.add(delegation)
            self._emit(live_event("session.delegation.created", offset_ms=self._now_ms(), delegation={
                "id": delegation, "type": "delegation", "target": "responses", "response_id": response_id}))
            self._emit(self._lifecycle(delegation, "response.created", response_id, "in_progress"))
        self._calls.setdefault(delegation, set()).add(item.get("call_id") or "")
        call = {"type": "function_call", "id": item.get("id"), "status": "completed", "call_id": item.get("call_id"),
                "name": item.get("name"), "arguments": item.get("arguments") or ""}
        self._emit(live_event("response.event", delegation_id=delegation,
                              event={"type": "response.output_item.done", "item": call}))

    def output(self, call_id: str | None) -> None:
        """The client added a call's output: no acknowledgement is needed any more."""
        self.cancel_acknowledgement()
        for pending in self._calls.values():
            pending.discard(call_id or "")

    def continues(self) -> str | None:
        """The client's ``response.create``: the delegation its response continues (None: none
        pending); ``ProtocolError`` while one of its calls has no output."""
        if self.latest is None:
            return None
        missing = self._calls.get(self.latest) or set()
        if missing:
            raise ProtocolError(f"add the output of every call first (response.item.create with a "
                                f"function_call_output): {', '.join(sorted(missing))} missing",
                                code="function_call_outputs_required")
        return self.latest

    def created(self, response_id: str, delegation: str) -> None:
        """The response that continues ``delegation`` has started."""
        self._by_response[response_id] = delegation
        self._emit(self._lifecycle(delegation, "response.created", response_id, "in_progress"))

    def done(self, response: dict[str, Any], acknowledgement_delay_ms: int | None) -> None:
        """A response ended: a delegation's gets its last ``response.event``; one that called a
        function is acknowledged aloud after the delay (None: not at all), unless the output
        comes first."""
        to_client = self._client.pop(response.get("id"), None)
        if to_client is not None:
            self._acknowledge_after(acknowledgement_delay_ms)
        delegation = self._by_response.pop(response.get("id"), None)
        if delegation is None:
            return
        status = response.get("status") or "completed"
        kind = {"completed": "response.completed", "failed": "response.failed"}.get(status, "response.incomplete")
        self._emit(self._lifecycle(delegation, kind, response.get("id"), status, response.get("usage") or {}))
        if self._calls.get(delegation):
            self._acknowledge_after(acknowledgement_delay_ms)

    def _acknowledge_after(self, delay_ms: int | None) -> None:
        if delay_ms is not None:
            self.cancel_acknowledgement()
            self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._acknowledge)

    def cancel_acknowledgement(self) -> None:
        """Commentary, thinking or a call's output came: the acknowledgement is not said."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @staticmethod
    def _lifecycle(delegation: str, kind: str, response_id: str | None, status: str,
                   usage: dict[str, Any] | None = None) -> dict[str, Any]:
        response: dict[str, Any] = {"id": response_id, "object": "response", "status": status, "output": []}
        if usage is not None:
            response["usage"] = {"input_tokens": usage.get("input_tokens", 0),
                                 "output_tokens": usage.get("output_tokens", 0),
                                 "total_tokens": usage.get("total_tokens", 0),
                                 "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens_details": {"reasoning_tokens": 0}}
        return live_event("response.event", delegation_id=delegation, event={"type": kind, "response": response})
