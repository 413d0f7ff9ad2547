"""What Whisper's encoder gets past a short clip (issue 44): the log-mel of silence at the clip's
own level, as faster-whisper's padded audio gives it; and a transcript that loops in that silence
is decoded again over the old zero frames (``core/cascade/asr.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from core.cascade.asr import MIN_FRAMES, Transcript, WhisperAsr, repeats, without_repeats


@pytest.fixture(scope="module")
def asr() -> WhisperAsr:
    return WhisperAsr()


@pytest.mark.parametrize("level", [0.02, 0.1, 0.5])
def test_frames_past_a_clip_are_the_silence_of_padded_audio(asr, level):
    clip = (np.random.RandomState(1).randn(32000) * level).astype(np.float32)
    mel = asr._mel(clip)
    padded = asr._features(np.concatenate([clip, np.zeros(MIN_FRAMES * 160, np.float32)]))[:, :MIN_FRAMES]
    frames = asr._features(clip).shape[1]
    assert mel.shape == padded.shape
    # Past the clip (the STFT's last frames aside) the two are the same silence, whatever the level.
    np.testing.assert_allclose(mel[:, frames + 2:], padded[:, frames + 2:], atol=1e-5)
    assert not np.allclose(asr._mel(clip, silence_pad=False)[:, frames + 2:], padded[:, frames + 2:])


def test_three_words_twice_is_a_loop():
    assert repeats("Open the garage door. Open the garage door. Open the")
    assert repeats("What is the name of the name of the name")
    assert not repeats("What is the capital of France?")
    assert not repeats("Right, right.") and not repeats("Yeah yeah yeah.")  # a word said again is speech
    assert not repeats("")


def test_a_glance_that_loops_after_its_prompt_keeps_each_run_of_words_once():
    assert without_repeats("Okay. Okay. Okay. Okay. Okay. Okay") == "Okay."
    assert without_repeats("Sure... Sure... Sure... Sure") == "Sure..."
    assert without_repeats("Yeah, yeah. Yeah, Yeah Yeah Yeah") == "Yeah,"
    assert without_repeats("No, stop. No, stop. No") == "No, stop. No"
    assert without_repeats("Hold on, what is a") == "Hold on, what is a"
    assert without_repeats("What is the name of the name of the name") == "What is the name of the name"
    assert without_repeats("") == ""


def test_a_looping_transcript_is_decoded_again_over_zeros(asr, monkeypatch):
    decoded = []

    def decode(samples, silence_pad):
        decoded.append(silence_pad)
        text = "Open the garage door. Open the garage door. Open the" if silence_pad else "Open the garage door."
        return Transcript(text, 0.0, -0.1)

    monkeypatch.setattr(asr, "_decode_window", decode)
    assert asr.transcribe(np.zeros(16000, np.float32)).text == "Open the garage door."
    assert decoded == [True, False]
    decoded.clear()
    monkeypatch.setattr(asr, "_decode_window", lambda samples, silence_pad: decoded.append(silence_pad) or
                        Transcript("What is the capital of France?", 0.0, -0.1))
    assert asr.transcribe(np.zeros(16000, np.float32)).text == "What is the capital of France?"
    assert decoded == [True]  # no loop: one decode


def test_the_cascade_and_the_omni_backends_glance_after_the_listener_prompt(asr, monkeypatch):
    """The overlap judge's glances are decoded after ``GLANCE_PROMPT`` (``WhisperAsr.glance``'s
    default); the fit tools ask for none with ``prompt=None``."""
    from core.cascade.asr import GLANCE_PROMPT
    from core.processors.cascade import CascadeBackend
    from core.processors.omni_base import OmniBackendBase

    prompts = []
    monkeypatch.setattr(asr, "_glance", lambda samples, silence_pad, prompt: prompts.append(prompt) or "Yeah.")
    cascade = CascadeBackend.__new__(CascadeBackend)
    cascade.asr = asr
    omni = OmniBackendBase.__new__(OmniBackendBase)
    omni._glancer = asr
    for backend in (cascade, omni):
        assert backend.transcribe_glance(np.zeros(8000, np.float32)) == "Yeah."
    assert asr.glance(np.zeros(8000, np.float32), prompt=None) == "Yeah."
    assert prompts == [GLANCE_PROMPT, GLANCE_PROMPT, None]
