"""The room taken out of the microphone (``core/conversation/room.py``): the assistant's own voice
cancelled against what the listener played, whatever the echo path's delay; a voice over it kept;
a clean microphone untouched; steady noise suppressed; and the session fields that turn them on."""

from __future__ import annotations

import numpy as np
import pytest

from core.conversation import ConversationConfig
from core.conversation.played_audio import PlayedAudio
from core.conversation.room import QUICK_ECHO, RoomFilter, waveform_match
from core.protocol import Dialect, ProtocolError
from worker.session_config import apply_session_update, session_object

RATE = 16000
T0 = 1000.0  # the monotonic time the reply starts playing
STORY = ("The lighthouse keeper climbed the long stairs every evening to light the lamp, and every morning "
         "he wrote about the ships he had seen. In winter the sea was grey and loud, and the gulls slept on "
         "the rocks below his window.")


@pytest.fixture(scope="module")
def voice():
    """The pipeline's Piper voice: the reply (24 kHz and 16 kHz) and a listener's "Stop." (16 kHz)."""
    from core.audio import resample
    from core.cascade.tts import PiperTts

    tts = PiperTts()

    def say(text: str, rate: int) -> np.ndarray:
        pcm = b"".join(tts.synthesize(text, deterministic=True))
        audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
        return audio if rate == 24000 else resample(audio, 24000, rate)

    reply24 = say(STORY, 24000)[: 24000 * 12]
    return reply24, say(STORY, RATE)[: RATE * 12], say("Stop.", RATE)


def level(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.asarray(x, np.float64) ** 2) + 1e-12))


def room_tail(ms: int = 200, seed: int = 0) -> np.ndarray:
    """An impulse response: the direct path, then exponentially decaying reflections (RT60 ``ms``)."""
    rng = np.random.default_rng(seed)
    t = np.arange(RATE * ms // 1000) / RATE
    h = rng.standard_normal(t.size) * np.exp(-t / (ms / 1000 / 6.9))
    h[0] = 1.0
    return (h / np.sqrt((h ** 2).sum())).astype(np.float32)


def microphone(reply16: np.ndarray, echo_db: float | None, delay_ms: int, voice_at_s: float | None,
               stop: np.ndarray, seconds: float = 12.0) -> np.ndarray:
    rng = np.random.default_rng(1)
    mic = (rng.standard_normal(int(RATE * seconds)) * 10 ** (-60 / 20)).astype(np.float32)  # the room's floor
    if echo_db is not None:
        echo = np.convolve(reply16, room_tail())[: reply16.size] * 10 ** (echo_db / 20)
        d = RATE * delay_ms // 1000
        n = min(mic.size - d, echo.size)
        mic[d:d + n] += echo[:n]
    if voice_at_s is not None:
        at = int(voice_at_s * RATE)
        mic[at:at + stop.size] += stop * 0.5
    return mic


def played_reply(reply24: np.ndarray) -> PlayedAudio:
    """The reply as a client plays it: sent in 200 ms pieces faster than real time, queued."""
    played = PlayedAudio()
    step = 24000 // 5
    for k, i in enumerate(range(0, reply24.size, step)):
        played.add((reply24[i:i + step] * 32767).astype("<i2").tobytes(), T0 + k * 0.2)
    return played


def filtered(room: RoomFilter, mic: np.ndarray, chunk: int = 320, arrival=lambda due: due) -> np.ndarray:
    """``mic`` through ``room`` in 20 ms chunks, each arriving when ``arrival`` says (default: as
    its last sample was captured; None: never sent)."""
    out = []
    for i in range(0, mic.size, chunk):
        at = arrival(T0 + (i + chunk) / RATE)
        if at is not None:
            out.append(room.process(mic[i:i + chunk], at))
    return np.concatenate(out)


def test_played_audio_lays_each_piece_where_it_plays():
    played = PlayedAudio()
    piece = np.full(2400, 1000, "<i2").tobytes()  # 100 ms
    played.add(piece, 10.0)
    played.add(piece, 10.3)  # the queue ran dry for 200 ms
    got = played.read(10.0, 24000 // 2)
    assert (got[:2400] == 1000).all() and (got[2400:7200] == 0).all() and (got[7200:9600] == 1000).all()
    played.stop(10.35)  # the client cleared what was still queued
    assert (played.read(10.3, 2400)[:1200] == 1000).all() and (played.read(10.35, 1200) == 0).all()


@pytest.mark.parametrize("delay_ms", [40, 150, 300])
def test_its_own_echo_is_cancelled_whatever_the_delay(voice, delay_ms):
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, delay_ms, None, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    out = filtered(room, mic)
    after_first_second = slice(RATE, RATE * 10)
    assert level(mic[after_first_second]) > -40  # there was an echo to hear
    assert level(out[after_first_second]) < level(mic[after_first_second]) - 25
    assert room.presence.echo is True
    assert abs(room.presence.delay_ms - delay_ms) <= 60  # found, not assumed


def test_a_voice_over_the_echo_keeps_its_level(voice):
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 80, 6.0, stop)
    out = filtered(RoomFilter(played_reply(reply24), noise_suppression=False), mic)
    spoken = slice(6 * RATE, 6 * RATE + stop.size)
    assert level(out[spoken]) > level(mic[spoken]) - 6
    before = slice(5 * RATE, 6 * RATE)  # the echo alone, just before
    assert level(out[spoken]) > level(out[before]) + 20


def cleaned(room: RoomFilter, mic: np.ndarray, chunk: int = 320) -> tuple[np.ndarray, np.ndarray]:
    """``mic`` through ``room.clean`` in real time: what the VAD hears and what the glances read."""
    heard, words = [], []
    for i in range(0, mic.size, chunk):
        got = room.clean(mic[i:i + chunk], T0 + (i + chunk) / RATE)
        heard.append(got.heard)
        words.append(got.heard if got.words is None else got.words)
    return np.concatenate(heard), np.concatenate(words)


@pytest.mark.parametrize("delay_ms", [40, 300])
def test_the_glances_read_a_stop_over_a_loud_echo_whole(voice, delay_ms):
    """A "Stop." over an echo only 6 dB down: AEC3's suppressor takes syllables of a voice that
    talks over so loud an echo (Whisper read "It's gone.", "Top."), so the glances read a linear
    canceller's output, aligned to the echo path's delay it found: the voice whole, the echo down."""
    from core.conversation import linear_echo
    from tests.support.whisper import _whisper, words

    if not linear_echo.available():
        pytest.skip("pyaec has no wheel for this platform (requirements.txt): glances read AEC3's output")
    reply24, reply16, stop = voice
    mic = microphone(reply16, -6, delay_ms, 6.0, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    heard, read = cleaned(room, mic)
    assert abs(room.linear.lag_s - delay_ms / 1000) <= 0.02, room.linear.lag_s  # found, not assumed
    spoken = slice(6 * RATE, 6 * RATE + stop.size)
    before = slice(5 * RATE, 6 * RATE)  # the echo alone
    assert abs(level(read[spoken]) - level(stop * 0.5)) < 1.5, "the voice kept whole"
    assert level(read[before]) < level(mic[before]) - 10, "the echo taken down"
    assert level(heard[before]) < level(read[before]) - 10, "the VAD still hears AEC3's deeper cut"
    clip = np.concatenate([read[6 * RATE - RATE // 4: 6 * RATE + stop.size], np.zeros(RATE // 10, np.float32)])
    assert "stop" in words(_whisper().glance(clip))


def test_the_linear_canceller_keeps_its_echo_down_while_arrivals_jitter(voice):
    """A busy loop or network delivers the microphone's chunks late (here by ~10 ms on average,
    exponentially, seeded): the microphone's clock moves back a few ms whenever one comes sooner
    than any before, and the linear canceller's reference must not move with it (each step would
    be a new echo path to learn for seconds, the echo only ~5 dB down meanwhile, and a "Stop."
    over it read as "It's top.")."""
    from core.conversation import linear_echo

    if not linear_echo.available():
        pytest.skip("pyaec has no wheel for this platform")
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 80, None, stop)

    def residue(late) -> list[float]:
        room = RoomFilter(played_reply(reply24), noise_suppression=False)
        read = []
        for i in range(0, mic.size, 320):
            got = room.clean(mic[i:i + 320], T0 + (i + 320) / RATE + late())
            read.append(got.heard if got.words is None else got.words)
        out = np.concatenate(read)
        return [level(out[s * RATE:(s + 1) * RATE]) - level(mic[s * RATE:(s + 1) * RATE]) for s in range(2, 6)]

    rng = np.random.default_rng(2)
    on_time, jittered = residue(lambda: 0.0), residue(lambda: rng.exponential(0.01))
    assert max(on_time) < -10
    assert all(j <= o + 1.5 for j, o in zip(jittered, on_time)), (on_time, jittered)


def test_the_linear_canceller_moves_only_for_a_delay_found_again_and_again():
    """One waveform reading over the listener's voice can find a wrong lag: the filter, which learns
    for seconds, moves only when a new delay is found three times in a row."""
    from core.conversation import linear_echo

    if not linear_echo.available():
        pytest.skip("pyaec has no wheel for this platform")
    lin = linear_echo.LinearEcho()
    lin.align(0.15)
    assert lin.shift == int((0.15 - linear_echo.MARGIN_S) * RATE)
    for lag in (0.40, 0.16, 0.41, 0.40):  # an outlier, the delay in use again, a new one twice
        lin.align(lag)
    assert lin.lag_s == 0.15
    lin.align(0.405)
    assert lin.lag_s == pytest.approx(0.405, abs=0.006)


def test_a_clean_microphone_gives_the_glances_what_the_vad_hears(voice):
    reply24, reply16, stop = voice
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    chunks = [room.clean(c, T0 + (i + 1) * 0.02) for i, c in enumerate(np.split(microphone(reply16, None, 0, 2.5, stop)[: 4 * RATE], 200))]
    assert room.presence.echo is False and all(c.words is None for c in chunks[100:])


def test_a_clean_microphone_passes_as_it_came(voice):
    """A headset: nothing of the reply in the microphone. AEC3 that never found an echo path would
    suppress the listener's voice over the reply; the presence check keeps its output out."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, None, 0, 2.5, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    out = filtered(room, mic)
    spoken = slice(int(2.5 * RATE), int(2.5 * RATE) + stop.size)
    assert abs(level(out[spoken]) - level(mic[spoken])) < 1.0
    assert room.presence.echo is False


def test_audio_sent_faster_than_real_time_is_not_taken_for_echo(voice):
    """A file streamed in a burst while the reply plays: it lands where nothing played."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, None, 0, 1.0, stop, seconds=3.0)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    out = np.concatenate([room.process(mic[i:i + 640], T0 + 1.0) for i in range(0, mic.size, 640)])
    spoken = slice(RATE, RATE + stop.size)
    assert abs(level(out[spoken]) - level(mic[spoken])) < 1.0


def test_noise_suppression_lowers_steady_noise_and_keeps_the_voice(voice):
    _, _, stop = voice
    rng = np.random.default_rng(2)
    mic = (rng.standard_normal(RATE * 4) * 10 ** (-40 / 20)).astype(np.float32)  # a fan, -40 dBFS
    at = 3 * RATE
    mic[at:at + stop.size] += stop * 0.5
    out = filtered(RoomFilter(None, noise_suppression=True), mic)
    noise_only = slice(RATE, 2 * RATE)
    spoken = slice(at, at + stop.size)
    assert level(out[noise_only]) < level(mic[noise_only]) - 10
    assert level(out[spoken]) > level(mic[spoken]) - 4


def test_the_session_turns_the_room_on_and_off():
    ga, beta = Dialect(False), Dialect(True)
    cfg, settings = apply_session_update(ConversationConfig(), {"audio": {"input": {
        "noise_reduction": {"type": "far_field"}, "echo_cancellation": None}}}, ga)
    assert cfg.noise_reduction == "far_field" and cfg.echo_cancellation is False
    shown = session_object(cfg, ga, "sess_1", "m", settings)["audio"]["input"]
    assert shown["noise_reduction"] == {"type": "far_field"} and shown["echo_cancellation"] is None
    cfg, settings = apply_session_update(cfg, {"input_audio_noise_reduction": None,
                                               "input_audio_echo_cancellation": {"type": "server"}}, beta)
    assert cfg.noise_reduction is None and cfg.echo_cancellation is True
    shown = session_object(cfg, beta, "sess_1", "m", settings)
    assert shown["input_audio_noise_reduction"] is None and shown["input_audio_echo_cancellation"] == {"type": "server"}
    assert session_object(ConversationConfig(), ga, "s", "m")["audio"]["input"]["echo_cancellation"] == {"type": "server"}


@pytest.mark.parametrize("field,value", [("noise_reduction", {"type": "loud_room"}), ("noise_reduction", "near_field"),
                                         ("echo_cancellation", True), ("echo_cancellation", {"type": "client"})])
def test_a_bad_room_field_is_refused_with_its_name(field, value):
    with pytest.raises(ProtocolError) as err:
        apply_session_update(ConversationConfig(), {"audio": {"input": {field: value}}}, Dialect(False))
    assert err.value.param == f"session.audio.input.{field}"
    assert "null" in err.value.message


def test_noise_reduction_changes_what_the_vad_hears(voice):
    """The same noisy input through the session's input path, with ``noise_reduction`` and
    without: what the VAD, glances and transcripts get has the fan taken out, and the voice is
    still heard from its start to its end."""
    from core.conversation.audio_input import AudioInput
    from core.conversation.vad import SileroModel

    _, reply16, _ = voice
    rng = np.random.default_rng(3)
    words = reply16[: 3 * RATE] * 0.5
    mic = np.concatenate([np.zeros(RATE, np.float32), words, np.zeros(2 * RATE, np.float32)])
    mic += (rng.standard_normal(mic.size) * 10 ** (-40 / 20)).astype(np.float32)
    model = SileroModel()
    heard = {}
    for nr in (None, "near_field"):
        cfg = ConversationConfig(input_sample_rate=16000, noise_reduction=nr, echo_cancellation=False)
        inp = AudioInput(model, cfg)
        reports, audio = [], []
        for i in range(0, mic.size, 640):
            out, got = inp.process(mic[i:i + 640], T0 + (i + 640) / RATE)
            audio.append(out)
            reports += [kind for kind, _, _ in got]
        heard[nr] = (np.concatenate(audio)[RATE // 4: RATE * 3 // 4], reports)
    assert level(heard["near_field"][0]) < level(heard[None][0]) - 10  # the noise before the voice
    for _, reports in heard.values():
        assert reports[0] == "start" and reports[-1] == "end"


def test_chunks_bunched_by_a_busy_loop_are_still_cancelled(voice):
    """The worker's loop stalls 0.8 s (a resumed reply's audio sent at once) and the microphone's
    chunks then arrive together: they keep their places, and their echo is cancelled."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 150, None, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    out = filtered(room, mic, arrival=lambda due: T0 + 6.0 if T0 + 5.2 <= due < T0 + 6.0 else due)  # 5.2-6 s at 6 s
    bunched = slice(int(5.2 * RATE), 6 * RATE)
    assert level(out[bunched]) < level(mic[bunched]) - 25
    assert level(out[6 * RATE: 8 * RATE]) < level(mic[6 * RATE: 8 * RATE]) - 25


def test_a_client_that_paused_sending_is_followed(voice):
    """A client stops sending for 3 s and goes on in real time: within a few seconds its echo is
    cancelled again (the clock moved on with it)."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 80, None, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    # 2-5 s never sent: the microphone's audio from 5 s on comes 3 s after the audio before it
    out = filtered(room, mic, arrival=lambda due: None if T0 + 2.0 < due <= T0 + 5.0 else due)
    later = slice(out.size - 3 * RATE, out.size)  # the last 3 s (of the audio sent from 5 s on)
    sent = np.concatenate([mic[: 2 * RATE], mic[5 * RATE:]])
    assert level(out[later]) < level(sent[later]) - 20


def test_the_echo_stays_cancelled_after_the_listener_talks_over_it(voice):
    """The listener's voice over the echo lowers how well the microphone follows the reply for as
    long as the window holds it; that must not be read as the echo gone (a headset): the echo
    between the voices is still cancelled."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 150, None, stop)
    for at in (3.0, 4.5, 6.0, 7.5):  # a listener who talks over it, 10 dB above the echo
        i = int(at * RATE)
        mic[i:i + stop.size] += stop * 2.0
    out = filtered(RoomFilter(played_reply(reply24), noise_suppression=False), mic)
    between = np.concatenate([out[int(a * RATE) + stop.size + RATE // 10: int((a + 1.5) * RATE)] for a in (4.5, 6.0)])
    heard = np.concatenate([mic[int(a * RATE) + stop.size + RATE // 10: int((a + 1.5) * RATE)] for a in (4.5, 6.0)])
    assert level(between) < level(heard) - 20


@pytest.mark.parametrize("at_s", [0.5, 1.0])
def test_a_voice_early_in_the_reply_passes_a_clean_microphone(voice, at_s):
    """A headset user who speaks half a second into the reply, before the levels can tell there is
    no echo: the waveform says it is no echo of the reply, and the voice passes as it came."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, None, 0, at_s, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    out = filtered(room, mic[: int(at_s * RATE) + stop.size])
    spoken = slice(int(at_s * RATE), int(at_s * RATE) + stop.size)
    assert level(out[spoken]) > level(mic[spoken]) - 1.5
    assert not room.learning, "its onset is sure: the reply yields at once"


def test_the_canceller_learns_for_the_replys_first_two_seconds_of_sound(voice):
    """What AEC3 leaves of the echo while it learns can start the VAD (the turn policy then waits
    for words before it yields); once the reply has sounded ``LEARNING_FRAMES``, onsets are sure."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 150, None, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    seen = []
    for i in range(0, mic.size, 320):
        room.process(mic[i:i + 320], T0 + (i + 320) / RATE)
        seen.append(room.learning)
    chunks_per_s = RATE // 320
    assert all(seen[int(0.2 * chunks_per_s):int(1.5 * chunks_per_s)]), "learning in the reply's first second"
    first_sure = seen.index(False, int(0.2 * chunks_per_s))
    assert 2.0 <= first_sure / chunks_per_s <= 3.5, first_sure / chunks_per_s  # 2 s of sound, with its pauses
    assert not any(seen[first_sure:]), "and it stays sure"


def test_a_voice_is_no_match_for_a_reply_that_had_hardly_begun(voice):
    """The waveform reading while the reply's last 800 ms are mostly silence (it has just begun, or
    paused): the near-silent stretches used to "match" any microphone far above 1 (their tiny
    energy divided the correlation), so a café's voices read as the echo 0.2 s into a reply."""
    reply24, _, stop = voice
    ref = np.concatenate([np.zeros(24000 * 6 // 10, np.float32), reply24[: 24000 // 5]])  # Piper's quiet onset
    mic = stop[: RATE // 5]
    match = waveform_match(np.round(mic * 32768).astype(np.int16), np.round(ref * 32768).astype(np.int16))
    assert 0.0 <= match < QUICK_ECHO, match  # not the echo (below QUICK_VOICE: a voice)


def test_the_echo_of_the_replys_first_second_is_cancelled(voice):
    """The other side of that reading: the echo at the start of the reply is cancelled before the
    levels have decided (it would be the first self-interruption)."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, -10, 150, None, stop)
    out = filtered(RoomFilter(played_reply(reply24), noise_suppression=False), mic)
    first = slice(int(0.5 * RATE), int(1.1 * RATE))
    assert level(out[first]) < level(mic[first]) - 15


def test_a_session_that_never_cancels_does_not_keep_every_reply():
    """On a call the server's canceller is off and nothing reads the played audio: the play head
    still lays each reply on it, and what played more than a moment ago is let go."""
    from core.conversation.playback import PlaybackClock

    clock_now = [T0]
    played = PlayedAudio()
    clock = PlaybackClock(now=lambda: clock_now[0], played=played)
    piece = np.zeros(4800, "<i2").tobytes()  # 200 ms
    for k in range(600):  # two minutes of replies, sent as they play
        clock.sent("item_1", 4800, piece)
        clock_now[0] += 0.2
    assert played.held_samples <= 24000 * 3  # the last ~2 s (KEEP_S), not two minutes


@pytest.mark.parametrize("voice_index, delay_ms", [(2, 300), (3, 40), (4, 40)])
def test_a_turn_over_a_loud_echo_is_transcribed_from_the_voice_kept_whole(voice, voice_index, delay_ms):
    """The turn's transcript is what the model answers: a "Stop." spoken over an echo 6 dB down (the
    room bench's: a room tail 3 dB below the direct path) is read from the linear canceller's
    output, as the glances read it. AEC3's suppressor takes syllables of it: on dev voices at -6 dB
    its output gave the right first word in 26 of 60 short cut-ins ("Stop." read as "Um.",
    "Talk.", "Duh."), the linear output in 48."""
    from bench.duplex.room import room_response
    from bench.sets.duplex import DEV_VOICES
    from core.conversation import linear_echo
    from core.conversation.audio_input import AudioInput
    from core.conversation.vad import SileroModel
    from devtools.espeak import espeak
    from tests.support.whisper import _whisper, words

    if not linear_echo.available():
        pytest.skip("pyaec has no wheel for this platform (requirements.txt): turns read AEC3's output")
    reply24, reply16, _ = voice
    name, speed, pitch = DEV_VOICES[voice_index]
    stop = espeak("Stop.", name, speed, pitch, rate=RATE).astype(np.float32) / 32768
    stop *= 0.1 / np.sqrt(np.mean(stop ** 2))  # -20 dBFS, the room bench's voice
    mic = np.random.default_rng(1).standard_normal(RATE * 8).astype(np.float32) * 10 ** (-65 / 20)
    echo = np.convolve(reply16, room_response(0.25, 0, rate=RATE))[: reply16.size] * 10 ** (-6 / 20)
    d = RATE * delay_ms // 1000
    mic[d:] += echo[: mic.size - d]
    at = int(6.0 * RATE)
    mic[at:at + stop.size] += stop
    listener = AudioInput(SileroModel(), ConversationConfig(input_sample_rate=RATE), played_reply(reply24))
    turns = []
    for i in range(0, mic.size, 320):
        _, reports = listener.process(mic[i:i + 320], T0 + (i + 320) / RATE)
        turns += [segment for kind, _, segment in reports if kind == "end"]
    assert len(turns) == 1
    assert "stop" in words(_whisper().transcribe(turns[0]).text)


def test_a_voice_ended_over_the_echo_keeps_aec3s_clip_for_its_reading(voice):
    """A voice over the reply that the VAD ends before any pause of it was read (a loaded machine,
    audio sent faster than real time) is read from its segment, whose audio then leaves the
    buffer. Its reading takes AEC3's clip as well as the linear canceller's, as every glance does:
    while the linear canceller learns it leaves enough echo that "Stop." reads "Start."."""
    from core.conversation import linear_echo
    from core.conversation.audio_input import AudioInput
    from core.conversation.vad import SileroModel

    if not linear_echo.available():
        pytest.skip("pyaec has no wheel for this platform (requirements.txt): turns read AEC3's output")
    reply24, reply16, stop = voice
    mic = microphone(reply16, -6.0, 40, 6.0, stop, seconds=8.0)
    listener = AudioInput(SileroModel(), ConversationConfig(input_sample_rate=RATE), played_reply(reply24))
    heard, ended = [], []
    for i in range(0, mic.size, 320):
        audio, reports = listener.process(mic[i:i + 320], T0 + (i + 320) / RATE)
        heard.append(audio)  # what the VAD heard: AEC3's output
        ended += [(segment, listener.vad.speech_start_samples - listener.pad)
                  for kind, _, segment in reports if kind == "end"]
    stream = np.concatenate(heard)
    assert len(ended) == 1
    segment, start = ended[0]
    clip = listener.heard_as(segment)
    assert clip is not None and clip.size == segment.size
    n = min(clip.size, stream.size - start)
    assert np.array_equal(clip[:n], stream[start:start + n])  # AEC3's clip of the same span
    assert not np.array_equal(clip, segment)  # and not the linear canceller's
    assert listener.heard_as(segment.copy()) is None  # only the voice just ended


def test_a_clean_microphone_gives_every_chunk_on_at_once(voice):
    """Once the room knows the microphone hears no echo, a chunk of any size comes out whole as it
    came (a partial 10 ms frame no longer waits for the next chunk); while it cancels, whole
    frames only."""
    reply24, reply16, stop = voice
    mic = microphone(reply16, None, 0, 2.5, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    sizes, given = [], 0
    for i in range(0, mic.size, 300):  # 18.75 ms chunks: never whole frames
        out = room.process(mic[i:i + 300], T0 + (i + 300) / RATE)
        sizes.append(out.size)
        if room.presence.echo is False and i > 2 * RATE:
            expect = np.round(np.clip(mic[i:i + 300], -1, 1) * 32767) / 32768
            assert out.size == min(300, mic.size - i) and np.allclose(out, expect, atol=1 / 32768)
        given += out.size
    assert given == mic.size
    echo = microphone(reply16, -10.0, 100, None, stop)
    room = RoomFilter(played_reply(reply24), noise_suppression=False)
    sizes = [room.process(echo[i:i + 300], T0 + (i + 300) / RATE).size for i in range(0, 4 * RATE, 300)]
    assert room.presence.echo and all(s % 160 == 0 for s in sizes[-100:])


def test_a_clean_microphone_reaches_the_vad_as_it_comes_room_on_or_off(voice):
    """The listener's "Stop." streamed at 24 kHz in 20 ms chunks over a reply its microphone does
    not hear: once the room has decided there is no echo, every chunk gives the VAD the same
    samples with the room on as off, as the chunk arrives (before, the room's 10 ms frames held
    back part of what the resampler let out, and the VAD reported some onsets a chunk or two
    later: offline on 24 dev2 clips at 8 places of the VAD's grid, 163 ms after the onset on
    average against 156 off)."""
    from core.audio import resample
    from core.conversation.audio_input import AudioInput
    from core.conversation.vad import SileroModel

    reply24, _, stop = voice
    stop24 = (resample(stop, RATE, 24000) * 32767).astype(np.int16)
    pcm = np.concatenate([np.zeros(24000 * 2, np.int16), stop24, np.zeros(24000, np.int16)]) / 32768
    heard, decided = {}, None
    for room_on in (False, True):
        cfg = ConversationConfig(turn_detection={"type": "semantic_vad"}, echo_cancellation=room_on,
                                 input_sample_rate=24000)
        audio = AudioInput(SileroModel(), cfg, played_reply(reply24))
        heard[room_on] = []
        for k in range(0, pcm.size, 480):
            heard[room_on].append(audio.process(pcm[k:k + 480], T0 + (k + 480) / 24000))
            if room_on and decided is None and audio.room.presence.echo is False:
                decided = len(heard[room_on]) + 1  # (the chunk it decided on gives on what it held)
    assert decided is not None and decided * 0.02 < 1.5  # the room decided before the voice (at 2 s)
    for (off, off_reports), (on, on_reports) in zip(heard[False][decided:], heard[True][decided:]):
        assert on.size == off.size and np.allclose(on, off, atol=2 / 32768)
        # the same reports on the same chunk (a pause's place can move 10 ms: the room's output is
        # PCM16, and the VAD's quiet level follows the hiss it rounds away)
        assert [r[0] for r in on_reports] == [r[0] for r in off_reports]
        assert [r[1] for r in on_reports if r[0] == "start"] == [r[1] for r in off_reports if r[0] == "start"]
    assert any(r[0] == "start" for _, reports in heard[True] for r in reports)



def test_a_question_spoken_before_the_reply_does_not_hide_its_echo(voice):
    """The user asks aloud, and the answer's echo follows in the microphone at once. Their question,
    loud while nothing played, is no evidence against an echo: counted, the levels read a -6 dB
    echo as none a second into the answer (0.07 here; 0.27-0.33 in the SDK drive), the canceller
    let the echo through, and the answer stopped itself for its own words (issue 70)."""
    from core.audio import resample
    from core.cascade.tts import PiperTts

    reply24, reply16, stop = voice
    ask = b"".join(PiperTts().synthesize("Tell me a long story about a lighthouse keeper.", deterministic=True))
    question = resample(np.frombuffer(ask, "<i2").astype(np.float32) / 32768, 24000, RATE) * 4.0
    ask_s = 0.5 + question.size / RATE + 0.1  # the answer sounds 0.1 s after the question
    mic = np.concatenate([np.zeros(int(ask_s * RATE), np.float32), microphone(reply16, -6, 120, None, stop, 6.0)])
    mic[RATE // 2: RATE // 2 + question.size] += question
    played = PlayedAudio()
    step = 24000 // 5
    for k, i in enumerate(range(0, reply24.size, step)):  # the answer plays from ask_s on
        played.add((reply24[i:i + step] * 32767).astype("<i2").tobytes(), T0 + ask_s + k * 0.2)
    room = RoomFilter(played, noise_suppression=False)
    decided, out = [], []
    for i in range(0, mic.size, 320):
        out.append(room.process(mic[i:i + 320], T0 + (i + 320) / RATE))
        decided.append(room.presence.echo)
    out = np.concatenate(out)
    assert False not in decided[int(ask_s * RATE / 320):], "never judged a clean microphone while its echo played"
    assert room.presence.echo is True
    answer = slice(int((ask_s + 1.0) * RATE), int((ask_s + 4.0) * RATE))
    assert level(out[answer]) < level(mic[answer]) - 15, "the answer's echo is cancelled"


def test_the_pieces_that_play_on_from_each_other_are_one_run():
    played = PlayedAudio()
    piece = np.full(2400, 1000, "<i2").tobytes()  # 100 ms
    for k in range(3):
        played.add(piece, 10.0 + k * 0.1)  # queued behind each other
    played.stop(10.25)  # a cut: the answer comes after a silence
    played.add(piece, 11.0)
    played.add(piece, 11.1)
    runs = [played.run_at(t) for t in (10.05, 10.15, 10.22, 10.27, 11.05, 11.15)]
    assert runs[0] == runs[1] == runs[2] and runs[3] is None and runs[4] == runs[5] != runs[0]


def story_then_answer(voice, moved_s: float) -> tuple[np.ndarray, PlayedAudio, float]:
    """A story cut by "Stop." at 4.8 s, then its answer from 6.5 s, whose echo comes ``moved_s``
    later than the story's did (120 ms, -10 dB): the microphone, what played, the answer's start."""
    reply24, reply16, stop = voice
    story_s, answer_at = 5.0, 6.5
    played = PlayedAudio()
    step = 24000 // 5
    for k, i in enumerate(range(0, int(story_s * 24000), step)):
        played.add((reply24[i:i + step] * 32767).astype("<i2").tobytes(), T0 + k * 0.2)
    played.stop(T0 + story_s)  # the listener cut in
    answer24 = reply24[6 * 24000:]
    for k, i in enumerate(range(0, answer24.size, step)):
        played.add((answer24[i:i + step] * 32767).astype("<i2").tobytes(), T0 + answer_at + k * 0.2)
    line = np.zeros(int((answer_at + 6.0) * RATE), np.float32)
    line[:int(story_s * RATE)] = reply16[:int(story_s * RATE)]
    late = int((answer_at + moved_s) * RATE)  # where the answer really played
    answer16 = reply16[6 * RATE:]
    line[late:late + answer16.size] = answer16[:line.size - late]
    return microphone(line, -10, 120, 4.8, stop, line.size / RATE), played, answer_at


def test_an_answer_that_reaches_the_loudspeaker_later_than_the_story_did_is_learned_again(voice):
    """Each answer starts the listener's queue again, and so reaches the loudspeaker a different
    few tens of ms late: AEC3, which knew the story's echo path, passes 10-15 dB of the answer's
    echo for a while, which the VAD takes for a voice: the answer stopped itself for its own first
    words (the room bench, 4 of 48 answers to cut-ins). Its first second of sound is learned again:
    an onset there waits for its words; later it is sure."""
    mic, played, answer_at = story_then_answer(voice, 0.08)
    room = RoomFilter(played, noise_suppression=False)
    learning = []
    for i in range(0, mic.size, 320):
        room.process(mic[i:i + 320], T0 + (i + 320) / RATE)
        learning.append(room.learning)
    at = lambda s: int(s * RATE / 320)  # noqa: E731 - the chunk at s seconds
    assert not any(learning[at(3.0):at(5.0)]), "the story's echo path was known"
    assert all(learning[at(answer_at + 0.1):at(answer_at + 0.8)]), "the answer's first words are learned again"
    assert not any(learning[at(answer_at + 2.5):at(answer_at + 5.0)]), "and then sure again"


def test_the_linear_canceller_follows_an_answer_whose_echo_comes_sooner(voice):
    """The glances read the linear canceller, whose filter starts at the delay the waveform
    reading found: an answer whose echo comes 60 ms sooner than the story's would leave its first
    60 ms of every sound in what they read, unless the readings that keep it aligned see it."""
    from core.conversation import linear_echo

    if not linear_echo.available():
        pytest.skip("pyaec has no wheel for this platform")
    mic, played, answer_at = story_then_answer(voice, -0.06)
    room = RoomFilter(played, noise_suppression=False)
    lags = []
    for i in range(0, mic.size, 320):
        room.process(mic[i:i + 320], T0 + (i + 320) / RATE)
        lags.append(room.linear.lag_s)
    at = lambda s: int(s * RATE / 320)  # noqa: E731 - the chunk at s seconds
    assert abs(lags[at(4.5)] - 0.12) <= 0.02, "aligned to the story's echo"
    assert abs(lags[-1] - 0.06) <= 0.02, "and then to the answer's"


class CountingCanceller:
    """A test double around the session's AEC3 that counts the frames it is given."""

    def __init__(self, aec) -> None:
        self.aec, self.frames = aec, 0

    def process_reverse_stream(self, frame) -> None:
        self.aec.process_reverse_stream(frame)

    def process_stream(self, frame) -> None:
        self.frames += 1
        self.aec.process_stream(frame)

    def set_stream_delay_ms(self, ms: int) -> None:
        self.aec.set_stream_delay_ms(ms)


def test_the_canceller_rests_while_nothing_played_for_a_second_and_the_microphone_passes_as_it_came():
    """A session that listens (nothing played, or nothing for a second: no echo can be left in the
    room) costs no AEC3 frames: the microphone reaches the VAD as it came."""
    room = RoomFilter(PlayedAudio(), noise_suppression=False)
    room._aec = counting = CountingCanceller(room._aec)
    rng = np.random.default_rng(3)
    mic = (rng.standard_normal(RATE * 4) * 10 ** (-40 / 20)).astype(np.float32)
    out = filtered(room, mic)
    assert counting.frames <= 110, "AEC3 ran on the first second only"
    rest = slice(RATE * 3 // 2, RATE * 4 - 320)  # (the last chunk's frame may be pending)
    assert np.array_equal(out[rest] * 32768, (np.clip(mic[rest], -1, 1) * 32767).astype(np.int16))  # its PCM16


def test_an_answer_after_the_canceller_rested_is_cancelled_as_well_as_by_one_that_never_rests(voice, monkeypatch):
    """The story is cut, nothing plays for 1.5 s (the canceller rests for its last 0.5 s), and the
    answer's echo is taken out as deeply as by a canceller that ran through the silence: the rest
    keeps the echo path it learned and starts again from a second of silent reference."""
    from core.conversation import room as room_module

    mic, played, answer_at = story_then_answer(voice, 0.0)
    rested = RoomFilter(played, noise_suppression=False)
    rested._aec = counting = CountingCanceller(rested._aec)
    out_rested = filtered(rested, mic)
    monkeypatch.setattr(room_module, "STILL_FRAMES", 10 ** 9)
    _, played_again, _ = story_then_answer(voice, 0.0)
    never = RoomFilter(played_again, noise_suppression=False)
    out_never = filtered(never, mic)
    assert counting.frames <= mic.size // 160 - 40, "it rested through the silence before the answer"
    answer = slice(int((answer_at + 0.3) * RATE), mic.size - RATE // 2)
    assert level(mic[answer]) > -40  # an echo to hear
    assert level(out_rested[answer]) < level(mic[answer]) - 20
    assert level(out_rested[answer]) <= level(out_never[answer]) + 2.0
