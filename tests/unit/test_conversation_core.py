"""The conversation core on a scripted backend (tests/support/scripted_backend.py): turn-taking, the
held speculative reply, barge-in, cancel, truncate to the heard share, items, close.

Deterministic and fast: the "VAD" hears loudness, the "model" speaks a fixed script with one
0.2 s segment per word. The real backends run the same core (tests/e2e/test_golden_trace.py).
"""

from __future__ import annotations

import asyncio

import pytest

from core.conversation import ConversationConfig, TurnDetection
from core.errors import InvalidAudioError, InvalidTextError, NoActiveResponseError, ResponseActiveError
from tests.support.helpers import Collector
from tests.support.scripted_backend import ScriptedBackend, quiet, tone

WORDS = ["one", "two", "three", "four", "five"]


def vad_config(**turn) -> ConversationConfig:
    return ConversationConfig(input_sample_rate=16000, turn_detection=TurnDetection(**turn))


async def feed(conv, pcm: bytes, realtime: bool = False) -> None:
    step = 16000 * 20 // 1000 * 2
    for i in range(0, len(pcm), step):
        await conv.append_audio(pcm[i:i + step])
        if realtime:
            await asyncio.sleep(0.02)


def kinds(col: Collector) -> list[str]:
    return [e.type for _, e in col.events]


def squeeze(seq: list[str]) -> list[str]:
    """Runs of text/audio deltas as one entry: their interleaving depends on thread timing."""
    out: list[str] = []
    for kind in seq:
        if kind in ("text_delta", "audio_chunk"):
            kind = "deltas"
        if not out or out[-1] != kind or kind != "deltas":
            out.append(kind)
    return out


@pytest.fixture
def backend():
    b = ScriptedBackend(WORDS)
    yield b
    b.close()


async def test_typed_turn_streams_text_and_segmented_audio(backend):
    conv = backend.open_conversation(ConversationConfig(turn_detection=None))
    col = Collector(conv)
    user = await conv.add_text("Hi there")
    await conv.create_response()
    done = await col.wait_for("response_done")
    assert squeeze(kinds(col)) == ["response_started", "deltas", "response_done"]
    assert done.status == "completed" and done.text == "one two three four five "
    assert done.audio_ms == pytest.approx(1000.0)  # five 0.2 s segments, nothing lost in chunking
    assert all(len(e.pcm) == 4800 for e in col.of("audio_chunk"))  # 100 ms pieces at 24 kHz
    assert [(m.role, m.content) for m in conv.history] == [("user", "Hi there"),
                                                          ("assistant", "one two three four five")]
    assert conv.history[0].item_id == user and conv.history[1].item_id == done.item_id
    assert backend.jobs[0].system == "scripted" and [i.text for i in backend.jobs[0].items] == ["Hi there"]
    await conv.close()
    assert backend.released == [{"replies": 1}]


async def test_spoken_turn_transcript_first_uses_the_held_speculative_reply(backend):
    conv = backend.open_conversation(vad_config())
    col = Collector(conv)
    await feed(conv, tone(0.6))
    await feed(conv, quiet(0.8), realtime=True)  # the pause starts the speculation in real time
    await col.wait_for("response_done")
    assert squeeze(kinds(col)) == ["speech_started", "speech_stopped", "input_committed", "input_transcript",
                                   "response_started", "deltas", "response_done"]
    started, stopped, committed, transcript = (col.of(k)[0] for k in (
        "speech_started", "speech_stopped", "input_committed", "input_transcript"))
    assert started.item_id == stopped.item_id == committed.item_id == transcript.item_id
    assert transcript.transcript == "hello there"
    assert conv.stats.speculative_replies_used == 1 and conv.stats.speculative_hits == 1
    assert [m.role for m in conv.history] == ["user", "assistant"]
    await conv.close()


async def test_speech_resuming_drops_the_held_reply(backend):
    conv = backend.open_conversation(vad_config())
    col = Collector(conv)
    await feed(conv, tone(0.5))
    await feed(conv, quiet(0.25), realtime=True)  # a pause, not an end: a held reply may start
    await feed(conv, tone(0.5))
    await feed(conv, quiet(0.8), realtime=True)
    await col.wait_for("response_done")
    await asyncio.sleep(0.1)
    assert kinds(col).count("response_started") == 1 and kinds(col).count("speech_started") == 1
    # the reply held at the first pause was dropped when speech resumed; the second one was used
    assert conv.stats.speculative_replies_dropped == 1 and conv.stats.speculative_replies_used == 1
    await conv.close()


async def test_words_heard_before_the_voice_went_on_are_read_ahead():
    """A pause shorter than its transcript: the voice is back before the words are known, so no
    reply is held on them; the model reads them ahead instead, and the turn's one reply follows
    at its end as before."""
    backend = ScriptedBackend(WORDS, transcribe_s=0.3)
    conv = backend.open_conversation(vad_config())
    col = Collector(conv)
    await feed(conv, tone(0.5))
    await feed(conv, quiet(0.15), realtime=True)  # a pause: its transcript takes 0.3 s
    await feed(conv, tone(0.5), realtime=True)  # the voice is back before it comes
    await feed(conv, quiet(0.8), realtime=True)
    done = await col.wait_for("response_done")
    assert backend.read_aheads == ["hello there"]
    assert kinds(col).count("response_started") == 1 and done.status == "completed"
    assert conv.stats.speculative_replies_dropped == 0  # nothing was held on the words so far
    await conv.close()
    backend.close()


async def test_nothing_is_read_ahead_while_a_reply_is_made():
    """The reply being made owns the model's state: words over it are not read ahead."""
    backend = ScriptedBackend(WORDS * 4, step_s=0.05, transcribe_s=0.3)
    conv = backend.open_conversation(vad_config(ignore_backchannels=False))
    col = Collector(conv)
    await conv.add_text("Tell me a story")
    await conv.create_response()
    await col.wait_for("audio_chunk")
    conv.replies.read_ahead("so what")  # as a pause's transcript would ask while the reply runs
    assert backend.read_aheads == []
    await conv.close()
    backend.close()


async def test_a_turn_with_no_words_gets_no_reply_in_transcript_first_mode():
    backend = ScriptedBackend(WORDS, transcript="")
    conv = backend.open_conversation(vad_config())
    col = Collector(conv)
    await feed(conv, tone(0.5))
    await feed(conv, quiet(0.8), realtime=True)
    await col.wait_for("input_transcript")
    await asyncio.sleep(0.2)
    assert kinds(col) == ["speech_started", "speech_stopped", "input_committed", "input_transcript"]
    # the item the client was told about stays (with no words, as OpenAI keeps it); no reply
    assert [(m.role, m.content) for m in conv.history] == [("user", "")]
    await conv.close()
    backend.close()


async def test_audio_first_backend_replies_at_once_and_transcribes_when_idle():
    backend = ScriptedBackend(WORDS, transcript_first=False)
    conv = backend.open_conversation(vad_config())
    col = Collector(conv)
    await feed(conv, tone(0.5) + quiet(0.8))
    await col.wait_for("input_transcript")
    assert squeeze(kinds(col)) == ["speech_started", "speech_stopped", "input_committed", "response_started",
                                   "deltas", "response_done", "input_transcript"]
    user = conv.items[0]
    assert user.audio is not None and user.text == "hello there"  # the clip itself is the model's input
    assert backend.jobs[0].items[0].audio is not None
    await conv.close()
    backend.close()


async def test_barge_in_cancels_and_keeps_only_the_heard_words():
    """OpenAI's barge-in (our backchannel rule off): any voice over the reply cancels it at once,
    and the history keeps the words the listener heard (the real-time play head), marked cut."""
    backend = ScriptedBackend(WORDS * 4, step_s=0.05)
    conv = backend.open_conversation(vad_config(ignore_backchannels=False, resume_false_interruption=False))
    col = Collector(conv)
    await conv.add_text("Count")
    await conv.create_response()
    await col.wait_for("audio_chunk", count=4)
    await asyncio.sleep(0.5)  # ~2.5 words' audio played by now (0.2 s a word)
    await feed(conv, tone(0.3))
    done = await col.wait_for("response_done")
    assert done.status == "cancelled" and done.reason == "turn_detected"
    assert kinds(col).index("speech_started") < kinds(col).index("response_done")
    heard = conv.history[-1]
    assert heard.role == "assistant" and heard.item_id == done.item_id
    assert heard.content.endswith("…")
    words = heard.content.rstrip("…").split()
    assert 2 <= len(words) <= 4 and words == (WORDS * 4)[: len(words)]
    assert done.audio_ms > 1000, "more was sent than heard"
    sent = len(col.of("audio_chunk"))
    await asyncio.sleep(0.3)
    assert len(col.of("audio_chunk")) == sent, "no audio after the cancel"
    assert kinds(col)[-1] == "response_done"
    await conv.close()
    backend.close()


async def test_cancel_create_and_truncate_rules(backend):
    conv = backend.open_conversation(ConversationConfig(turn_detection=None))
    col = Collector(conv)
    with pytest.raises(NoActiveResponseError):
        await conv.cancel_response()
    await conv.add_text("Count")
    await conv.create_response()
    with pytest.raises(ResponseActiveError):
        await conv.create_response()
    done = await col.wait_for("response_done")
    with pytest.raises(InvalidAudioError):
        conv.truncate(done.item_id, 5000)  # beyond the 1000 ms sent
    with pytest.raises(InvalidTextError):
        conv.truncate("item_nope", 10)
    assert conv.truncate(done.item_id, 400) == "one two"  # two whole 200 ms segments heard
    assert conv.history[-1].content == "one two"
    assert conv.truncate(done.item_id, 0) == ""  # nothing heard: the item goes
    assert [m.role for m in conv.history] == ["user"]
    await conv.close()


async def test_items_delete_images_frames_and_trimming(backend):
    conv = backend.open_conversation(ConversationConfig(turn_detection=None, max_history_messages=3))
    first = await conv.add_text("a")
    image = await conv.add_image(b"\xff\xd8 fake jpeg")
    await conv.add_image(b"frame", frame=True)
    assert conv.items[-1].item_id == image and conv.items[-1].image_bytes == [b"\xff\xd8 fake jpeg"]
    assert conv.delete_item(first) and not conv.delete_item(first)
    for text in ("b", "c", "d"):
        await conv.add_text(text)
    assert [m.content for m in conv.history] == ["b", "c", "d"]  # oldest dropped beyond the limit
    with pytest.raises(InvalidTextError):
        await conv.add_text("   ")
    col = Collector(conv)
    await conv.create_response(output_audio=False)
    done = await col.wait_for("response_done")
    assert done.audio_ms == 0 and not col.of("audio_chunk")
    assert backend.jobs[-1].frames == ["5 bytes"]
    await conv.close()


async def test_close_mid_reply_ends_the_stream_and_frees_the_state():
    backend = ScriptedBackend(WORDS * 10, step_s=0.05)
    conv = backend.open_conversation(ConversationConfig(turn_detection=None))
    col = Collector(conv)
    await conv.add_text("Go on")
    await conv.create_response()
    await col.wait_for("audio_chunk")
    await conv.close()
    await asyncio.wait_for(col._task, 2)  # events() ended
    assert backend.jobs[0].cancelled and len(backend.released) == 1
    backend.close()
