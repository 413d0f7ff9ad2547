"""Each part of the conversation alone: ``Replies``, ``ToolCalls``, ``Hearing`` and ``VadTurns``,
wired by hand over a ``Runtime`` on the scripted backend (tests/support/scripted_backend.py), with a
recording double where a part's neighbour would be. A part is driven only through its public
methods, and what it does is read off the events it emits and the history it leaves.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.conversation import ConversationConfig, Item, Response, TurnDetection
from core.conversation.hearing import Hearing
from core.conversation.mcp_tools import McpTools
from core.conversation.replies import CUT_MARK, Replies
from core.conversation.runtime import Runtime
from core.conversation.tools import ToolCalls
from core.conversation.turn_policy import PassesReportsOn
from core.conversation.vad_turns import VadTurns
from core.errors import InvalidInputError
from core.ids import new_id
from tests.support.scripted_backend import SEGMENT_S, ScriptedBackend, quiet, tone

WORDS = ["one", "two", "three", "four", "five"]
VAD = ConversationConfig(input_sample_rate=16000, turn_detection=TurnDetection(type="server_vad"))


@pytest.fixture
def backend():
    b = ScriptedBackend(WORDS)
    yield b
    b.close()


class Parts(PassesReportsOn):
    """A runtime and its parts, wired as ``Conversation`` does, with every event seen kept."""

    def __init__(self, backend, config: ConversationConfig = VAD, policy=None) -> None:
        self.rt = Runtime(backend, config)
        self.seen: list = []
        self.rt.observers.append(self.seen.append)
        self.hearing = Hearing(self.rt, reports=self)
        self.replies = Replies(self.rt, McpTools(self.rt), lambda cfg: cfg, turn_scored=self.hearing.turn_scored)
        self.tools = self.replies.tools
        self.turns = VadTurns(self.rt, self.hearing, self.replies)
        self.policy = policy or self.turns

    @property
    def report_to(self):
        """What the hearing reports goes to the policy, as ``Conversation`` passes it on."""
        return self.policy

    def kinds(self) -> list[str]:
        out: list[str] = []
        for e in self.seen:
            kind = "deltas" if e.type in ("text_delta", "audio_chunk") else e.type
            if not out or out[-1] != kind or kind != "deltas":
                out.append(kind)
        return out


class RecordingPolicy:
    """A turn policy double: keeps what hearing reports, decides nothing."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, int]] = []
        self.heard_samples = 0

    async def heard(self, audio16) -> None:
        self.heard_samples += audio16.size

    async def speech_began(self, item_id, ms, sure, echoing) -> None:
        self.reports.append(("began", ms))

    async def speech_paused(self, ms, segment) -> bool:
        self.reports.append(("paused", ms))
        return False

    async def speech_resumed(self) -> None:
        self.reports.append(("resumed", None))

    async def speech_ended(self, item_id, ms, segment, speculation) -> bool:
        self.reports.append(("ended", ms))
        return False

    async def after_audio(self) -> None:
        pass

    def words_at_pause(self, generation, transcript, current) -> bool:
        return False


# --------------------------------------------------------------------------- Replies


async def test_replies_alone_make_a_response_and_its_item(backend):
    p = Parts(backend)
    p.replies.create()
    assert p.replies.active
    await p.rt.wait_idle()
    assert p.kinds() == ["response_started", "deltas", "response_done"]
    done = p.seen[-1]
    assert done.status == "completed" and not p.replies.active
    assert p.rt.items.get(done.item_id).text == "one two three four five"


async def test_replies_hold_a_speculative_reply_until_it_is_released(backend):
    p = Parts(backend)
    resp = Response(new_id("resp"), new_id("item"), True, held=True)
    p.replies.run(resp, p.rt.config, None, pending=Item("user", "hello"))
    await p.rt.wait_idle()
    assert p.seen == [] and p.replies.held is resp  # made, nothing sent
    p.replies.release_held(resp)
    assert p.kinds() == ["response_started", "deltas", "response_done"]
    assert p.seen[-1].text.split() == WORDS


async def test_replies_cut_to_what_was_heard_and_marked(backend):
    p = Parts(backend)
    p.replies.create()
    await p.rt.wait_idle()
    item_id = p.seen[-1].item_id
    p.replies.cut_finished(item_id, int(24000 * SEGMENT_S * 2))  # two words' audio heard
    item = p.rt.items.get(item_id)
    assert item.text == "one two" + CUT_MARK and item.status == "incomplete"
    assert p.seen[-1].type == "item_truncated" and p.seen[-1].audio_end_ms == int(SEGMENT_S * 2 * 1000)


# --------------------------------------------------------------------------- ToolCalls


async def test_tool_calls_route_a_plain_function_to_the_client(backend):
    p = Parts(backend)
    call = p.tools.new_call("get_weather")
    assert call.kind == "function_call" and call.server_label is None and call.name == "get_weather"


# --------------------------------------------------------------------------- Hearing


async def test_hearing_alone_reports_a_voice_to_its_policy(backend):
    policy = RecordingPolicy()
    p = Parts(backend, policy=policy)
    pcm = quiet(0.3) + tone(0.6) + quiet(1.0)
    step = 16000 * 20 // 1000 * 2
    for i in range(0, len(pcm), step):
        await p.hearing.append(pcm[i:i + step])
    kinds = [k for k, _ in policy.reports]
    assert kinds[0] == "began" and kinds[-1] == "ended", kinds
    assert policy.heard_samples == len(pcm) // 2  # every sample reached the policy, at 16 kHz
    assert p.hearing.now_ms() == len(pcm) // 2 * 1000 // 16000
    assert p.seen == []  # hearing reports; what a voice means is the policy's


# --------------------------------------------------------------------------- VadTurns


async def test_vad_turns_judge_a_voice_over_the_reply_before_stopping_it(backend):
    judged = VAD.model_copy(update={"turn_detection": VAD.turn_detection.model_copy(update={"yield_at_onset": False})})
    p = Parts(backend, judged)
    p.rt.playback.sent("item_playing", 24000 * 5)  # five seconds of the assistant still to be heard
    await p.turns.speech_began("item_voice", 100, True, False)
    assert p.seen == [] and p.turns.busy  # no speech_started yet: the voice is being judged
    await p.turns.speech_ended("item_voice", 400, np.zeros(4800, dtype=np.float32), None)
    assert [e.type for e in p.seen] == ["backchannel"] and p.seen[0].transcript == ""  # noise: dropped
    assert not p.turns.busy and p.rt.items.snapshot() == []  # nothing committed


async def test_vad_turns_by_default_yield_at_a_voice_over_the_reply_and_drop_noise(backend):
    p = Parts(backend)
    p.rt.playback.sent("item_playing", 24000 * 5)
    await p.turns.speech_began("item_voice", 100, True, False)
    assert [e.type for e in p.seen] == ["speech_started"] and p.turns.busy  # stopped at once, then judged
    await p.turns.speech_ended("item_voice", 400, np.zeros(4800, dtype=np.float32), None)
    assert [e.type for e in p.seen] == ["speech_started", "speech_stopped", "backchannel"]
    assert not p.turns.busy and p.rt.items.snapshot() == []  # nothing committed


async def test_vad_turns_take_a_voice_in_silence_as_a_turn(backend):
    p = Parts(backend)
    await p.turns.speech_began("item_voice", 100, True, False)
    await p.turns.speech_ended("item_voice", 900, np.full(12800, 0.5, dtype=np.float32), None)
    await p.rt.wait_idle()
    assert p.kinds()[:4] == ["speech_started", "speech_stopped", "input_committed", "input_transcript"]
    assert p.kinds()[-1] == "response_done"
    assert [i.role for i in p.rt.items.snapshot()] == ["user", "assistant"]


# --------------------------------------------------------------------------- a backend's own policy


class OwnPolicyBackend(ScriptedBackend):
    """A backend that decides turns itself: its policy hears the audio and refuses client replies."""

    def turn_policy(self, parts):
        self.policy = RefusingPolicy(parts.vad_turns)
        return self.policy


class RefusingPolicy(PassesReportsOn):
    def __init__(self, standard: VadTurns) -> None:
        self.standard = standard
        self.heard_samples = 0
        self.configured_with: list = []

    async def heard(self, audio16) -> None:
        self.heard_samples += audio16.size

    @property
    def report_to(self):
        return self.standard

    async def committed(self, item_id, segment) -> None:
        await self.standard.committed(item_id, segment)

    async def respond(self) -> None:
        await self.standard.respond()

    def reply_requested(self) -> None:
        raise InvalidInputError("this model decides when to speak", param="turn_detection.type")

    def cancelled(self) -> None:
        pass

    def configured(self, old) -> None:
        self.configured_with.append(old)

    def frame_added(self, frame) -> None:
        pass

    @property
    def busy(self) -> bool:
        return self.standard.busy

    async def close(self) -> None:
        await self.standard.close()


async def test_a_backend_supplies_its_own_turn_policy():
    backend = OwnPolicyBackend(WORDS)
    try:
        conv = backend.open_conversation(VAD)
        assert conv.turns is backend.policy and backend.policy.configured_with == [None]
        await conv.append_audio(quiet(0.5))
        assert backend.policy.heard_samples == 8000
        with pytest.raises(InvalidInputError, match="decides when to speak"):
            await conv.create_response()
        await conv.close()
    finally:
        backend.close()
