"""``session.truncation`` (core/conversation/truncation.py) on the scripted backend: what each reply
reads when the conversation outgrows the model's input limit (``auto``, ``retention_ratio``,
``disabled``), the instructions always kept, a function call and its output dropped together; the
protocol's parsing and echo; and a 200-turn session through the worker's ``RealtimeSession`` whose
every event validates against the ``openai`` package's types.

The scripted backend counts ~4 characters a token (``Backend.count_tokens``) and has no context of
its own: each test gives it one (``context_tokens``).
"""

from __future__ import annotations

import asyncio

import pytest

from core.config import LimitsConfig
from core.conversation import ConversationConfig
from core.conversation.config import Truncation
from core.conversation.items import Item
from core.conversation.truncation import ContextWindow, estimate_item_tokens, estimate_text_tokens
from core.openai_events import validation_error
from core.protocol import Dialect, ProtocolError
from gateway.realtime.minted_session import SessionConfigError, check_session
from tests.support.helpers import Collector
from tests.support.scripted_backend import ScriptedBackend
from tests.support.session_channel import SessionChannel
from worker.session import RealtimeSession
from worker.session_config import apply_session_update, session_object

WORDS = ["one", "two", "three", "four", "five"]  # the reply: "one two three four five" = 6 + 4 tokens
USER = "x" * 40  # a user turn: 10 + 4 tokens
LIMIT = 140  # tokens of conversation a reply may read (fixture ``backend``)


def text_config(**truncation) -> ConversationConfig:
    return ConversationConfig(turn_detection=None, output_audio=False, max_output_tokens=50,
                              truncation=Truncation(**truncation))


@pytest.fixture
def backend():
    b = ScriptedBackend(WORDS)
    b.context_tokens = 200  # less 50 for the reply and 10 for "scripted" and the markers: LIMIT
    yield b
    b.close()


async def turn(conv, col, text: str = USER):
    await conv.add_text(text)
    await conv.create_response()
    return await col.wait_for("response_done", count=len(col.of("response_done")) + 1)


def tokens(items) -> int:
    return sum(estimate_item_tokens(i) for i in items)


async def test_auto_drops_the_oldest_turns_and_keeps_the_instructions(backend):
    conv = backend.open_conversation(text_config(type="auto"))
    col = Collector(conv)
    for _ in range(30):
        done = await turn(conv, col)
        assert done.status == "completed"
        job = backend.jobs[-1]
        assert job.system == "scripted"  # the instructions are never dropped
        assert tokens(job.items) <= LIMIT and job.items[-1].text == USER
    # 14 tokens a question, 10 a reply: the last reply read its question and the five whole turns
    # before it (14 + 5 * 24 = 134; one more reply would make 144)
    assert len(backend.jobs[-1].items) == 11
    assert [i.role for i in backend.jobs[-1].items][:2] == ["user", "assistant"]
    # the dropped items left the history; what is there is the newest, and the last reply
    assert conv.items[:11] == backend.jobs[-1].items and len(conv.items) == 12
    await conv.close()


async def test_retention_ratio_drops_to_the_ratio_so_truncations_are_rare(backend):
    conv = backend.open_conversation(text_config(type="retention_ratio", retention_ratio=0.5))
    col = Collector(conv)
    truncations = 0
    before = 0
    for _ in range(30):
        await turn(conv, col)
        read = backend.jobs[-1].items
        if len(read) < before + 1:  # fewer items than last time plus the new question: some were dropped
            truncations += 1
            assert tokens(read) <= LIMIT * 0.5  # down to half the limit
        assert tokens(read) <= LIMIT
        before = len(read) + 1  # the reply joins too
    assert 4 <= truncations <= 8, truncations  # every 4th turn; auto drops on every turn from the 7th
    await conv.close()


async def test_post_instructions_lowers_the_limit(backend):
    conv = backend.open_conversation(text_config(type="retention_ratio", retention_ratio=1.0, post_instructions=40))
    col = Collector(conv)
    for _ in range(5):
        await turn(conv, col)
        assert tokens(backend.jobs[-1].items) <= 40
    await conv.close()


async def test_disabled_fails_the_reply_and_keeps_everything(backend):
    conv = backend.open_conversation(text_config(type="disabled"))
    col = Collector(conv)
    for _ in range(6):  # the 6th question reads 5 * 24 + 14 = 134 tokens: fits; the 7th 158
        assert (await turn(conv, col)).status == "completed"
    n = len(conv.items)
    done = await turn(conv, col)
    assert done.status == "failed" and done.reason == "context_length_exceeded"
    error = col.of("error")[-1]
    assert error.code == "context_length_exceeded" and "truncation is disabled" in error.message
    assert len(conv.items) == n + 1  # nothing dropped, nothing added by the failed reply
    assert len(backend.jobs) == 6  # the model was never asked
    # deleting the oldest items makes room again
    for item in conv.items[:4]:
        conv.delete_item(item.item_id)
    await conv.create_response()
    assert (await col.wait_for("response_done", count=8)).status == "completed"
    await conv.close()


async def test_the_newest_item_stays_even_alone_over_the_limit(backend):
    conv = backend.open_conversation(text_config(type="auto"))
    col = Collector(conv)
    await turn(conv, col)
    done = await turn(conv, col, "y" * 800)  # 204 tokens: over the limit alone
    assert done.status == "completed" and [i.text for i in backend.jobs[-1].items] == ["y" * 800]
    conv.update(text_config(type="disabled"))
    await conv.create_response()
    assert (await col.wait_for("response_done", count=3)).reason == "context_length_exceeded"
    await conv.close()


async def test_a_function_call_and_its_output_are_dropped_together(backend):
    conv = backend.open_conversation(text_config(type="auto"))
    col = Collector(conv)
    conv.insert_item(Item("assistant", item_id="item_call", type="function_call", call_id="call_1", name="f",
                          arguments="{}", parts=[]))
    await conv.add_text(USER)
    conv.insert_item(Item("user", item_id="item_out", type="function_call_output", call_id="call_1",
                          output="z" * 8, parts=[]))
    seen = []
    for _ in range(6):
        await turn(conv, col)
        ids = {i.item_id for i in backend.jobs[-1].items}
        seen.append(("item_call" in ids, "item_out" in ids))
    # never one without the other: when the call fell out, its output (which would have fit) went too
    assert seen[0] == (True, True) and seen[-1] == (False, False)
    assert all(call == out for call, out in seen), seen
    assert conv.item("item_call") is None and conv.item("item_out") is None
    await conv.close()


async def test_a_reply_on_its_own_input_leaves_the_history_alone(backend):
    conv = backend.open_conversation(text_config(type="auto"))
    col = Collector(conv)
    for _ in range(3):
        await turn(conv, col)
    n = len(conv.items)
    own = [Item("user", "w" * 300) for _ in range(3)]  # 79 tokens each: two of three are dropped
    await conv.create_response(input_items=own, in_conversation=False)
    await col.wait_for("response_done", count=4)
    assert [i.item_id for i in backend.jobs[-1].items] == [own[-1].item_id]
    assert len(conv.items) == n
    await conv.close()


def test_each_item_is_counted_once_until_it_changes():
    calls: list[str] = []

    class Model:
        context_tokens = 100

        def count_tokens(self, text: str) -> int:
            return estimate_text_tokens(text)

        def item_tokens(self, item: Item) -> int:
            calls.append(item.item_id)
            return estimate_item_tokens(item)

    window = ContextWindow(Model())
    items = [Item("user", "hello there", item_id=f"i{n}") for n in range(3)]
    cfg = text_config()
    for _ in range(3):
        window.fit(items, "be brief", cfg)
    assert calls == ["i2", "i1", "i0"]  # newest first
    items[1].text = "hello there, changed"
    window.fit(items, "be brief", cfg)
    assert calls[-1] == "i1" and len(calls) == 4
    # a long history is counted no further back than the limit (100 - 50 - 10 = 40 tokens: 2 items of 14)
    calls.clear()
    many = [Item("user", "x" * 40, item_id=f"m{n}") for n in range(1000)]
    fit = window.fit(many, "be brief", cfg)
    assert len(fit.items) == 2 and len(fit.dropped) == 998 and calls == ["m999", "m998", "m997"]


def test_no_known_context_no_truncation_unless_a_limit_is_set():
    class Model:
        context_tokens = None
        count_tokens = staticmethod(estimate_text_tokens)
        item_tokens = staticmethod(estimate_item_tokens)

    items = [Item("user", "a" * 4000) for _ in range(10)]
    assert len(ContextWindow(Model()).fit(items, "", text_config()).items) == 10
    fit = ContextWindow(Model()).fit(items, "", text_config(type="retention_ratio", post_instructions=2000))
    assert len(fit.items) == 1 and len(fit.dropped) == 9


# ---------------------------------------------------------------------------------------- protocol


def ga(s: dict) -> tuple[ConversationConfig, dict]:
    cfg, settings = apply_session_update(ConversationConfig(), {"type": "realtime", **s}, Dialect(False),
                                         ("server_vad", "semantic_vad"))
    return cfg, session_object(cfg, Dialect(False), "sess_1", "omniduplex-cascade", settings)


def test_truncation_is_parsed_checked_and_echoed():
    cfg, obj = ga({})
    assert cfg.truncation.type == "auto" and obj["truncation"] == "auto"
    cfg, obj = ga({"truncation": "disabled"})
    assert obj["truncation"] == "disabled"
    value = {"type": "retention_ratio", "retention_ratio": 0.8, "token_limits": {"post_instructions": 900}}
    cfg, obj = ga({"truncation": value})
    assert (cfg.truncation.retention_ratio, cfg.truncation.post_instructions) == (0.8, 900)
    assert obj["truncation"] == value
    assert validation_error({"type": "session.created", "event_id": "e", "session": obj}, False) is None
    for bad, param in [("sometimes", "session.truncation"),
                       ({"type": "retention_ratio", "retention_ratio": 1.5}, "session.truncation.retention_ratio"),
                       ({"type": "retention_ratio"}, "session.truncation.retention_ratio"),
                       ({"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 0}},
                        "session.truncation.token_limits.post_instructions")]:
        with pytest.raises(ProtocolError) as err:
            ga({"truncation": bad})
        assert err.value.param == param


def test_mint_time_accepts_truncation_and_checks_its_ranges():
    session = {"type": "realtime", "truncation": {"type": "retention_ratio", "retention_ratio": 0.5,
                                                  "token_limits": {"post_instructions": 800}}}
    assert check_session(session, beta=False)[0]["truncation"]["retention_ratio"] == 0.5
    check_session({"type": "realtime", "truncation": "disabled"}, beta=False)
    for bad, param in [({"type": "retention_ratio", "retention_ratio": 2}, "session.truncation.retention_ratio"),
                       ({"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": {"post_instructions": 0}},
                        "session.truncation.token_limits.post_instructions"),
                       ("never", "session.truncation")]:
        with pytest.raises(SessionConfigError) as err:
            check_session({"type": "realtime", "truncation": bad}, beta=False)
        assert err.value.param == param


# ---------------------------------------------------------------------------------------- a long session


async def test_a_200_turn_session_keeps_answering_with_the_oldest_turns_dropped():
    backend = ScriptedBackend(["Sure,", "noted."])
    backend.context_tokens = 400
    channel = SessionChannel()
    session = RealtimeSession(channel, backend, Dialect(False), LimitsConfig())
    task = asyncio.create_task(session.run())
    await channel.until("session.created")
    channel.client("session.update", session={
        "type": "realtime", "instructions": "Answer in two words.", "output_modalities": ["text"],
        "audio": {"input": {"turn_detection": None}}, "max_output_tokens": 16,
        "truncation": {"type": "retention_ratio", "retention_ratio": 0.6}})
    assert (await channel.until("session.updated"))["session"]["truncation"]["retention_ratio"] == 0.6
    first_ids = []
    for n in range(200):
        channel.client("conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Turn {n}: remember {n}."}]})
        channel.client("response.create")
        done = (await channel.until("response.done", count=n + 1))["response"]
        assert done["status"] == "completed", done
        if n < 3:
            first_ids.append(done["output"][0]["id"])
    job = backend.jobs[-1]
    assert job.system == "Answer in two words." and job.items[-1].text == "Turn 199: remember 199."
    limit = 400 - 16 - estimate_text_tokens("Answer in two words.") - 2 * 4  # and the markers
    assert tokens(job.items) <= limit
    assert max(tokens(j.items) for j in backend.jobs) <= limit
    # the oldest turns are gone from the conversation, the newest are there
    channel.client("conversation.item.retrieve", item_id=first_ids[0])
    assert (await channel.until("error"))["error"]["code"] == "item_not_found"
    channel.client("conversation.item.retrieve", item_id=done["output"][0]["id"])
    await channel.until("conversation.item.retrieved")
    channel.inbox.put_nowait(None)
    await task
    backend.close()
    assert not channel.invalid, channel.invalid[:5]
