"""The microphone's resampling to the VAD's 16 kHz (``core.audio.InputResampler``, libswresample):
each chunk comes out as it arrives, less a constant 16 samples (soxr's stream held 97-585 at 24 ->
16 kHz and let them out in bursts, and the VAD heard a voice's onset up to ~37 ms later), on the
right samples, with speech's band kept and what would alias taken out."""

from __future__ import annotations

import numpy as np
import pytest

from core.audio import InputResampler


@pytest.mark.parametrize("rate, chunk", [(24000, 480), (24000, 2400), (8000, 160)])
def test_each_chunk_comes_out_as_it_arrives(rate, chunk):
    r = InputResampler(rate, 16000)
    given = 0
    for k in range(1, 60):
        given += r.process(np.zeros(chunk, np.float32)).size
        assert k * chunk * 16000 // rate - given <= 32  # 1 ms at 24 kHz in, 2 ms at 8 kHz (the filter's delay)


def test_a_click_stays_where_it_was():
    x = np.zeros(24000 * 2, np.float32)
    x[24000] = 1.0
    r = InputResampler(24000, 16000)
    y = np.concatenate([r.process(x[i:i + 480]) for i in range(0, x.size, 480)])
    assert int(np.argmax(np.abs(y))) == 16000


@pytest.mark.parametrize("freq, low, high", [(1000, -0.5, 0.5), (6000, -0.5, 0.5), (9000, -200, -40)])
def test_speech_band_kept_and_aliases_taken_out(freq, low, high):
    t = np.arange(24000) / 24000
    x = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    r = InputResampler(24000, 16000)
    y = np.concatenate([r.process(x[i:i + 480]) for i in range(0, x.size, 480)])
    gain = 20 * np.log10(np.sqrt(np.mean(y[4000:12000] ** 2)) / (0.5 / np.sqrt(2)) + 1e-12)
    assert low <= gain <= high


def test_16_khz_passes_untouched():
    x = np.random.default_rng(0).standard_normal(320).astype(np.float32)
    assert InputResampler(16000, 16000).process(x) is x or np.array_equal(InputResampler(16000, 16000).process(x), x)
