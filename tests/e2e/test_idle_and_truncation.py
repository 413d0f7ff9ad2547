"""Issue 34's two GA fields through the real gateway and worker (cascade backend), every server event
validated against the ``openai`` package's types (``tests/support/realtime_client.py``):

- ``turn_detection.idle_timeout_ms``: after the reply has played, a silent microphone gets
  ``input_audio_buffer.timeout_triggered``, the silence committed, and a reply;
- ``truncation``: a 100-turn typed session keeps answering with its instructions in every prompt,
  the oldest turns dropped as the retention ratio says (the prompt's size saws between the ratio
  and the limit) and gone from the conversation. SmolLM2-135M follows no instruction reliably
  enough to test that one is still obeyed, so the prompt sizes the replies report
  (``usage.input_tokens``) say it: the instructions are longer than all the turns ever kept.
"""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from tests.support.realtime_client import Client, close_leftovers
from tests.support.stack import ROOT

IDLE_MS = 5000  # the protocol's shortest


# ``stack``: the suite's shared default stack (``tests/conftest.py``).


@pytest.fixture(autouse=True)
async def _close_leftovers():
    yield
    await close_leftovers()


async def silent_microphone(c: Client) -> None:
    """40 ms of 24 kHz silence every 40 ms, as a client's open microphone sends it."""
    piece = base64.b64encode(b"\x00\x00" * 960).decode()
    start = time.monotonic()
    n = 0
    while True:
        await c.send("input_audio_buffer.append", audio=piece)
        n += 1
        await asyncio.sleep(max(0.0, start + n * 0.04 - time.monotonic()))


async def test_a_silent_user_is_prompted_after_the_reply_has_played(stack):
    c = await Client.open(stack)
    turn = {"type": "server_vad", "idle_timeout_ms": IDLE_MS}
    session = await c.update(audio={"input": {"turn_detection": turn}}, max_output_tokens=24)
    assert session["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == IDLE_MS
    mic = asyncio.create_task(silent_microphone(c))
    try:
        await c.typed("Hello! How are you?")
        await c.send("response.create")
        await c.until("response.done", timeout=60)
        done_at = time.monotonic()
        audio_s = sum(len(base64.b64decode(e["delta"])) for e in c.of("response.output_audio.delta")) / 48000
        fired = await c.until("input_audio_buffer.timeout_triggered", timeout=audio_s + IDLE_MS / 1000 + 15)
        fired_at = time.monotonic()
        prompt = (await c.until("response.done", count=2, timeout=60))["response"]
    finally:
        mic.cancel()
    # the wait began when the reply had been heard (it plays in real time from its first audio)
    assert fired_at - done_at >= IDLE_MS / 1000 - 0.2
    assert abs((fired["audio_end_ms"] - fired["audio_start_ms"]) - IDLE_MS) <= 400, fired
    kinds = [e["type"] for e in c.events]
    after = [k for k in kinds[kinds.index("input_audio_buffer.timeout_triggered"):]
             if not k.startswith("response.") and k not in ("input_audio_buffer.append",)]
    assert after[:6] == ["input_audio_buffer.timeout_triggered", "input_audio_buffer.committed",
                         "conversation.item.added", "conversation.item.input_audio_transcription.delta",
                         "conversation.item.input_audio_transcription.completed", "conversation.item.done"]
    committed = c.of("input_audio_buffer.committed")[-1]
    item = next(e["item"] for e in c.of("conversation.item.done") if e["item"]["id"] == fired["item_id"])
    assert committed["item_id"] == fired["item_id"]
    assert item["role"] == "user" and item["content"][0]["type"] == "input_audio"
    assert kinds.index("response.created", kinds.index("input_audio_buffer.committed")) > 0
    assert prompt["status"] in ("completed", "incomplete") and prompt["output"][0]["content"][0]["transcript"]
    assert not c.of("error")
    await c.close()


TURNS = 100  # ~20 truncations: the sawtooth many times over (200 took 56 s of the suite)
POST_INSTRUCTIONS = 200
RATIO = 0.5
INSTRUCTIONS = "You are a terse assistant in a long typed chat. " + " ".join(
    f"Rule {i}: answer in a few words, never more than one short sentence." for i in range(1, 31))


async def test_a_100_turn_session_keeps_answering_with_its_oldest_turns_dropped(stack):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "data" / "models" / "smollm2-135m-instruct")
    instruction_tokens = len(tokenizer.encode(INSTRUCTIONS, add_special_tokens=False))
    c = await Client.open(stack)
    truncation = {"type": "retention_ratio", "retention_ratio": RATIO,
                  "token_limits": {"post_instructions": POST_INSTRUCTIONS}}
    session = await c.update(instructions=INSTRUCTIONS, output_modalities=["text"], max_output_tokens=3,
                             audio={"input": {"turn_detection": None}}, truncation=truncation)
    assert session["truncation"] == truncation
    t0 = time.monotonic()
    prompts, first_items = [], []
    for n in range(TURNS):
        added = await c.typed(f"Note {n}: I like the number {n}.")
        if n < 2:
            first_items.append(added["item"]["id"])
        response = await c.respond(max_output_tokens=3)  # ~0.2 s a turn on two idle cores
        assert response["status"] in ("completed", "incomplete"), response  # incomplete: the 3 tokens ran out
        assert response["output"][0]["content"][0]["text"].strip(), response
        prompts.append(response["usage"]["input_tokens"])
    elapsed = time.monotonic() - t0
    # the instructions are in every prompt (without them no prompt would come near their size); what
    # follows them never passes the limit (the template's markers aside)
    assert instruction_tokens > 2 * POST_INSTRUCTIONS
    assert min(prompts) > instruction_tokens
    assert max(prompts) <= instruction_tokens + POST_INSTRUCTIONS + 16, max(prompts)
    # a retention ratio truncates rarely, each time down to about half of the limit: a sawtooth
    drops = [i for i in range(1, TURNS) if prompts[i] < prompts[i - 1]]
    assert 5 <= len(drops) <= TURNS // 3, (len(drops), prompts)  # auto: on nearly every turn once full
    assert all(prompts[i] <= instruction_tokens + POST_INSTRUCTIONS * RATIO + 40 for i in drops), prompts
    # the oldest turns are gone from the conversation
    for item_id in first_items:
        await c.send("conversation.item.retrieve", item_id=item_id)
        error = (await c.until("error", count=len(c.of("error")) + 1))["error"]
        assert error["code"] == "item_not_found"
    await c.close()
    print(f"{TURNS} turns in {elapsed:.1f} s; prompt tokens {min(prompts)}..{max(prompts)}, {len(drops)} truncations")
