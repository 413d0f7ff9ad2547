"""The embedded pipeline end to end, with the real models (Silero, Whisper, SmolLM2, Piper)."""

from __future__ import annotations

import asyncio

import cv2
import numpy as np
import pytest

from core.errors import (
    InvalidAudioError,
    InvalidImageError,
    InvalidTextError,
    NoActiveResponseError,
    ResponseActiveError,
)
from core.conversation import ConversationConfig, TurnDetection
from core.processors.base import Capability
from tests.support.helpers import Collector, noise, silence, speech_pcm, stream

QUESTION = "What is the capital of France?"


def voiced_bounds_ms(pcm: bytes, rate: int) -> tuple[float, float]:
    """First and last sample louder than -40 dBFS, in ms: where the speech really is."""
    a = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768)
    idx = np.nonzero(a > 0.01)[0]
    return idx[0] * 1000 / rate, idx[-1] * 1000 / rate


def test_backend_declares_capabilities(cascade_backend):
    assert cascade_backend.loaded
    assert {Capability.AUDIO_INPUT, Capability.AUDIO_OUTPUT, Capability.TEXT_OUTPUT,
            Capability.IMAGE_INPUT, Capability.DUPLEX} <= cascade_backend.capabilities.offered


@pytest.mark.parametrize("rate, realtime", [(16000, False), (24000, True)])
async def test_spoken_round_trip(cascade_backend, rate, realtime):
    conv = cascade_backend.open_conversation(ConversationConfig(input_sample_rate=rate))
    events = Collector(conv)
    speech = speech_pcm(cascade_backend, QUESTION, rate)
    lead = 1.0
    await stream(conv, silence(lead, rate) + speech + silence(1.5, rate), rate, chunk_ms=20, realtime=realtime)

    started = await events.wait_for("speech_started")
    stopped = await events.wait_for("speech_stopped")
    first, last = voiced_bounds_ms(speech, rate)
    assert abs(started.audio_start_ms - (lead * 1000 + first)) <= 150
    assert abs(stopped.audio_end_ms - (lead * 1000 + last)) <= 150
    assert started.item_id == stopped.item_id

    transcript = await events.wait_for("input_transcript")
    assert "capital" in transcript.transcript.lower() and "france" in transcript.transcript.lower()

    done = await events.wait_for("response_done", timeout=60)
    assert done.status in ("completed", "incomplete")
    text = "".join(e.delta for e in events.of("text_delta"))
    assert text.strip() and text == done.text
    chunks = events.of("audio_chunk")
    assert chunks and all(c.sample_rate == 24000 for c in chunks)
    pcm = b"".join(c.pcm for c in chunks)
    assert len(pcm) % 2 == 0
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    assert len(audio) / 24000 > 0.5
    assert np.sqrt(np.mean(audio**2)) > 0.01  # not silent
    assert abs(done.audio_ms - len(audio) / 24) < 1
    # the reply landed in the history after the user's words
    roles = [(m.role, m.content) for m in conv.history]
    assert roles[-2] == ("user", transcript.transcript)
    assert roles[-1][0] == "assistant"
    # whether or not the reply was started speculatively, the client sees the turn in order
    order = [e.type for _, e in events.events if e.type != "text_delta"]
    assert order.index("speech_stopped") < order.index("input_transcript") < order.index("response_started")
    assert order.index("response_started") < order.index("audio_chunk") < order.index("response_done")
    assert order.count("response_started") == 1
    await conv.close()


async def test_pause_inside_an_utterance_is_not_a_turn(cascade_backend):
    """A 300 ms pause is long enough to start a speculative reply, too short to end the turn:
    the client must see one turn with the whole question and one reply, nothing from the
    dropped speculation."""
    rate = 16000
    conv = cascade_backend.open_conversation(ConversationConfig(input_sample_rate=rate))
    events = Collector(conv)
    def trimmed(text: str) -> bytes:  # Piper pads clips with silence; cut it so the gap is exact
        pcm = speech_pcm(cascade_backend, text, rate)
        first, last = voiced_bounds_ms(pcm, rate)
        return pcm[int(first * rate / 1000) * 2 : int(last * rate / 1000) * 2]

    audio = (silence(0.5, rate) + trimmed("Tell me about") + silence(0.3, rate)
             + trimmed("the weather in London today.") + silence(1.5, rate))
    await stream(conv, audio, rate, realtime=True)
    done = await events.wait_for("response_done", timeout=60)
    order = [e.type for _, e in events.events if e.type not in ("text_delta", "audio_chunk")]
    assert order.count("speech_stopped") == 1 and order.count("response_started") == 1, order
    transcript = events.of("input_transcript")[0].transcript.lower()
    assert "tell me" in transcript and "london" in transcript
    assert all(e.response_id == done.response_id for e in events.of("audio_chunk") + events.of("text_delta"))
    await conv.close()


async def test_silence_and_low_noise_make_no_turn(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(input_sample_rate=16000))
    events = Collector(conv)
    await stream(conv, silence(2.0, 16000) + noise(3.0, 16000, dbfs=-45) + silence(1.0, 16000), 16000,
                 realtime=False)
    await asyncio.sleep(0.3)
    await conv.wait_idle()
    kinds = {e.type for _, e in events.events}
    assert not kinds & {"speech_started", "speech_stopped", "input_transcript", "response_started"}
    await conv.close()


async def test_cancel_mid_reply_stops_output(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=200))
    events = Collector(conv)
    await conv.add_text("Tell me a long story about a brave knight and a dragon.")
    await conv.create_response()
    # ~1.2 s of audio out, so at least the first spoken piece was emitted whole
    await events.wait_for("audio_chunk", timeout=30, count=12)
    result = await conv.cancel_response()
    done = await events.wait_for("response_done")
    assert done.status == "cancelled" and done.reason == "client_cancelled"
    assert result.audio_ms > 0 and result.text
    count = len(events.events)
    await asyncio.sleep(1.0)
    late = [e.type for _, e in events.events[count:]]
    assert late == [], f"events after cancel: {late}"
    # the cancelled reply is kept only as far as it was heard
    assert conv.history[-1].role == "assistant"
    assert len(conv.history[-1].content) <= len(result.text)
    with pytest.raises(NoActiveResponseError):
        await conv.cancel_response()
    # and the conversation goes on
    await conv.add_text("Thanks. What is two plus two?")
    await conv.create_response()
    assert (await events.wait_for("response_done", count=2, timeout=60)).status in ("completed", "incomplete")
    await conv.close()


async def test_barge_in_cancels_with_turn_detected(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(input_sample_rate=16000, max_output_tokens=200))
    events = Collector(conv)
    await conv.add_text("Tell me a long story about a brave knight and a dragon.")
    await conv.create_response()
    await events.wait_for("audio_chunk", timeout=30)
    await stream(conv, speech_pcm(cascade_backend, "Stop, please wait.", 16000) + silence(1.0, 16000), 16000,
                 realtime=False)
    await events.wait_for("speech_started")
    done = await events.wait_for("response_done")
    assert done.status == "cancelled" and done.reason == "turn_detected"
    # sent faster than real time, the voice ends before any reading of it lands: its words still
    # make it a turn (it was once dropped as noise and the story resumed)
    await events.wait_for("input_committed")
    assert not events.of("backchannel") and not events.of("response_resumed")
    await conv.close()


async def test_turn_based_commit_and_text(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(input_sample_rate=24000, turn_detection=None))
    events = Collector(conv)
    await stream(conv, speech_pcm(cascade_backend, QUESTION, 24000), 24000, realtime=False)
    assert not events.of("speech_started")  # no VAD in turn-based mode
    item = await conv.commit_audio()
    transcript = await events.wait_for("input_transcript")
    assert transcript.item_id == item and "france" in transcript.transcript.lower()
    rid = await conv.create_response()
    with pytest.raises(ResponseActiveError):
        await conv.create_response()
    done = await events.wait_for("response_done", timeout=60)
    assert done.response_id == rid and done.text.strip()
    with pytest.raises(InvalidAudioError):
        await conv.commit_audio()  # buffer is empty now
    await conv.close()


async def test_text_only_reply_has_no_audio(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, output_audio=False))
    events = Collector(conv)
    await conv.add_text("Say hello.")
    await conv.create_response()
    done = await events.wait_for("response_done", timeout=60)
    assert done.text.strip() and not events.of("audio_chunk") and done.audio_ms == 0
    await conv.close()


@pytest.mark.parametrize(
    "pcm, rate, match",
    [
        (b"\x00\x00" * 100, 44100, "sample rate"),
        (b"\x00\x00\x00", 16000, "even number of bytes"),
        (b"", 16000, "empty"),
    ],
)
async def test_bad_audio_is_a_clear_error_and_conversation_survives(cascade_backend, pcm, rate, match):
    from core.audio import pcm16_to_float

    with pytest.raises(InvalidAudioError, match=match):
        pcm16_to_float(pcm, rate)
    conv = cascade_backend.open_conversation(ConversationConfig(input_sample_rate=16000))
    if rate == 16000:
        with pytest.raises(InvalidAudioError, match=match):
            await conv.append_audio(pcm)
    events = Collector(conv)
    await stream(conv, silence(0.5, 16000) + speech_pcm(cascade_backend, QUESTION, 16000) + silence(1.2, 16000),
                 16000, realtime=False)
    transcript = await events.wait_for("input_transcript")
    assert "france" in transcript.transcript.lower()
    await conv.close()


async def test_bad_image_and_text_are_clear_errors(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, output_audio=False))
    with pytest.raises(InvalidImageError, match="could not be decoded"):
        await conv.add_image(b"\xff\xd8 definitely not a jpeg")
    with pytest.raises(InvalidImageError, match="empty"):
        await conv.add_image(b"")
    with pytest.raises(InvalidTextError):
        await conv.add_text("   ")
    with pytest.raises(ValueError):
        ConversationConfig(input_sample_rate=44100)
    # still usable
    await conv.add_text("Hi!")
    events = Collector(conv)
    await conv.create_response()
    assert (await events.wait_for("response_done", timeout=60)).text.strip()
    await conv.close()


async def test_frame_description_is_labelled_and_honest(cascade_backend):
    image = np.zeros((240, 320, 3), dtype=np.uint8)
    image[:, :] = (200, 60, 30)  # BGR: a blue picture
    ok, jpeg = cv2.imencode(".jpg", image)
    assert ok
    note = cascade_backend.describer.describe(jpeg.tobytes())
    assert "blue" in note and "no face" in note and "320x240" in note
    conv = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, output_audio=False))
    await conv.add_image(jpeg.tobytes())
    assert "not real vision" in conv.history[-1].content
    await conv.close()


async def test_truncate_keeps_what_was_heard(cascade_backend):
    conv = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=60))
    events = Collector(conv)
    await conv.add_text("Describe Paris in three sentences.")
    await conv.create_response()
    done = await events.wait_for("response_done", timeout=60)
    full = conv.history[-1].content
    with pytest.raises(InvalidAudioError):
        conv.truncate(done.item_id, int(done.audio_ms) + 5000)
    kept = conv.truncate(done.item_id, int(done.audio_ms // 2))
    assert 0 < len(kept) < len(full)
    assert full.startswith(kept.split()[0])
    await conv.close()


def test_turn_detection_settings_are_validated():
    with pytest.raises(ValueError):
        TurnDetection(threshold=1.5)
    with pytest.raises(ValueError):
        ConversationConfig(bogus=True)


async def test_closing_a_session_whose_reply_is_still_queued_does_not_stall_others(cascade_backend):
    """Regression: a reply whose LLM job was cancelled before it started used to leave the TTS
    thread waiting forever, so every later reply hung without audio."""
    busy = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=200))
    busy_events = Collector(busy)
    await busy.add_text("Tell me a long story about a brave knight.")
    await busy.create_response()
    await busy_events.wait_for("text_delta", timeout=30)
    queued = cascade_backend.open_conversation(ConversationConfig(turn_detection=None))
    await queued.add_text("Hello!")
    await queued.create_response()  # its LLM job waits behind the busy one
    await asyncio.sleep(0.1)  # let the reply's task submit its jobs to the stage threads
    await queued.close()
    await busy.cancel_response()
    await busy.close()
    fresh = cascade_backend.open_conversation(ConversationConfig(turn_detection=None, max_output_tokens=30))
    events = Collector(fresh)
    await fresh.add_text("Say hello.")
    await fresh.create_response()
    done = await events.wait_for("response_done", timeout=30)
    assert done.status in ("completed", "incomplete") and events.of("audio_chunk")
    await fresh.close()
