"""Function calls in the conversation core, with a scripted backend (a test double) that calls
a tool: finished calls join the history after the reply's text, a cancel during a call (as by a
barge-in) leaves an unfinished call out of the history, and tools are refused by a backend that
cannot call them."""

from __future__ import annotations

import threading

import pytest

from core.conversation import ConversationConfig
from core.conversation.config import FunctionTool
from core.errors import InvalidInputError
from tests.support.helpers import Collector
from tests.support.scripted_backend import ScriptedBackend

CLOCK = FunctionTool(name="get_time", description="The time.")


class CallingBackend(ScriptedBackend):
    """Says a word, then calls ``get_time``; with ``hold`` it stops mid-arguments until cancelled."""

    supports_tools = True  # in its capabilities

    def __init__(self, hold: bool = False) -> None:
        super().__init__(["Checking."])
        self.hold = hold
        self.mid_call = threading.Event()

    def _run(self, job):
        stats = super()._run(job)
        if job.tools:
            index = job.begin_call(job.tools[0].name)
            job.call_arguments(index, '{"time')
            if self.hold:
                self.mid_call.set()
                job.cancel.wait(10)
                return stats
            job.call_arguments(index, 'zone": "UTC"}')
            job.end_call(index)
        return stats


def config() -> ConversationConfig:
    return ConversationConfig(turn_detection=None, output_audio=False, tools=[CLOCK])


async def test_a_finished_call_joins_the_history_after_the_text():
    backend = CallingBackend()
    conv = backend.open_conversation(config())
    col = Collector(conv)
    await conv.add_text("What time is it?")
    await conv.create_response()
    done = await col.wait_for("response_done")
    call = done.calls[0]
    assert call.complete and call.name == "get_time" and call.arguments == '{"timezone": "UTC"}'
    assert [e.delta for e in col.of("function_call_delta")] == ['{"time', 'zone": "UTC"}']
    items = conv.items
    assert [(i.type, i.role) for i in items] == [("message", "user"), ("message", "assistant"), ("function_call", "assistant")]
    assert items[-1].call_id == call.call_id and items[-1].arguments == call.arguments
    await conv.close()
    backend.close()


async def test_cancel_during_a_call_keeps_the_unfinished_call_out_of_the_history():
    backend = CallingBackend(hold=True)
    conv = backend.open_conversation(config())
    col = Collector(conv)
    await conv.add_text("What time is it?")
    await conv.create_response()
    await col.wait_for("function_call_delta")
    await conv.cancel_response("turn_detected")
    done = await col.wait_for("response_done")
    assert done.status == "cancelled" and done.reason == "turn_detected"
    assert [c.complete for c in done.calls] == [False] and not col.of("function_call_done")
    assert all(i.type != "function_call" for i in conv.items)
    await conv.close()
    backend.close()


async def test_a_backend_without_tools_refuses_them():
    backend = ScriptedBackend(["hi"])
    with pytest.raises(InvalidInputError) as err:
        backend.open_conversation(config())
    assert "scripted" in err.value.message and err.value.param == "tools"
    conv = backend.open_conversation(ConversationConfig(turn_detection=None))
    with pytest.raises(InvalidInputError):
        conv.update(config())
    await conv.close()
    backend.close()
