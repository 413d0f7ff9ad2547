"""semantic_vad: the end-of-turn score and the wait it sets, on the conversation core.

The scorer's cues are checked directly; turn-taking runs on the scripted backend with the
energy "VAD" (tests/support/scripted_backend.py), a scripted transcript per ASR call and a scripted
end-of-message probability (both measured on dev phrases: ``python -m bench.fit.turn_cases``), so
each case is deterministic: a finished question ends its turn
long before server_vad's 500 ms, a pause after an open phrase is waited out until speech
resumes, and eagerness bounds the wait.
"""

from __future__ import annotations

import asyncio
import time
import threading

import pytest

from devtools.espeak import espeak_path
from core.conversation import ConversationConfig, TurnDetection
from core.conversation.end_of_turn import HeardText, MessageEnd, end_of_turn_probability, join_log_odds, wait_ms
from bench.fit.turn_checks import (  # the measured dev cases and the checks the fit keeps
    ALARM, ALARM_LM, CONFIDENT, DOUBTED, FAIRLY_HEARD, KETTLE, OPEN, complete_answered_sooner,
    doubted_answered_within_a_second, guessed_ending_waits_like_the_words_before_it, one_doubtful_word_reads_like_no_words,
    open_waits_past_a_long_pause, words_count_without_a_language_model,
)
from tests.support.helpers import Collector
from tests.support.scripted_backend import ScriptedBackend, quiet, tone

WORDS = ["one", "two", "three"]


class ScriptedTurnBackend(ScriptedBackend):
    """Transcripts in order, one per ASR call (the last repeats); the language model's
    end-of-message probability looked up by transcript."""

    def __init__(self, transcripts: list[str], lm: dict[str, float] | None = None, *, lm_fails: bool = False,
                 transcript_first: bool = True) -> None:
        super().__init__(WORDS, transcript_first=transcript_first)
        self.transcripts = list(transcripts)
        self.lm = lm or {}
        self.lm_fails = lm_fails
        self.scored: list[str] = []

    def transcribe_turn(self, audio) -> str:
        return self.transcripts.pop(0) if len(self.transcripts) > 1 else self.transcripts[0]

    def end_of_message_probability(self, text: str) -> MessageEnd | float | None:
        self.scored.append(text)
        if self.lm_fails:
            raise RuntimeError("scorer broke")
        return self.lm.get(text)


def semantic(eagerness: str = "auto", **kw) -> ConversationConfig:
    return ConversationConfig(input_sample_rate=16000,
                              turn_detection=TurnDetection(type="semantic_vad", eagerness=eagerness, **kw))


async def feed_until(conv, col: Collector, kind: str, seconds: float) -> float | None:
    """Stream silence in real time until an event of ``kind`` arrives; the seconds fed then."""
    step = 16000 * 20 // 1000 * 2
    t0 = time.monotonic()
    for i in range(int(seconds / 0.02)):
        await conv.append_audio(quiet(0.02))
        if col.of(kind):
            return (i + 1) * 0.02
        await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
    del step
    return None


async def feed(conv, pcm: bytes) -> None:
    step = 16000 * 20 // 1000 * 2
    for i in range(0, len(pcm), step):
        await conv.append_audio(pcm[i:i + step])


# ---------------------------------------------------------------------------- the score
#
@pytest.mark.parametrize("heard,lm", CONFIDENT + FAIRLY_HEARD)
def test_complete_turns_are_answered_sooner_than_server_vad(heard, lm):
    complete_answered_sooner(heard, lm)


@pytest.mark.parametrize("heard,lm", DOUBTED)
def test_a_complete_turn_the_language_model_doubts_is_answered_within_a_second(heard, lm):
    doubted_answered_within_a_second(heard, lm)


@pytest.mark.parametrize("heard,lm", OPEN)
def test_open_turns_wait_past_a_long_pause(heard, lm):
    open_waits_past_a_long_pause(heard, lm)


def test_without_a_language_model_the_words_still_count():
    words_count_without_a_language_model()
    assert end_of_turn_probability("  ...  ") is None
    assert wait_ms(None, "auto") == 500 and wait_ms(None, "high") == 250 and wait_ms(None, "low") == 1000


def test_an_ending_whisper_guessed_waits_like_the_words_before_it():
    guessed_ending_waits_like_the_words_before_it()


def test_the_last_word_cue_never_makes_a_turn_look_more_finished():
    # Dropping the last word never raises the score ("Put the kettle on" reads as finished).
    heard, lm = KETTLE
    assert end_of_turn_probability(heard, lm) == end_of_turn_probability(str(heard), lm.after_words)
    # Without the LM's score of the shorter words, the cue stays out.
    assert end_of_turn_probability(HeardText(ALARM, 0.64), ALARM_LM.after_words) == \
        end_of_turn_probability(ALARM, ALARM_LM.after_words)


def test_one_doubtful_word_reads_like_no_words():
    one_doubtful_word_reads_like_no_words()


def test_eagerness_maxima_are_openais():
    for eagerness, longest in (("low", 8000), ("medium", 4000), ("high", 2000), ("auto", 4000)):
        assert wait_ms(0.0, eagerness) == longest and wait_ms(1.0, eagerness) == 0
    td = TurnDetection(type="semantic_vad")
    assert td.wire() == {"type": "semantic_vad", "eagerness": "auto", "create_response": True,
                         "interrupt_response": True}
    assert "eagerness" not in TurnDetection().wire()


# ---------------------------------------------------------------------------- turn-taking


# The transcripts and scores the scripted backend gives are measured ones (``python -m bench.fit.turn_cases``).


async def test_a_complete_question_ends_the_turn_at_once_with_the_held_reply():
    heard, lm = CONFIDENT[2]  # "What year did the war end?"
    backend = ScriptedTurnBackend([heard], {heard: lm})
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    await feed(conv, tone(0.6))
    fed = await feed_until(conv, col, "speech_stopped", 2.0)
    assert fed is not None and fed < 0.4, fed  # server_vad would wait 0.5 s of silence
    done = await col.wait_for("response_done")
    assert done.status == "completed"
    assert conv.stats.speculative_replies_used == 1 and conv.stats.turn_scores == 1
    assert backend.scored == [heard]
    assert conv.stats.last_turn_score == pytest.approx(end_of_turn_probability(heard, lm)) and lm.after_words > 0.5
    await conv.close()
    backend.close()


async def test_a_pause_after_an_open_phrase_is_waited_out_and_the_whole_turn_answered():
    # a duplex dev item, "How many people live in" (a pause) "Brazil?", by one dev voice
    opening, whole = HeardText("How many people live in?", 0.98), HeardText("How many people live in Brazil?", 0.51)
    backend = ScriptedTurnBackend([opening, whole], {opening: MessageEnd(1.37e-5, 2.62e-5),
                                                     whole: MessageEnd(0.386, 1.37e-5)})
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    await feed(conv, tone(0.6))
    assert await feed_until(conv, col, "speech_stopped", 1.5) is None  # a 1.5 s pause: still the user's turn
    assert not col.of("response_started") and not col.of("input_committed")
    await feed(conv, tone(0.4))  # "... Brazil?"
    assert await feed_until(conv, col, "speech_stopped", 2.0) is not None
    done = await col.wait_for("response_done")
    assert done.status == "completed"
    assert len(col.of("response_started")) == 1 and len(col.of("input_committed")) == 1
    assert [e.transcript for e in col.of("input_transcript")] == [whole]
    await conv.close()
    backend.close()


async def test_a_guessed_last_word_does_not_end_the_turn_inside_the_pause():
    """The duplex dev item "Please set an alarm for" (a pause) "half past six." by the dev voice
    whose guessed "it" Whisper placed after the voice: the whole as that voice's Whisper heard it."""
    heard = HeardText(ALARM, 0.0)
    whole = HeardText("Please share some alarm for half past six.", 0.64)
    backend = ScriptedTurnBackend([heard, whole], {heard: ALARM_LM, whole: MessageEnd(0.475, 1.1e-3)})
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    await feed(conv, tone(0.6))
    assert await feed_until(conv, col, "speech_stopped", 0.8) is None  # a 0.8 s pause: not cut into
    assert not col.of("response_started")
    await feed(conv, tone(0.4))  # "... half past six."
    assert await feed_until(conv, col, "speech_stopped", 2.0) is not None
    await col.wait_for("response_done")
    assert [e.transcript for e in col.of("input_transcript")] == [whole]
    await conv.close()
    backend.close()


async def test_high_eagerness_bounds_the_wait_at_two_seconds():
    heard = HeardText("Is there a way to", 0.82)
    backend = ScriptedTurnBackend([heard], {heard: MessageEnd(3.08e-5, 8.95e-6)})
    conv = backend.open_conversation(semantic("high"))
    col = Collector(conv)
    await feed(conv, tone(0.5))
    fed = await feed_until(conv, col, "speech_stopped", 3.0)
    assert fed is not None and 1.5 < fed <= 2.3, fed
    await col.wait_for("response_done")
    await conv.close()
    backend.close()


async def test_a_failing_scorer_falls_back_to_the_words_alone():
    backend = ScriptedTurnBackend(["What time is it?"], lm_fails=True)
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    await feed(conv, tone(0.5))
    fed = await feed_until(conv, col, "speech_stopped", 2.0)
    assert fed is not None and fed < 0.6, fed
    await col.wait_for("response_done")
    await conv.close()
    backend.close()


async def test_an_audio_first_backend_takes_semantic_vad_with_the_neutral_wait():
    backend = ScriptedTurnBackend(["hello"], transcript_first=False)
    conv = backend.open_conversation(semantic("high"))
    col = Collector(conv)
    await feed(conv, tone(0.5))
    fed = await feed_until(conv, col, "speech_stopped", 2.0)
    assert fed is not None and 0.2 <= fed <= 0.5, fed  # no words to score: an eighth of high's 2 s
    await col.wait_for("response_done")
    await conv.close()
    backend.close()


async def test_switching_between_server_and_semantic_vad_mid_session():
    heard = HeardText("Send a message to my", 0.85)
    backend = ScriptedTurnBackend([heard], {heard: MessageEnd(3.15e-5, 7.35e-5)})
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    conv.update(ConversationConfig(input_sample_rate=16000, turn_detection=TurnDetection(silence_duration_ms=300)))
    await feed(conv, tone(0.5))
    fed = await feed_until(conv, col, "speech_stopped", 2.0)
    assert fed is not None and fed < 0.5, fed  # server_vad: the fixed 300 ms, whatever the words
    await col.wait_for("response_done")
    await conv.close()
    backend.close()


# ---------------------------------------------------------------------------- the embedded model


def test_the_embedded_llm_tells_finished_words_from_open_ones(cascade_backend):
    """SmolLM2's end-of-message probability, asked directly and as a by-product of a reply's
    prefill (what a held speculative reply reports), agree and separate the two kinds."""
    import threading

    from core.cascade.llm import KvState

    llm, scorer = cascade_backend.llm, cascade_backend.turn_scorer
    complete = ["What is the capital of France?", "How many continents are there", "Why do leaves change colour?"]
    open_ = ["What is the population of", "How much does it cost to...", "Well, I need to know whether"]
    direct = {t: scorer.probability(t) for t in complete + open_}
    assert min(direct[t] for t in complete) > 100 * max(direct[t] for t in open_), direct
    for text in (complete[0], open_[0]):
        got: list[MessageEnd | None] = []
        messages = [{"role": "system", "content": cascade_backend.options.instructions},
                    {"role": "user", "content": text}]
        llm.generate(messages, KvState(), lambda _t: None, threading.Event(), max_tokens=1,
                     end_of_message=got.append)
        want = scorer.message_end(text)
        assert want.after_words == pytest.approx(direct[text], rel=1e-3, abs=1e-7)
        assert got and got[0].after_words == pytest.approx(direct[text], rel=0.05, abs=1e-6), (text, got, want)
        # ... and without the last word, from the same pass.
        assert got[0].before_last_word == pytest.approx(want.before_last_word, rel=0.05, abs=1e-6), (got, want)
    # "What is the capital of" is far from finished, though "... of France" is.
    assert scorer.message_end(complete[0]).before_last_word < direct[complete[0]] / 100


def test_whisper_reports_its_confidence_in_the_last_word(cascade_backend):
    """A clearly spoken question's last word is heard with confidence; the transcript carries it.
    The same speech every run (Piper's sampling noise off): with it on, one full run in several
    spoke it so that Whisper's confidence in "France" fell to 0.53."""
    import numpy as np

    from core.audio import resample

    pcm = b"".join(cascade_backend.tts.synthesize("What is the capital of France?", deterministic=True))
    audio = resample(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768, 24000, 16000)
    heard = cascade_backend.transcribe_turn(np.concatenate([audio, np.zeros(4800, np.float32)]))
    assert isinstance(heard, HeardText) and "France" in heard, heard
    assert 0.7 < heard.last_word_confidence <= 1.0, heard.last_word_confidence


def test_the_voice_end_is_where_the_last_loud_frame_ends():
    import numpy as np

    from core.cascade.asr import _voice_end_s

    t = np.arange(16000) / 16000
    voice = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    noise = np.random.default_rng(0).normal(0, 0.001, 8000).astype(np.float32)  # -50 dB: not voice
    assert _voice_end_s(np.concatenate([noise, voice, noise])) == pytest.approx(1.5, abs=0.011)
    assert _voice_end_s(np.zeros(8000, np.float32)) is None
    assert _voice_end_s(np.zeros(0, np.float32)) is None


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng not installed")
def test_an_ending_whisper_invents_after_the_voice_gets_no_confidence(cascade_backend):
    """At a pause after "I need to buy a present for" (a dev phrase), Whisper hears "... for it."
    (an espeak voice of the turn sets): "it" begins where the voice had already stopped, so the
    transcript says its last word was not heard and the turn is scored on "I need to buy a present
    for" (open, a long wait). A short last word that was said ("What time is it?") keeps its
    confidence."""
    import numpy as np

    from core.audio import resample
    from devtools.espeak import espeak

    def heard(text: str) -> HeardText:
        audio = resample(espeak(text, "en-us+m7", 150, 35).astype(np.float32) / 32768, 24000, 16000)
        pad = np.zeros(4800, np.float32)
        return cascade_backend.transcribe_turn(np.concatenate([pad, audio, pad]))

    guessed = heard("I need to buy a present for")
    assert guessed.lower().startswith("i need to buy a present for "), guessed  # a word after "for"
    assert guessed.last_word_confidence == 0.0, (guessed, guessed.last_word_confidence)
    lm = cascade_backend.turn_scorer.message_end(guessed)  # SmolLM2 on what was heard, as a turn scores it
    p = end_of_turn_probability(guessed, lm)
    assert wait_ms(p, "auto") > 1500, (guessed, lm, p)
    said = heard("What time is it?")
    assert "time is it" in said.lower() and said.last_word_confidence > 0.5, (said, said.last_word_confidence)


class ReadingTurnBackend(ScriptedTurnBackend):
    """A test double of a backend that also reads the words' completeness by meaning."""

    def __init__(self, transcripts: list[str], reading: float) -> None:
        super().__init__(transcripts)
        self.reading = reading
        self.read: list[str] = []

    @property
    def reads_completion(self) -> bool:
        return True

    def completion_probability(self, words: str) -> float | None:
        self.read.append(words)
        return self.reading


@pytest.mark.parametrize("reading, ends_within", [(0.99, 0.4), (0.01, None)])
async def test_the_words_meaning_joins_the_score(reading, ends_within):
    """Issue 47: the backend's reading of completeness is joined with the score (mean log-odds):
    the same words, read as complete, end the turn at once; read as open, wait out a 1.5 s pause."""
    heard = "Tell me about dogs."  # no LM: the words alone give p 0.62, a ~0.9 s wait
    backend = ReadingTurnBackend([heard], reading)
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    await feed(conv, tone(0.6))
    fed = await feed_until(conv, col, "speech_stopped", 1.5)
    if ends_within is None:
        assert fed is None, fed
    else:
        assert fed is not None and fed < ends_within, fed
    assert backend.read == ["Tell me about dogs"]  # the words, without Whisper's guessed punctuation
    assert conv.stats.last_turn_score == pytest.approx(join_log_odds(end_of_turn_probability(heard), reading))
    await conv.close()
    backend.close()


class GatedTurnBackend(ReadingTurnBackend):
    """A test double of a reading backend whose transcription waits for a gate: the pause's words
    are still being made (or queued behind) when the speech resumes."""

    def __init__(self, transcripts: list[str]) -> None:
        super().__init__(transcripts, 0.9)
        self.gate = threading.Event()

    def transcribe_turn(self, audio) -> str:
        self.gate.wait(5)
        return super().transcribe_turn(audio)


async def test_a_pause_whose_words_were_still_queued_when_speech_resumed_is_dropped_quietly():
    """Two pauses inside one turn while the recogniser is busy: the second pause's transcription,
    still queued when the speech resumes, is cancelled; its callback must not raise on the loop
    (it did: ``Future.exception()`` of a cancelled future), and the turn still ends and is answered."""
    backend = GatedTurnBackend(["Tell me about dogs."])
    conv = backend.open_conversation(semantic())
    col = Collector(conv)
    loop_errors: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
    for _ in range(2):  # speech, a pause the VAD reports, speech again
        await feed(conv, tone(0.4))
        await feed(conv, quiet(0.1))
    await feed(conv, tone(0.4))
    await asyncio.sleep(0.1)  # the cancelled transcription's callback runs on the loop
    backend.gate.set()
    assert await feed_until(conv, col, "speech_stopped", 3.0) is not None
    assert (await col.wait_for("response_done")).status == "completed"
    assert loop_errors == [], [str(c.get("exception")) for c in loop_errors]
    await conv.close()
    backend.close()
