"""``python -m bench omni``'s speech settings (the GPU sitting's baseline and change, issue 73):
what each one sets on the backend, and a setting it cannot run refused before a model is built."""

from __future__ import annotations

import argparse
import re

import pytest

from bench.omni_gpu import speech_setting


def test_a_setting_names_the_decode_the_first_audio_and_the_steps():
    assert speech_setting("eager:0:10") == {"speech_decode": "eager", "first_audio_blocks": 0, "token2wav_steps": 10}
    assert speech_setting("cuda_graphs:1") == {"speech_decode": "cuda_graphs", "first_audio_blocks": 1}
    assert speech_setting("static") == {"speech_decode": "static"}


@pytest.mark.parametrize("bad", ["graphs", "eager:one", "eager:1:10:3", "eager:-1", ""])
def test_a_setting_it_cannot_run_is_refused_with_the_form_it_takes(bad):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape("expected eager|static|cuda_graphs[")):
        speech_setting(bad)
