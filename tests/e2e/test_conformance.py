"""Strict OpenAI Realtime conformance through the real gateway and worker (cascade backend).

Every server event a scripted session receives, in both dialects, is validated with a pydantic
``TypeAdapter`` of the ``openai`` package's own server-event types (``core/openai_events.py``),
as the OpenAI Agents SDK does. The scripts cover typed and spoken turns, cancel, truncate,
retrieve, delete, errors, transcription, client item ids and placement, every item type,
``response.create`` options (out-of-band, ``input``, ``metadata``), G.711 audio, transcription
sessions and the ``extensions`` opt-in.
"""

from __future__ import annotations

import base64
import wave

import numpy as np
import pytest

from core.protocol import EXTENSION_EVENTS
from tests.support.realtime_client import Client, close_leftovers
from tests.support.reliability import wait_meta


QUESTION = "What is the capital of France?"


# ``stack``: the suite's shared default stack (``tests/conftest.py``).


@pytest.fixture(autouse=True)
async def _close_leftovers():
    """A failed test leaves its socket open; close it so the next test gets the slot."""
    yield
    await close_leftovers()


@pytest.fixture(scope="module")
def speech16k():
    """A spoken question (the cascade's Piper voice), PCM16 16 kHz, with silence around it."""
    from core.audio import float_to_pcm16, resample
    from core.cascade.tts import PiperTts

    pcm = b"".join(PiperTts().synthesize(QUESTION, deterministic=True))
    audio = resample(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, 24000, 16000)
    return b"\x00\x00" * 4800 + float_to_pcm16(audio) + b"\x00\x00" * 19200


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_every_event_of_a_scripted_session_validates(stack, speech16k, beta):
    c = await Client.open(stack, beta)
    assert c.events[0]["type"] == "session.created"  # nothing before it for a standard client
    await c.turn_based()
    # typed turn, spoken reply; then a text-only reply
    await c.typed("Hi there")
    audio = await c.respond()
    assert audio["status"] == "completed" or audio["status_details"]["reason"] == "max_output_tokens"
    assert audio["output"][0]["content"]
    text = await c.respond(**{("modalities" if beta else "output_modalities"): ["text"]})
    assert text["output"][0]["content"][0]["type"] == ("text" if beta else "output_text")
    reply_id = audio["output"][0]["id"]
    # truncate, retrieve, delete
    await c.send("conversation.item.truncate", item_id=reply_id, content_index=0, audio_end_ms=0)
    await c.until("conversation.item.truncated")
    await c.send("conversation.item.retrieve", item_id=text["output"][0]["id"])
    retrieved = (await c.until("conversation.item.retrieved"))["item"]
    assert retrieved["id"] == text["output"][0]["id"] and retrieved["role"] == "assistant"
    await c.send("conversation.item.delete", item_id=text["output"][0]["id"])
    await c.until("conversation.item.deleted")
    # cancel mid-reply, and cancel with nothing running
    await c.typed("Tell me a long story about a dragon.")
    await c.send("response.create", response={"max_output_tokens": 200})
    await c.until("response.created", count=3)
    await c.send("response.cancel")
    cancelled = (await c.until("response.done", count=3))["response"]
    assert cancelled["status"] == "cancelled" and cancelled["status_details"]["reason"] == "client_cancelled"
    assert (await c.error(type="response.cancel"))["code"] == "response_cancel_not_active"
    await c.send("output_audio_buffer.clear")
    await c.until("output_audio_buffer.cleared")
    # errors: unknown event, bad JSON shape, empty commit
    assert (await c.error(type="no.such.event"))["code"] == "invalid_event_type"
    assert (await c.error(type="input_audio_buffer.commit"))["code"] == "input_audio_buffer_commit_empty"
    # committed speech: transcription delta and completed (with usage)
    await c.send("input_audio_buffer.append", audio=b64(_to24k(speech16k)))
    await c.send("input_audio_buffer.commit")
    done = await c.until("conversation.item.input_audio_transcription.completed")
    assert "france" in done["transcript"].lower() and done["usage"]["type"] == "duration"
    assert done["usage"]["seconds"] > 1
    assert c.of("conversation.item.input_audio_transcription.delta")
    await c.close()


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_spoken_turn_with_server_vad_validates(stack, speech16k, beta):
    c = await Client.open(stack, beta)
    await c.send("input_audio_buffer.append", audio=b64(_to24k(speech16k)))
    await c.until("response.done", timeout=90)
    kinds = [e["type"] for e in c.events]
    for kind in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                 "input_audio_buffer.committed", "conversation.item.input_audio_transcription.completed"):
        assert kind in kinds
    committed = c.of("input_audio_buffer.committed")[0]
    user = next(e for e in c.of(c.added()) if e["item"]["role"] == "user")
    assert user["item"]["id"] == committed["item_id"] and user["item"]["content"][0]["type"] == "input_audio"
    await c.close()


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_spoken_turn_with_semantic_vad_validates(stack, speech16k, beta):
    c = await Client.open(stack, beta)

    async def set_td(td: dict) -> dict:
        s = await (c.update(turn_detection=td) if beta else c.update(audio={"input": {"turn_detection": td}}))
        return s["turn_detection"] if beta else s["audio"]["input"]["turn_detection"]

    assert await set_td({"type": "semantic_vad"}) == {
        "type": "semantic_vad", "eagerness": "auto", "create_response": True, "interrupt_response": True}
    assert (await set_td({"type": "semantic_vad", "eagerness": "high"}))["eagerness"] == "high"
    bad = {"type": "semantic_vad", "eagerness": "eager"}
    err = await c.error("session.update", session={"turn_detection": bad} if beta else {
        "type": "realtime", "audio": {"input": {"turn_detection": bad}}})
    assert "eagerness" in err["message"] and err["param"].endswith("turn_detection.eagerness")
    await c.send("input_audio_buffer.append", audio=b64(_to24k(speech16k)))
    await c.until("response.done", timeout=90)
    stopped = c.of("input_audio_buffer.speech_stopped")[0]
    transcript = c.of("conversation.item.input_audio_transcription.completed")[0]
    assert "capital" in transcript["transcript"].lower()
    # the audio ends 1.2 s after the question: the scored wait, not a fallback, ended the turn
    assert stopped["audio_end_ms"] < len(speech16k) // 32 - 900
    await c.close()


async def test_client_item_ids_and_placement(stack):
    c = await Client.open(stack)
    await c.turn_based()
    first = await c.typed("first", id="client_item_1")
    assert first["item"]["id"] == "client_item_1" and first["previous_item_id"] is None
    done = await c.until("conversation.item.done")
    assert done["item"] == first["item"]
    # duplicate id: an error, nothing changed
    err = await c.error(type="conversation.item.create", item={
        "id": "client_item_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]})
    assert err["code"] == "item_already_exists" and err["param"] == "item.id"
    # root places an item first; an id places it after that item
    root = await c.typed("zeroth", id="client_item_0", **{})
    assert root["previous_item_id"] == "client_item_1"
    await c.send("conversation.item.create", previous_item_id="root", item={
        "id": "client_root", "type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]})
    placed = await c.until(c.added(), count=3)
    assert placed["item"]["id"] == "client_root" and placed["previous_item_id"] is None
    await c.send("conversation.item.create", previous_item_id="client_root", item={
        "id": "client_mid", "type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "Hello."}]})
    mid = await c.until(c.added(), count=4)
    assert mid["previous_item_id"] == "client_root"
    assert mid["item"]["content"] == [{"type": "output_text", "text": "Hello."}]
    err = await c.error(type="conversation.item.create", previous_item_id="nope", item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "lost"}]})
    assert err["code"] == "item_not_found" and err["param"] == "previous_item_id"
    # function call and its output echo exactly
    call = {"id": "call_item_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": '{"city": "Paris"}'}
    await c.send("conversation.item.create", item=call)
    echoed = (await c.until(c.added(), count=5))["item"]
    assert {k: echoed[k] for k in call} == call
    out = {"id": "call_out_1", "type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21}'}
    await c.send("conversation.item.create", item=out)
    echoed = (await c.until(c.added(), count=6))["item"]
    assert {k: echoed[k] for k in out} == out
    # bad items: a clear error each, the session goes on
    for bad, param in ((["not", "an", "object"], "item"),
                       ({"type": "message", "role": "tool", "content": [{"type": "input_text", "text": "x"}]},
                        "item.role"),
                       ({"type": "message", "role": "system", "content": [{"type": "input_audio", "audio": ""}]},
                        "item.content.0.type"),
                       ({"type": "function_call", "name": "f"}, "item.call_id")):
        assert (await c.error(type="conversation.item.create", item=bad))["param"] == param
    # the history is what the client built: retrieve shows each item, in order
    order = []
    for item_id in ("client_root", "client_mid", "client_item_1", "client_item_0", "call_item_1", "call_out_1"):
        await c.send("conversation.item.retrieve", item_id=item_id)
        order.append((await c.until("conversation.item.retrieved", count=len(order) + 1))["item"]["id"])
    assert order[0] == "client_root"
    reply = await c.respond()
    assert reply["status"] == "completed" or reply["status_details"]["reason"] == "max_output_tokens"
    await c.close()


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_response_options(stack, beta):
    c = await Client.open(stack, beta)
    await c.turn_based()
    await c.typed("Say hello.", id="hello_item")
    meta = {"topic": "greeting"}
    r = await c.respond(metadata=meta, instructions="Answer in one word.")
    assert r["metadata"] == meta and c.of("response.created")[-1]["response"]["metadata"] == meta
    assert r["conversation_id"]
    # out of band: no conversation item for the reply, history unchanged
    added_before = len(c.of(c.added()))
    oob = await c.respond(conversation="none", metadata={"kind": "summary"},
                          input=[{"type": "item_reference", "id": "hello_item"},
                                 {"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "Summarise that."}]}])
    assert oob["conversation_id"] is None and oob["metadata"] == {"kind": "summary"}
    assert len(c.of(c.added())) == added_before
    err = await c.error(type="conversation.item.retrieve", item_id=oob["output"][0]["id"])
    assert err["code"] == "item_not_found"
    # input with conversation auto: this reply's context only, its output joins the history
    r = await c.respond(input=[{"type": "message", "role": "user",
                                "content": [{"type": "input_text", "text": "Count to three."}]}])
    assert c.of(c.added())[-1]["item"]["id"] == r["output"][0]["id"]
    # bad options: an error, nothing starts
    started = len(c.of("response.created"))
    assert (await c.error(type="response.create", response={"conversation": "other"}))["param"] == \
        "response.conversation"
    assert (await c.error(type="response.create", response={"metadata": {"k": 1}}))["param"] == "response.metadata"
    assert (await c.error(type="response.create", response={"input": [{"type": "item_reference", "id": "nope"}]})
            )["code"] == "item_not_found"
    await c.settle()
    assert len(c.of("response.created")) == started
    await c.close()


def _to24k(pcm16k: bytes) -> bytes:
    from core.audio import float_to_pcm16, resample

    return float_to_pcm16(resample(np.frombuffer(pcm16k, dtype="<i2").astype(np.float32) / 32768, 16000, 24000))


def _g711(pcm16k: bytes, fmt: str) -> bytes:
    from core.g711 import G711Encoder

    enc = G711Encoder(fmt, 16000)
    return enc.encode(pcm16k) + enc.flush()


@pytest.mark.parametrize("beta,fmt", [(False, "audio/pcmu"), (True, "g711_alaw")], ids=["ga-pcmu", "beta-alaw"])
async def test_g711_in_and_out(stack, speech16k, beta, fmt):
    c = await Client.open(stack, beta)
    if beta:
        s = await c.update(input_audio_format=fmt, output_audio_format=fmt)
        assert s["input_audio_format"] == fmt and s["output_audio_format"] == fmt
    else:
        s = await c.update(audio={"input": {"format": {"type": fmt}}, "output": {"format": {"type": fmt}}})
        assert s["audio"]["input"]["format"] == {"type": fmt} and s["audio"]["output"]["format"] == {"type": fmt}
    law = "audio/pcmu" if fmt in ("audio/pcmu", "g711_ulaw") else "audio/pcma"
    g711 = _g711(speech16k, law)
    for i in range(0, len(g711), 160):  # 20 ms frames, as a telephony bridge sends them
        await c.send("input_audio_buffer.append", audio=b64(g711[i:i + 160]))
    done = await c.until("response.done", timeout=90)
    transcript = c.of("conversation.item.input_audio_transcription.completed")
    assert transcript and "france" in transcript[0]["transcript"].lower()
    delta = "response.audio.delta" if beta else "response.output_audio.delta"
    out = b"".join(base64.b64decode(e["delta"]) for e in c.of(delta))
    assert done["response"]["status"] == "completed" and len(out) > 4000  # > 0.5 s at 8 kHz, 1 byte each
    from core.g711 import decode_g711

    level = np.abs(np.frombuffer(decode_g711(out, law), dtype="<i2")).mean()
    assert level > 100  # speech, not silence or noise from a wrong law
    session_id = c.events[0]["session"]["id"]
    await c.close()
    # the recording keeps both sides as PCM: all of the user's speech (8 kHz) and the reply (24 kHz)
    await wait_meta(stack, session_id)
    d = stack.sessions_dir / session_id
    heard = {}
    for side in ("user_audio", "ai_audio"):
        for path in (d / side).iterdir():
            with wave.open(str(path)) as w:
                pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
                heard.setdefault(side, []).append((w.getframerate(), pcm.size, np.abs(pcm).mean()))
    assert {r for r, _, _ in heard["user_audio"]} == {8000}
    assert sum(n for _, n, _ in heard["user_audio"]) >= len(g711) - 800  # every sample sent
    assert max(level for _, _, level in heard["user_audio"]) > 100
    assert {r for r, _, _ in heard["ai_audio"]} == {24000} and sum(n for _, n, _ in heard["ai_audio"]) > 12000


async def test_g711_bad_rate_is_an_error_and_the_session_goes_on(stack):
    c = await Client.open(stack)
    err = await c.error(type="session.update", session={"type": "realtime", "audio": {
        "input": {"format": {"type": "audio/pcmu", "rate": 16000}}}})
    assert err["param"] == "session.audio.input.format.rate" and "8000" in err["message"]
    err = await c.error(type="session.update", session={"type": "realtime", "audio": {
        "output": {"format": {"type": "audio/opus"}}}})
    assert err["param"] == "session.audio.output.format.type"
    s = await c.update(audio={"input": {"format": {"type": "audio/pcma"}}})
    assert s["audio"]["input"]["format"] == {"type": "audio/pcma"}
    await c.close()


async def test_transcription_session_ga(stack, speech16k):
    c = await Client.open(stack, query="&intent=transcription")
    assert c.events[0]["session"]["type"] == "transcription"
    s = await c.update(type="transcription", audio={"input": {"format": {"type": "audio/pcm", "rate": 24000},
                                                              "transcription": {"model": "whisper-1", "language": "en"}}})
    assert s["type"] == "transcription" and s["audio"]["input"]["transcription"]["language"] == "en"
    await c.send("input_audio_buffer.append", audio=b64(_to24k(speech16k)))
    done = await c.until("conversation.item.input_audio_transcription.completed", timeout=60)
    assert "france" in done["transcript"].lower() and done["usage"]["seconds"] > 1
    delta = c.of("conversation.item.input_audio_transcription.delta")
    assert delta and delta[0]["item_id"] == done["item_id"]
    assert (await c.error(type="response.create"))["message"] == "a transcription session makes no responses"
    await c.settle(1.0)
    assert not c.of("response.created")
    await c.close()


async def test_transcription_session_beta(stack, speech16k):
    c = await Client.open(stack, beta=True, query="&intent=transcription", created="transcription_session.created")
    await c.send("transcription_session.update", session={
        "input_audio_format": "g711_ulaw", "input_audio_transcription": {"model": "whisper-1"},
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}})
    s = (await c.until("transcription_session.updated"))["session"]
    assert s["input_audio_format"] == "g711_ulaw"
    assert (await c.error(type="session.update", session={}))["param"] == "type"
    g711 = _g711(speech16k, "audio/pcmu")
    for i in range(0, len(g711), 160):
        await c.send("input_audio_buffer.append", audio=b64(g711[i:i + 160]))
    done = await c.until("conversation.item.input_audio_transcription.completed", timeout=60)
    assert "france" in done["transcript"].lower()
    await c.settle(1.0)
    assert not c.of("response.created")
    await c.close()


async def test_extensions_opt_in(stack):
    c = await Client.open(stack, query="&extensions=queue,session.metrics",
                          extensions=frozenset({"queue.position", "queue.assigned", "session.metrics"}))
    kinds = [e["type"] for e in c.events]
    assert kinds == ["queue.assigned", "session.created"]  # no session.recording: not asked for
    await c.turn_based()
    await c.typed("Hi")
    await c.respond()
    await c.until("session.metrics")
    await c.close()
    # an unknown name: a clear error first, then the session as usual
    c = await Client.open(stack, query="&extensions=all,bogus", extensions=EXTENSION_EVENTS)
    assert c.events[0]["type"] == "error" and c.events[0]["error"]["code"] == "unknown_extension"
    assert "'bogus'" in c.events[0]["error"]["message"]
    assert [e["type"] for e in c.events[1:]] == ["queue.assigned", "session.recording", "session.created"]
    await c.close()
