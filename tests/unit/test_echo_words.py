"""Its own words are never a turn (issue 70): words heard over the reply that repeat what the
listener heard the assistant say lately are its echo, judged as noise; a stop word counts only
when the assistant did not just say it. First the matcher (no models), then whole conversations on
the scripted backend, whose glance hears the reply's own last words back as an echo would.
"""

from __future__ import annotations

import asyncio

from core.conversation import ConversationConfig, TurnDetection
from core.conversation.echo_words import ECHO_DELAY_MS, EchoWords, heard_lately, in_order, repeats
from core.conversation.overlap import Overlap, echoes, says_stop, verdict_of
from core.conversation.playback import PlaybackClock
from core.conversation.reply import Segment
from tests.support.helpers import Collector
from tests.support.scripted_backend import SEGMENT_S, ScriptedBackend, quiet, tone
from tests.unit.test_barge_in import feed, kinds

WORD = int(24000 * SEGMENT_S)  # samples of one scripted word


def pieces(text: str, per_word: int = WORD) -> list[Segment]:
    """A reply in pieces of a sentence each, every word ``per_word`` samples long."""
    out = []
    for sentence in text.split(". "):
        n = len(sentence.split())
        out.append(Segment(sentence, total_samples=n * per_word, emitted_samples=n * per_word))
    return out


# ------------------------------------------------------------------ the matcher

def test_words_heard_lately_are_those_of_the_window_before_the_play_head():
    reply = pieces("the lighthouse keeper counted gulls. every morning he climbed the stairs")
    assert heard_lately(reply, "", 7 * WORD, 3 * WORD) == "gulls every morning"
    assert heard_lately(reply, "", 2 * WORD, 10 * WORD) == "the lighthouse"  # nothing before the start
    assert heard_lately(reply, "", 0, 3 * WORD) == ""


def test_in_order_counts_a_common_subsequence():
    assert in_order(["red", "kite", "flew"], ["a", "red", "big", "kite", "flew"]) == 3
    assert in_order(["flew", "kite"], ["kite", "flew"]) == 1
    assert in_order([], ["kite"]) == 0


def test_a_repeat_of_recent_words_is_echo():
    said = "the old ferry would not stop at the pier"
    assert echoes("Would not stop at the", said)
    assert echoes("ferry would not stop", said)
    assert echoes("The old fairy would not stop.", said), "most of them, in order: one misheard word"


def test_words_not_in_recent_text_are_not_echo():
    said = "the old ferry would not stop at the pier"
    assert not echoes("What about the ferry tickets for Monday?", said), "one word of a longer question"
    assert not echoes("stop pier", "pier then stop"), "out of order"
    assert not echoes("Ferry?", said), "one word in common proves nothing"
    assert not echoes("Ferry, ferry.", said), "one word of the reply said twice"
    assert not echoes("I want to do that", "you want to see that"), "common words prove nothing"
    assert not repeats(["and", "then", "it", "was"], ["and", "then", "it", "was"])
    assert not echoes("the old ferry", ""), "nothing heard lately"


def test_an_old_word_is_outside_the_window():
    reply = pieces("stop me if you know this one. a heron walked into a bakery and asked for bread")
    heard = 17 * WORD  # "... asked for"
    said = heard_lately(reply, "", heard, 1700 * 24)
    assert "stop" not in said.split()
    assert says_stop("Stop.", said) and not echoes("Stop me.", said)


def test_a_stop_not_in_recent_text_is_a_stop_and_its_own_stop_echoed_is_not():
    said = "and the tram would not stop for anyone"
    assert not says_stop("would not stop", said), "its own words heard back"
    assert not says_stop("Not stop.", said)
    assert says_stop("No, wait.", said) and says_stop("No.", said), "'no' and 'wait' are not what it said"
    assert says_stop("Hold on.", "we went on and on"), "a stop phrase counts unless it said the phrase"
    assert not says_stop("hold on", "please hold on a moment")
    assert says_stop("stop", ""), "with nothing heard lately every stop word counts"


def test_the_judge_takes_an_echo_for_noise_and_a_stop_for_an_interruption():
    said = "and the tram would not stop for anyone"
    assert verdict_of("The tram would not stop.", None, said) == "noise"
    assert verdict_of("The tram would not stop.", None) == "interruption", "as before, with nothing heard"
    assert verdict_of("Stop.", None, "the tram rolled on for anyone") == "interruption"
    ov = Overlap("item", 0, None, 0.0)
    for ms in (500, 600, 700):  # every glance hears the echo: none takes the floor
        assert ov.glanced("tram would not stop for", ms, 0.9, said) is None
    assert ov.ended("The tram would not stop for anyone.", 800, 0.9, said) == "noise"
    assert "heard back" in ov.reasons[0]
    assert Overlap("item", 0, None, 0.0).glanced("No, wait.", 500, None, said) == "interruption"


def test_a_listener_repeating_one_word_is_judged_as_before():
    said = "the capital of peru is lima"
    assert verdict_of("Lima?", 0.9, said) == "interruption"
    assert verdict_of("Lima.", 0.1, said) == "backchannel"


class _Replies:
    """What ``EchoWords`` reads of ``Replies``."""

    def __init__(self, resp=None, past=None) -> None:
        self.current, self.last_spoken, self._past = resp, None, past or {}

    def segments(self, item_id):
        return self._past.get(item_id)


def test_echo_words_reads_the_reply_being_heard_at_the_play_head():
    now = [100.0]
    clock = PlaybackClock(now=lambda: now[0])
    reply = pieces("the lighthouse keeper counted gulls. every morning he climbed the stairs")
    clock.sent("item_a", 11 * WORD)
    now[0] += 7 * SEGMENT_S  # seven words played
    echo = EchoWords(clock, _Replies(past={"item_a": reply}))
    clip_ms = 1200 - ECHO_DELAY_MS  # a window of 1.2 s: six words
    assert echo.said_within(clip_ms) == "lighthouse keeper counted gulls every morning"
    clock.stop("item_a", 3 * WORD)  # cut after three words: nothing later was heard
    assert echo.said_within(clip_ms) == "the lighthouse keeper"
    assert EchoWords(clock, _Replies()).said_within(clip_ms) == "", "nothing known of the item"


# ------------------------------------------------------------------ whole conversations

STORY = ["no", "the", "bus", "would", "not", "stop"] * 4  # every few words a stop word: 4.8 s
LONG_AGO = ["stop", "me", "if", "you", "heard", "it"] + ["a", "heron", "walked", "into", "a", "bakery"] * 3


def echo_of(conv, words: list[str]):
    """A glance that hears four of the reply's words back, as its echo would: the last the listener
    heard but one (an echo comes back a moment late)."""

    def hear(clip) -> str:
        i = (conv.playback.heard_samples() or 0) // WORD - 1
        return " ".join(words[max(0, i - 4):max(0, i)]).capitalize() + "."

    return hear


async def telling(words: list[str], glance, **turn):
    """A story being heard, 1.2 s of it so far; ``glance``: what a glance at a voice hears."""
    backend = ScriptedBackend(words, step_s=0.15, glance=glance, transcript="hello", meaning=None)
    conv = backend.open_conversation(ConversationConfig(input_sample_rate=16000,
                                                        turn_detection=TurnDetection(**turn)))
    col = Collector(conv)
    await conv.add_text("Tell me a story")
    await conv.create_response()
    await col.wait_for("audio_chunk", count=2)
    await asyncio.sleep(1.2)
    return backend, conv, col


async def test_its_own_words_heard_back_over_the_reply_resume_it_and_are_no_turn():
    hear = {}
    backend, conv, col = await telling(STORY, lambda clip: hear["echo"](clip), yield_at_onset=True)
    hear["echo"] = echo_of(conv, STORY)
    await feed(conv, tone(0.6) + quiet(0.8))
    cut = await col.wait_for("response_done")
    assert cut.status == "cancelled", "the reply stops at the voice's onset while it is judged"
    resumed = await col.wait_for("response_resumed")
    assert resumed.resumed_item_id == cut.item_id
    assert (await col.wait_for("backchannel")).transcript == "", "judged as noise: no words of the user's"
    done = await col.wait_for("response_done", count=2)
    assert done.status == "completed" and done.item_id == resumed.item_id
    heard = conv.item(cut.item_id).text.rstrip("…").split()
    assert heard + done.text.split() == STORY, "resumed where it stopped"
    seen = kinds(col)
    assert "input_committed" not in seen, "its own words are no turn"
    assert seen.count("response_started") == 2 and len(backend.jobs) == 1, "and get no answer"
    await conv.close()
    backend.close()


async def test_its_own_words_heard_back_while_it_plays_on_do_not_cut_it():
    hear = {}
    backend, conv, col = await telling(STORY, lambda clip: hear["echo"](clip), yield_at_onset=False)
    hear["echo"] = echo_of(conv, STORY)
    await feed(conv, tone(0.7) + quiet(0.8))
    assert (await col.wait_for("backchannel")).transcript == ""
    done = await col.wait_for("response_done")
    assert done.status == "completed" and done.text.split() == STORY
    assert "speech_started" not in kinds(col) and "input_committed" not in kinds(col)
    await conv.close()
    backend.close()


async def test_a_listeners_stop_cuts_the_reply_though_it_said_stop_long_ago():
    backend, conv, col = await telling(LONG_AGO, "Stop.", yield_at_onset=False)
    await asyncio.sleep(1.4)  # "stop" was heard 2.4 s before the voice
    await feed(conv, tone(0.6) + quiet(0.8))
    done = await col.wait_for("response_done")
    assert done.status == "cancelled" and done.reason == "turn_detected"
    await col.wait_for("response_started", count=2)  # and it is answered
    assert not col.of("backchannel") and not col.of("response_resumed")
    await conv.close()
    backend.close()


async def test_no_wait_cuts_the_reply_though_it_just_said_no():
    backend, conv, col = await telling(STORY, "No, wait.", yield_at_onset=True)
    await feed(conv, tone(0.6) + quiet(0.8))
    await col.wait_for("response_started", count=2)  # answered, not resumed
    assert col.of("response_done")[0].status == "cancelled"
    assert not col.of("backchannel") and not col.of("response_resumed")
    assert "input_committed" in kinds(col)
    await conv.close()
    backend.close()


class LearningCanceller:
    """Test double for ``RoomFilter`` in a session's first seconds of echo: the audio passes as it
    came, and the canceller says it is still learning the echo path (``RoomFilter.learning``)."""

    played = None
    suppressing = False
    learning = True
    cancelling = True

    def clean(self, audio, arrived_at):
        return audio, None, False  # heard, nothing else for the glances, no echo cancelled


async def test_a_voice_while_the_canceller_learns_stops_nothing_until_its_words_do():
    """What a learning canceller leaves of the echo can start the VAD: the reply does not yield at
    that onset (``yield_at_onset`` on), and the glance that hears the reply's own words drops it."""
    hear = {}
    backend, conv, col = await telling(STORY, lambda clip: hear["echo"](clip), yield_at_onset=True)
    hear["echo"] = echo_of(conv, STORY)
    conv.hearing._input.room = LearningCanceller()
    await feed(conv, tone(0.7) + quiet(0.8))
    assert (await col.wait_for("backchannel")).transcript == ""
    done = await col.wait_for("response_done")
    assert done.status == "completed" and done.text.split() == STORY, "it played on, never stopped"
    assert "speech_started" not in kinds(col) and "input_committed" not in kinds(col)
    await conv.close()
    backend.close()


async def test_words_over_a_learning_canceller_take_the_floor_only_with_a_stop_word():
    """The residue a learning canceller leaves, read by Whisper as words that are not the reply's
    ("T clip."), must not take the floor and lose the story: only a stop word or its length can."""
    backend, conv, col = await telling(STORY, "T clip.", yield_at_onset=True)
    conv.hearing._input.room = LearningCanceller()
    await feed(conv, tone(0.7) + quiet(0.8))
    await col.wait_for("backchannel")
    done = await col.wait_for("response_done")
    assert done.status == "completed" and done.text.split() == STORY
    assert "speech_started" not in kinds(col) and "input_committed" not in kinds(col)
    await conv.close()
    backend.close()


async def test_a_stop_while_the_canceller_learns_still_cuts_the_reply():
    backend, conv, col = await telling(LONG_AGO, "Stop.", yield_at_onset=True)
    conv.hearing._input.room = LearningCanceller()
    await asyncio.sleep(1.4)
    await feed(conv, tone(0.6) + quiet(0.8))
    done = await col.wait_for("response_done")
    assert done.status == "cancelled" and done.reason == "turn_detected"
    await col.wait_for("response_started", count=2)  # and it is answered
    assert not col.of("response_resumed")
    await conv.close()
    backend.close()


class EchoingRoom(LearningCanceller):
    """Test double for ``RoomFilter`` once it has found that the microphone hears the loudspeaker:
    the audio passes as it came (what a canceller leaves of a loud echo), learning done."""

    learning = False


async def test_its_own_echo_just_after_the_users_turn_is_judged_not_taken_for_the_turn_going_on():
    """A voice soon after the user's turn ended is that turn going on ("... Brazil?"), but over a
    microphone that hears the loudspeaker it is as likely the answer's own echo: it is judged, and
    the glance that hears the answer's words drops it (issue 70's SDK drive: the answer to a spoken
    question, and to "Stop.", took its own echo for the user and interrupted itself)."""
    hear = {}
    backend = ScriptedBackend(STORY, step_s=0.15, glance=lambda clip: hear["echo"](clip), transcript="hello",
                              meaning=None)
    conv = backend.open_conversation(ConversationConfig(input_sample_rate=16000,
                                                        turn_detection=TurnDetection(yield_at_onset=True)))
    col = Collector(conv)
    hear["echo"] = echo_of(conv, STORY)
    conv.hearing._input.room = EchoingRoom()
    await feed(conv, tone(0.8) + quiet(0.7))  # the user's question, spoken
    await col.wait_for("audio_chunk", count=2)
    await asyncio.sleep(1.2)  # the answer plays; no audio came meanwhile (the stream is 1.5 s long)
    await feed(conv, tone(0.7) + quiet(0.8))  # its echo, well within 2 s of the question's end
    assert (await col.wait_for("backchannel")).transcript == "", "judged as noise: its own words"
    await col.wait_for("response_resumed")
    assert (await col.wait_for("response_done", count=2)).status == "completed", "the answer played on"
    assert kinds(col).count("input_committed") == 1 and len(backend.jobs) == 1, "the echo got no answer"
    await conv.close()
    backend.close()


async def test_its_own_echo_while_the_reply_is_late_is_judged_not_taken_for_a_turn():
    """The reply is made a little slower than it plays, so the listener's queue runs dry between
    its words; the echo of the last one is still in the room. Over a microphone that hears the
    loudspeaker, a voice there is judged as one over the reply (``ECHO_TAIL_MS``): taken as a
    new turn unjudged, the story stopped 1.6 s in for "It's time." heard back (the room bench)."""
    hear = {}
    backend = ScriptedBackend(STORY, step_s=0.6, glance=lambda clip: hear["echo"](clip), transcript="hello",
                              meaning=None)  # 0.2 s of audio a word, made every 0.6 s
    conv = backend.open_conversation(ConversationConfig(input_sample_rate=16000,
                                                        turn_detection=TurnDetection(yield_at_onset=True)))
    col = Collector(conv)
    hear["echo"] = echo_of(conv, STORY)
    conv.hearing._input.room = EchoingRoom()
    await conv.add_text("Tell me a story")
    await conv.create_response()
    await col.wait_for("audio_chunk", count=10)  # five words in
    await asyncio.sleep(0.25)  # the word has played; the next is not made yet
    assert not conv.rt.playback.audible
    await feed(conv, tone(0.6) + quiet(0.8))
    assert (await col.wait_for("backchannel")).transcript == "", "judged as noise: its own words"
    assert "input_committed" not in kinds(col), "the echo got no turn"
    assert len(backend.jobs) == 1
    await conv.close()
    backend.close()
