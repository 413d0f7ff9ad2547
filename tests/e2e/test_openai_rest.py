"""The OpenAI REST API end to end: real worker and gateway processes, the official ``openai`` SDK.

Answers are checked for content, not just shape: words of transcripts, audio that decodes
with a plausible length, speech that transcribes back to its text.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import io
import json
import socket
import threading
import time
import wave

import av
import httpx
import jsonschema
import numpy as np
import openai
import pytest
import websockets
from openai import OpenAI

from core.media import wav_bytes
from tests.support.stack import Stack

MODEL = "omniduplex-cascade"
FOX = "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("rest"), workers=1, queue={"capacity": 1, "max_wait_s": 4}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(stack) -> OpenAI:
    return OpenAI(api_key="unused", base_url=f"{stack.url}/v1", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tts():
    from core.cascade.tts import PiperTts

    return PiperTts()


@pytest.fixture(scope="module")
def fox_pcm(tts) -> bytes:
    """The fox sentence spoken by the pipeline's own voice (no sampling noise), 24 kHz PCM16."""
    return b"\x00\x00" * 6000 + b"".join(tts.synthesize(FOX, deterministic=True)) + b"\x00\x00" * 12000


def words(text: str) -> list[str]:
    return "".join(ch.lower() if ch.isalnum() else " " for ch in text).split()


def overlap(expected: str, heard: str) -> float:
    want, got = words(expected), set(words(heard))
    return sum(w in got for w in want) / len(want)


def sounds_like(expected: str, heard: str) -> float:
    """How alike two texts' letters are (0..1). Speech with Piper's natural noise is sometimes
    heard with word boundaries moved ("France is Paris" -> "Francis, Arris"); the letters still agree."""
    def letters(text: str) -> str:
        return "".join(ch.lower() for ch in text if ch.isalnum())
    return difflib.SequenceMatcher(None, letters(expected), letters(heard)).ratio()


def decoded_seconds(data: bytes) -> float:
    """Length of an encoded audio file, decoded with PyAV (independent of the server's code)."""
    with av.open(io.BytesIO(data)) as container:
        samples = sum(frame.samples for frame in container.decode(audio=0))
        return samples / container.streams.audio[0].rate


def encode(pcm24k: bytes, container: str, codec: str) -> bytes:
    """PCM16 24 kHz -> an Opus file in ``container`` (ogg or webm), as a browser would record."""
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=48000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm24k, "<i2").reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = 24000
        fifo = av.AudioFifo()
        for f in av.AudioResampler(format="s16", layout="mono", rate=48000).resample(frame):
            fifo.write(f)
        while fifo.samples:
            for packet in stream.encode(fifo.read(min(960, fifo.samples))):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def wait_idle(stack, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        h = stack.health()
        w = stack.worker_health()
        if h["slots_busy"] == 0 and h["queue_length"] == 0 and w["active_sessions"] == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not idle: gateway {h}, worker {w}")
        time.sleep(0.02)


# --------------------------------------------------------------------------- models


def test_models(client):
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-nothing")
    assert err.value.body["code"] == "model_not_found"


# --------------------------------------------------------------------------- chat


def test_chat_text(client, stack):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}], temperature=0,
    )
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.headers["x-omniduplex-worker-id"] == "w0"
    reply = raw.parse()
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens > 10 and 0 < reply.usage.completion_tokens < 40
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    wait_idle(stack)


def test_chat_text_streaming(client, stack):
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "Answer in one short sentence."},
                               {"role": "user", "content": "What is the capital of France?"}],
        temperature=0, stream=True, stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) >= 3 and all(c.modality == "text" for c in content)  # extension field
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= len(content) - 1
    wait_idle(stack)


def test_chat_text_and_audio(client, stack):
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}], temperature=0,
        modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"},
    )
    message = reply.choices[0].message
    assert message.content is None and "Paris" in message.audio.transcript
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24000, 1, 2)
        seconds = wav.getnframes() / 24000
    n = len(words(message.audio.transcript))
    assert 0.15 * n < seconds < 1.0 * n + 1, (seconds, message.audio.transcript)
    assert reply.usage.output_audio_seconds == pytest.approx(seconds, abs=0.05)
    heard = client.audio.transcriptions.create(model=MODEL, file=("reply.wav", base64.b64decode(message.audio.data)))
    assert sounds_like(message.audio.transcript, heard.text) >= 0.8, (message.audio.transcript, heard.text)
    wait_idle(stack)


def test_chat_text_and_audio_streaming(client, stack):
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me three facts about the sun."}],
        modalities=["text", "audio"], audio={"voice": "alloy", "format": "pcm16"}, max_tokens=60,
        stream=True, stream_options={"include_usage": True},
    )
    order, pcm, transcript, usage = [], b"", "", None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices or chunk.choices[0].delta.audio is None:
            continue
        audio = chunk.choices[0].delta.audio
        if getattr(audio, "data", None):
            pcm += base64.b64decode(audio.data)
            order.append("audio")
            assert chunk.modality == "audio"
        if getattr(audio, "transcript", None):
            transcript += audio.transcript
            order.append("text")
            assert chunk.modality == "text"
    assert len(pcm) % 2 == 0 and len(pcm) / 48000 > 1.0
    assert order.index("audio") < len(order) - 1 - order[::-1].index("text"), "audio must stream while text does"
    assert usage is not None and usage.output_audio_seconds == pytest.approx(len(pcm) / 48000, abs=0.05)
    samples = np.frombuffer(pcm, "<i2")
    assert np.abs(samples).max() > 1000  # speech, not silence
    wait_idle(stack)


def test_chat_with_input_audio_and_image(client, tts, stack):
    question = wav_bytes(b"\x00\x00" * 6000 + b"".join(tts.synthesize("What is the capital of France?",
                                                                      deterministic=True)) + b"\x00\x00" * 12000)
    reply = client.chat.completions.create(
        model=MODEL, temperature=0,
        messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(question).decode(), "format": "wav"}},
        ]}],
    )
    assert "Paris" in reply.choices[0].message.content
    png = _red_png()
    reply = client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=40,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}},
            {"type": "text", "text": "What colour is this image?"},
        ]}],
    )
    assert reply.choices[0].message.content.strip()
    wait_idle(stack)


def _red_png() -> bytes:
    import cv2

    img = np.zeros((64, 64, 3), np.uint8)
    img[:, :, 2] = 220
    return cv2.imencode(".png", img)[1].tobytes()


# --------------------------------------------------------------------------- function calling

WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                  "required": ["city", "unit"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
                                      "parameters": WEATHER_PARAMS, "strict": True}},
    {"type": "function", "function": {"name": "get_time", "description": "The current time.",
                                      "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
                                      "strict": True}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_chat_tool_call(client, stack):
    reply = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, max_tokens=60)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name in SCHEMAS
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])  # valid by construction
    named = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, max_tokens=60,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_PARAMS)
    spoken = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required",
                                            modalities=["text", "audio"], audio={"voice": "alloy", "format": "mp3"},
                                            max_tokens=60)
    message = spoken.choices[0].message  # a bare call says nothing: no audio, no text
    assert message.tool_calls[0].function.name in SCHEMAS and message.audio is None and message.content is None
    wait_idle(stack)


def test_chat_tool_call_streaming(client, stack):
    # the SDK's stream helper accumulates delta.tool_calls and parses strict tools' arguments
    with client.chat.completions.stream(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, max_tokens=60,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}}
                                        ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds and "tool_calls.function.arguments.done" in kinds
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(call.function.parsed_arguments, WEATHER_PARAMS)
    assert call.function.parsed_arguments == json.loads(call.function.arguments)
    wait_idle(stack)


def test_chat_tool_round_trip(client, stack):
    first = client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS, max_tokens=60,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    history = [*ASK_WEATHER, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp": 21, "sky": "sunny"})}]
    reply = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=40, temperature=0)
    choice = reply.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert any(w in choice.message.content.lower() for w in ("21", "sunny")), choice.message.content
    wait_idle(stack)


def test_chat_tool_errors(client, stack):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, tools=TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert err.value.body["param"] == "tool_choice" and "nope" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[
            *ASK_WEATHER, {"role": "tool", "tool_call_id": "call_x", "content": "21"}], tools=TOOLS)
    assert err.value.body["param"] == "messages[1].tool_call_id"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=ASK_WEATHER,
                                       tools=[{"type": "custom", "custom": {"name": "x"}}])
    assert err.value.body["param"] == "tools[0].type"
    wait_idle(stack)


# --------------------------------------------------------------------------- speech


def test_speech_formats_and_speed(client, stack):
    wav = client.audio.speech.create(model=MODEL, voice="alloy", input=FOX, response_format="wav").content
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    seconds = (len(wav) - 44) / 48000
    assert 1.5 < seconds < 5.0, seconds
    assert decoded_seconds(wav) == pytest.approx(seconds, abs=0.01)
    heard = client.audio.transcriptions.create(model=MODEL, file=("speech.wav", wav))
    assert overlap(FOX, heard.text) >= 0.8, heard.text
    pcm = client.audio.speech.create(model=MODEL, voice="alloy", input=FOX, response_format="pcm").content
    assert abs(len(pcm) - (len(wav) - 44)) < 0.15 * len(pcm)  # same speech, minus the header (sampling noise)
    fast = client.audio.speech.create(model=MODEL, voice="alloy", input=FOX, response_format="pcm", speed=2.0).content
    assert 0.35 < len(fast) / len(pcm) < 0.7
    mp3 = client.audio.speech.create(model=MODEL, voice="alloy", input=FOX).content  # default: mp3
    assert decoded_seconds(mp3) == pytest.approx(seconds, rel=0.2)
    wait_idle(stack)


def test_speech_streaming_response(client, stack):
    text = "Hello there. This answer is streamed in pieces. Each sentence leaves as soon as it is spoken."
    started = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, voice="alloy", input=text, response_format="opus",
    ) as response:
        assert response.headers["content-type"] == "audio/ogg"
        assert response.headers["x-omniduplex-worker-id"] == "w0"
        arrivals, chunks = [], []
        for chunk in response.iter_bytes():
            arrivals.append(time.perf_counter() - started)
            chunks.append(chunk)
    data = b"".join(chunks)
    assert len(chunks) >= 3, "streamed in several pieces"
    assert arrivals[0] < arrivals[-1] - 0.05, "the first bytes came before the synthesis ended"
    assert 3.0 < decoded_seconds(data) < 12.0
    heard = client.audio.transcriptions.create(model=MODEL, file=("speech.ogg", data))
    assert sounds_like(text, heard.text) >= 0.8, heard.text
    wait_idle(stack)


# --------------------------------------------------------------------------- transcriptions


def test_transcription_wav_ogg_webm(client, fox_pcm, stack):
    files = {
        "fox.wav": wav_bytes(fox_pcm),
        "fox.ogg": encode(fox_pcm, "ogg", "libopus"),
        "fox.webm": encode(fox_pcm, "webm", "libopus"),
    }
    for name, data in files.items():
        result = client.audio.transcriptions.create(model=MODEL, file=(name, data))
        assert overlap(FOX, result.text) >= 0.8, (name, result.text)
    verbose = client.audio.transcriptions.create(model=MODEL, file=("fox.webm", files["fox.webm"]),
                                                 response_format="verbose_json", timestamp_granularities=["segment"])
    length = len(fox_pcm) / 48000
    assert verbose.duration == pytest.approx(length, abs=0.1)
    assert verbose.language == "english" and verbose.segments
    assert all(0 <= s.start < s.end <= length + 0.05 for s in verbose.segments)
    assert overlap(FOX, " ".join(s.text for s in verbose.segments)) >= 0.8
    text = client.audio.transcriptions.create(model=MODEL, file=("fox.wav", files["fox.wav"]), response_format="text")
    assert isinstance(text, str) and overlap(FOX, text) >= 0.8
    srt = client.audio.transcriptions.create(model=MODEL, file=("fox.wav", files["fox.wav"]), response_format="srt")
    assert srt.startswith("1\n00:00:0") and " --> " in srt
    wait_idle(stack)


# --------------------------------------------------------------------------- errors and limits


def test_bad_input_gets_precise_4xx(client, stack):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}])
    assert err.value.body["param"] == "messages[0].tool_call_id"
    assert err.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], modalities=["audio"])
    assert err.value.body["param"] == "audio"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    assert err.value.body["param"] == "messages[0].content[0].image_url.url"
    with pytest.raises(openai.BadRequestError) as err:  # decoded on the worker, still a 400
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"not audio").decode(), "format": "wav"}}]}])
    assert err.value.body["code"] == "invalid_audio" and err.value.body["param"] == "messages[0].content[0].input_audio"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as err:  # two budgets that may disagree: OpenAI's 400
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                       max_completion_tokens=2388)
    assert err.value.body["code"] == "invalid_parameter_combination" and err.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.transcriptions.create(model=MODEL, file=("notes.txt", b"these are not sounds"))
    assert err.value.body["param"] == "file"
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model=MODEL, voice="alloy", input="...", response_format="wav")
    assert err.value.body["param"] == "input"
    r = httpx.post(f"{stack.url}/v1/chat/completions", content=b"{not json", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    wait_idle(stack)


def test_payload_limits(stack):
    url = f"{stack.url}/v1/chat/completions"
    # Early: the declared length alone is refused, before any of the body is sent.
    with socket.create_connection(("127.0.0.1", stack.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {50 * 2**20}\r\n\r\n".encode())
        answer = b""
        while b"request_too_large" not in answer and (chunk := sock.recv(65536)):
            answer += chunk  # headers and body may arrive in separate segments
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer

    def chunked():
        for _ in range(30):
            yield b"x" * 2**20

    r = httpx.post(url, content=chunked(), timeout=30)  # no Content-Length: counted while reading
    assert r.status_code == 413
    r = httpx.post(f"{stack.url}/v1/audio/speech", json={"model": MODEL, "voice": "a", "input": "x" * 70_000},
                   timeout=10)
    assert r.status_code == 413
    assert stack.health()["slots_busy"] == 0


# --------------------------------------------------------------------------- pool


def test_client_leaving_mid_stream_releases_the_worker(stack):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story about a brave knight."}],
            "stream": True, "modalities": ["text", "audio"], "audio": {"voice": "a", "format": "pcm16"},
            "max_tokens": 300}
    with httpx.Client(timeout=30) as http, http.stream("POST", f"{stack.url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        for i, _ in enumerate(r.iter_lines()):
            if i > 10:
                break
    wait_idle(stack, timeout=3)


def test_client_leaving_a_long_transcription_frees_the_worker_soon(stack, fox_pcm, client):
    """Whisper cannot stop mid-window, but the worker stops at the next 30 s window and only then
    frees its slot, so the request after it is served, not refused as busy."""
    speech = np.frombuffer(fox_pcm + b"\x00\x00" * 24000 * 20, "<i2")[::3]  # 8 kHz is plenty here
    u8 = ((np.tile(speech, 40).astype(np.int32) >> 8) + 128).astype(np.uint8).tobytes()  # 15 min: 30 windows
    long_wav = wav_bytes(u8, 8000, sample_width=1)  # 8-bit 8 kHz WAV keeps the upload at 7 MB
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{stack.url}/v1/audio/transcriptions", data={"model": MODEL},
                   files={"file": ("long.wav", long_wav)}, timeout=2.0)
    started = time.monotonic()
    wait_idle(stack, timeout=3)
    assert time.monotonic() - started < 2.5
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5)
    assert reply.choices[0].message.content


async def test_rest_waits_in_the_same_fifo_as_realtime_sessions(stack, client):
    """A realtime session holds the only worker: REST requests queue behind it (FIFO), time out
    with 503 after ``queue.max_wait_s``, leave the queue at once when their client gives up, and
    get 429 when the queue (capacity 1) is full."""
    ws_url = f"ws://127.0.0.1:{stack.port}/v1/realtime?model={MODEL}"
    async with websockets.connect(ws_url) as ws:
        while '"session.created"' not in await ws.recv():
            pass
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as err:  # 503 after max_wait_s = 4
            await _in_thread(lambda: client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]))
        assert err.value.status_code == 503 and err.value.body["code"] == "queue_timeout"
        assert 3.5 < time.monotonic() - started < 8

        with pytest.raises(httpx.ReadTimeout):  # gives up while queued
            await _in_thread(lambda: httpx.post(f"{stack.url}/v1/audio/speech",
                                                json={"model": MODEL, "voice": "a", "input": "hi"}, timeout=0.7))
        await _until(lambda: stack.health()["queue_length"] == 0, timeout=1.0)

        result: dict = {}
        waiter = threading.Thread(target=lambda: result.update(r=client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "What is two plus two?"}], max_tokens=20)))
        waiter.start()
        await _until(lambda: stack.health()["queue_length"] == 1)
        with pytest.raises(openai.RateLimitError) as err:
            await _in_thread(lambda: client.audio.speech.create(model=MODEL, voice="a", input="hi"))
        assert err.value.body["code"] == "queue_full"
        await asyncio.sleep(1.0)
    await _in_thread(lambda: waiter.join(30))
    raw = result["r"]
    assert raw.parse().choices[0].message.content
    assert int(raw.headers["x-omniduplex-queued-ms"]) > 1000
    wait_idle(stack)


async def _in_thread(fn):
    return await asyncio.to_thread(fn)


async def _until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)
