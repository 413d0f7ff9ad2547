"""Golden event traces: the exact server event sequence of each real backend, pinned.

The conversation logic (items, turns, responses) is shared by every backend; a change to it
must not change what clients see. Each scenario runs through a real gateway and worker (the
cascade, and the ``qwen_omni`` backend on a tiny random-weight Qwen2.5-Omni) and its events
are normalised and compared with ``tests/e2e/golden/<backend>.json``:

- every event's type, in order; ids replaced by names in order of first appearance that keep
  the role (``u1`` user item, ``a1`` assistant item, ``r1`` response), so id linkage is pinned
  (``item_id``, ``previous_item_id``, ``response_id``, ``item.id``);
- item roles and content part types, response status and reason, error codes;
- a run of streaming deltas is one entry naming the delta types in it (their interleaving and
  count depend on thread timing); what they carry is checked exactly in code instead: the
  deltas add up to the final transcript/text, carry their response's ids, and audio replies
  have audio.

Nothing timing-dependent (times, ms, byte counts, words) goes into the golden files.
``OMNIDUPLEX_GOLDEN_UPDATE=1`` rewrites them from a run.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import json
import os
import time
from pathlib import Path

import pytest
import websockets

from tests.support.realtime_client import Client
from tests.support.stack import Stack
from tests.support.tiny_omni import build_qwen2_5_omni


GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("OMNIDUPLEX_GOLDEN_UPDATE") == "1"
DELTAS = {"response.output_audio.delta", "response.output_audio_transcript.delta", "response.output_text.delta"}
LONG = "Tell me a long story about a dragon who learns to fly over the mountains."
QUESTION = "What is the capital of France?"
_results: dict[str, dict[str, list[str]]] = {}


# --------------------------------------------------------------------------- stacks


@pytest.fixture(scope="module")
def cascade_stack(stack):
    """The suite's shared default stack (``tests/conftest.py``)."""
    return stack


@pytest.fixture(scope="module")
def qwen_stack(tmp_path_factory):
    model = build_qwen2_5_omni(tmp_path_factory.mktemp("golden_qwen") / "model")
    options = {"model_path": str(model), "device": "cpu", "dtype": "float32", "seed": 0, "max_frames": 2,
               "talker_codes_per_token": 6, "token2wav_steps": 4, "talker_sample": False}
    s = Stack(tmp_path_factory.mktemp("golden_qwen_stack"), workers=1,
              backend={"name": "qwen_omni", "options": options}).start(timeout=240)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def speech():
    """Spoken prompts (the cascade's Piper voice, deterministic), PCM16 at 16 kHz with silence."""
    from core.audio import float_to_pcm16, resample
    from core.cascade.tts import PiperTts

    tts = PiperTts()

    def make(text: str, tail_s: float = 1.2) -> bytes:
        import numpy as np

        pcm = b"".join(tts.synthesize(text, deterministic=True))
        audio = resample(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, 24000, 16000)
        return b"\x00\x00" * 3200 + float_to_pcm16(audio) + b"\x00\x00" * int(16000 * tail_s)

    return make


BACKENDS = {"cascade": "cascade_stack", "qwen_omni": "qwen_stack"}


@pytest.fixture(params=list(BACKENDS))
def backend(request):
    return request.param, request.getfixturevalue(BACKENDS[request.param])


# --------------------------------------------------------------------------- a recorded session


class Session(Client):
    """The shared test client (its event checks are not asserted here: the trace is) and audio streaming."""

    def __init__(self, ws) -> None:
        super().__init__(ws, timeout=90.0)

    async def stream(self, pcm: bytes, chunk_ms: int = 40, realtime: bool = True) -> None:
        step = 16000 * chunk_ms // 1000 * 2
        t0 = time.monotonic()
        for i in range(0, len(pcm), step):
            await self.send("input_audio_buffer.append", audio=base64.b64encode(pcm[i:i + step]).decode())
            ahead = t0 + (i + step) / 32000 - time.monotonic()
            if realtime and ahead > 0:
                await asyncio.sleep(ahead)


async def open_session(stack, model: str, turn_detection) -> Session:
    deadline = time.monotonic() + 20
    while stack.health()["slots_busy"]:  # the last scenario's slot is free: no queue events
        assert time.monotonic() < deadline, "the worker's slot was never released"
        await asyncio.sleep(0.05)
    ws = await websockets.connect(f"ws://127.0.0.1:{stack.port}/v1/realtime?model=omniduplex-{model}&extensions=all", max_size=None)
    s = Session(ws)
    await s.until("session.created")
    await s.send("session.update", session={"type": "realtime", "temperature": 0, "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": turn_detection}}})
    await s.until("session.updated")
    return s


VAD = {"type": "server_vad", "silence_duration_ms": 500}


async def typed(s: Session, text: str, count: int, **response) -> dict:
    await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                    "content": [{"type": "input_text", "text": text}]})
    await s.send("response.create", response=response)
    return await s.until("response.done", count=count)


# --------------------------------------------------------------------------- scenarios


async def typed_turn(s: Session, speech) -> None:
    await typed(s, QUESTION, 1, max_output_tokens=24)
    await s.until("session.metrics")


async def spoken_turn(s: Session, speech) -> None:
    await s.stream(speech(QUESTION))
    await s.until("response.done")
    await s.until("session.metrics")
    await s.until("conversation.item.input_audio_transcription.completed")


async def long_reply_playing(s: Session) -> None:
    await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                    "content": [{"type": "input_text", "text": LONG}]})
    await s.send("response.create", response={"max_output_tokens": 400})
    await s.until("response.output_audio.delta")


async def barge_in(s: Session, speech) -> None:
    await long_reply_playing(s)
    await s.stream(speech(QUESTION), realtime=False)
    first = await s.until("response.done")
    assert first["response"]["status_details"]["reason"] == "turn_detected"
    await s.until("response.done", count=2)
    await s.until("session.metrics", count=2)
    await s.until("conversation.item.input_audio_transcription.completed")


async def cancel(s: Session, speech) -> None:
    await long_reply_playing(s)
    await s.send("response.cancel")
    done = await s.until("response.done")
    assert done["response"]["status"] == "cancelled"
    await s.until("session.metrics")
    await s.send("response.cancel")
    await s.until("error")


async def truncate(s: Session, speech) -> None:
    done = await typed(s, QUESTION, 1, max_output_tokens=24)
    await s.until("session.metrics")
    item = done["response"]["output"][0]
    full = item["content"][0]["transcript"]
    await s.send("conversation.item.truncate", item_id=item["id"], content_index=0, audio_end_ms=10**6)
    await s.until("error")
    sent_ms = sum(len(base64.b64decode(e["delta"])) for e in s.events
                  if e["type"] == "response.output_audio.delta") / 48
    await s.send("conversation.item.truncate", item_id=item["id"], content_index=0, audio_end_ms=int(sent_ms * 0.7))
    await s.until("conversation.item.truncated")
    await s.send("conversation.item.retrieve", item_id=item["id"])
    got = await s.until("conversation.item.retrieved")
    kept = got["item"]["content"][0]["transcript"]  # an audio reply: its transcript, cut to what was heard
    assert 0 < len(kept) < len(full.strip()) and full.split()[: len(kept.split())] == kept.split()


async def delete(s: Session, speech) -> None:
    await s.send("conversation.item.create", item={"type": "message", "role": "user",
                                                    "content": [{"type": "input_text", "text": "Remember me."}]})
    added = await s.until("conversation.item.done")
    item_id = added["item"]["id"]
    await s.send("conversation.item.delete", item_id=item_id)
    await s.until("conversation.item.deleted")
    await s.send("conversation.item.retrieve", item_id=item_id)
    await s.until("error")
    await s.send("conversation.item.delete", item_id=item_id)
    await s.until("error", count=2)


SCENARIOS = {
    "typed_turn": (typed_turn, None),
    "spoken_turn": (spoken_turn, VAD),
    "barge_in": (barge_in, VAD),
    "cancel": (cancel, None),
    "truncate": (truncate, None),
    "delete": (delete, None),
}


# --------------------------------------------------------------------------- normalisation


class Names:
    """Symbolic ids by first appearance, keeping the role: u1, a1, r1."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def __call__(self, value: str | None, role: str = "x") -> str:
        if value is None:
            return "-"
        if value not in self.names:
            prefix = {"user": "u", "assistant": "a", "system": "s", "response": "r"}.get(role, "x")
            self.counts[prefix] = self.counts.get(prefix, 0) + 1
            self.names[value] = f"{prefix}{self.counts[prefix]}"
        return self.names[value]


def _item(names: Names, item: dict) -> str:
    parts = ",".join(p.get("type", "?") for p in item.get("content") or [])
    return f"{names(item.get('id'), item.get('role', 'x'))}:{item.get('role')}:{item.get('status', '')}[{parts}]"


def normalise(events: list[dict]) -> list[str]:
    names = Names()
    out: list[str] = []
    run: set[str] = set()
    for e in events:
        kind = e["type"]
        if kind in DELTAS:
            run.add(kind.removeprefix("response.").removesuffix(".delta"))
            continue
        if run:
            out.append(f"deltas[{','.join(sorted(run))}]")
            run = set()
        fields = []
        if kind == "response.created":
            fields.append(names(e["response"]["id"], "response"))
        if kind == "response.output_item.added":
            fields.append(names(e["item"]["id"], "assistant"))
        if "response_id" in e:
            fields.append(names(e["response_id"], "response"))
        if "item" in e and isinstance(e["item"], dict):
            fields.append(_item(names, e["item"]))
        elif "item_id" in e:
            fields.append(names(e["item_id"], "user" if kind.startswith("input_audio_buffer.") else "x"))
        if "previous_item_id" in e:
            fields.append(f"prev={names(e['previous_item_id'])}")
        if kind == "response.done":
            r = e["response"]
            reason = (r.get("status_details") or {}).get("reason")
            fields.append(f"{names(r['id'], 'response')}:{r['status']}:{reason}")
            fields.append("output=" + ",".join(_item(names, i) for i in r.get("output") or []))
        if kind == "error":
            fields.append(f"code={e['error'].get('code')}")
        if kind == "session.metrics":
            fields.append(names(e["metrics"].get("response_id"), "response"))
        out.append(" ".join([kind, *fields]))
    if run:
        out.append(f"deltas[{','.join(sorted(run))}]")
    return out


def check_deltas(events: list[dict]) -> None:
    """What the collapsed runs carried, exactly: deltas add up to the final text (in its
    ``...done`` event and in ``response.done``), carry their response's ids, and the audio is
    there and is what ``session.metrics`` counts."""
    started = {e["response"]["id"]: e for e in events if e["type"] == "response.created"}
    dones = [e for e in events if e["type"] == "response.done"]
    assert sorted(started) == sorted(d["response"]["id"] for d in dones), "every response ends once"
    for done in dones:
        rid = done["response"]["id"]
        (item,) = done["response"]["output"]
        mine = [e for e in events if e.get("response_id") == rid]
        deltas = [e for e in events if e["type"] in DELTAS]
        assert all(e.get("response_id") in started for e in deltas), "a delta outside any response"
        assert all(e["item_id"] == item["id"] for e in mine if e["type"] in DELTAS)
        text = "".join(e["delta"] for e in mine if e["type"] in DELTAS - {"response.output_audio.delta"})
        (final,) = [e for e in mine if e["type"] in ("response.output_audio_transcript.done",
                                                      "response.output_text.done")]
        assert text == final.get("transcript", final.get("text")), "deltas add up to the final text"
        (part,) = item["content"]
        assert text == part.get("transcript", part.get("text")), "deltas add up to response.done's text"
        audio = b"".join(base64.b64decode(e["delta"]) for e in mine if e["type"] == "response.output_audio.delta")
        assert len(audio) % 2 == 0, "PCM16"
        # every reply here is an audio reply, and cancelled ones are cancelled after audio began
        assert len(audio) > 0, "an audio reply has sound"
        if done["response"]["status"] != "cancelled":
            assert text, "a finished reply has words"
        (metrics,) = [e["metrics"] for e in events
                      if e["type"] == "session.metrics" and e["metrics"].get("response_id") == rid]
        assert abs(metrics["audio_ms"] - len(audio) / 48) < 1.0, "session.metrics counts the audio the client got"


# --------------------------------------------------------------------------- the test


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_event_trace_matches_golden(backend, scenario, speech):
    name, stack = backend
    run, turn_detection = SCENARIOS[scenario]
    s = await open_session(stack, name, turn_detection)
    try:
        await run(s, speech)
        await s.settle(0.6)
    finally:
        await s.ws.close()
    check_deltas(s.events)
    trace = normalise(s.events)
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        _results.setdefault(name, json.loads(path.read_text()) if path.exists() else {})[scenario] = trace
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(_results[name], indent=1, sort_keys=True) + "\n")
        return
    golden = json.loads(path.read_text())[scenario]
    if trace != golden:
        diff = "\n".join(difflib.unified_diff(golden, trace, "golden", "now", lineterm=""))
        pytest.fail(f"{name}/{scenario}: the event trace changed\n{diff}")
