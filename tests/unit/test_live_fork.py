"""What a stored Live session keeps for its forks, and how a fork's overrides apply
(``worker/live/fork.py``, issue 72)."""

from __future__ import annotations

import pytest

from core.conversation.items import Item, Part
from core.protocol import ProtocolError
from worker.live.fork import forked_start, history, stored_session

CONFIG = {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin", "instructions": "Be brief.",
          "delegation": {"type": "responses", "responses": {"tool_choice": "auto", "tools": [
              {"type": "mcp", "server_label": "crm", "server_url": "https://crm.example", "authorization": "secret"}]}},
          "store": True}


def test_the_history_is_text_as_heard_and_typed_and_leaves_out_calls():
    items = [Item("system", parts=[Part("text", "Speak French.")]),
             Item("user", parts=[Part("audio", "What time is it?")]),
             Item("assistant", parts=[Part("audio", "It is noon")]),  # a reply cut where the listener stopped hearing
             Item("user", parts=[Part("audio", None)]),  # never transcribed: nothing to carry
             Item("assistant", type="function_call", call_id="c1", name="clock", arguments="{}", parts=[]),
             Item("user", parts=[Part("text", "Thanks."), Part("image", None)])]
    assert [(m["role"], m["content"][0]["type"], m["content"][0]["text"]) for m in history(items)] == [
        ("developer", "input_text", "Speak French."), ("user", "input_text", "What time is it?"),
        ("assistant", "output_text", "It is noon"), ("user", "input_text", "Thanks.")]


def test_only_a_session_that_asked_is_stored_and_never_with_its_credentials():
    assert stored_session("m", {**CONFIG, "store": False}, []) is None
    assert stored_session("m", {k: v for k, v in CONFIG.items() if k != "store"}, []) is None
    doc = stored_session("omniduplex-cascade", CONFIG, [Item("user", parts=[Part("text", "Hi.")])])
    assert doc["model"] == "omniduplex-cascade" and doc["input"][0]["content"][0]["text"] == "Hi."
    assert "secret" not in repr(doc)


def test_a_fork_inherits_the_config_and_takes_only_overrides():
    stored = stored_session("m", CONFIG, [Item("user", parts=[Part("text", "Hi.")])])
    start = forked_start(stored, {})
    assert start["instructions"] == "Be brief." and start["audio"]["output"]["voice"] == "marin"
    assert start["store"] is True and start["input"] == stored["input"]
    pcmu = forked_start(stored, {"audio": {"format": {"type": "audio/pcmu"}}, "store": False,
                                 "delegation": {"type": "responses", "responses": {"tool_choice": "required"}}})
    assert pcmu["audio"]["format"] == {"type": "audio/pcmu"} and pcmu["store"] is False
    assert pcmu["delegation"]["responses"]["tool_choice"] == "required"
    assert pcmu["delegation"]["responses"]["tools"][0]["server_label"] == "crm"  # the rest kept
    with pytest.raises(ProtocolError, match="model"):
        forked_start(stored, {"model": "another"})
    client = stored_session("m", {**CONFIG, "delegation": {"type": "client"}}, [])
    with pytest.raises(ProtocolError, match="delegation type cannot change"):
        forked_start(client, {"delegation": {"type": "responses"}})
