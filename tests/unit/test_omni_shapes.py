"""The GPU benchmark's pieces that can be checked on a CPU (issue 37): the Qwen2.5-Omni-7B shapes
(built on the meta device: no memory, no weights), its stand-in tokenizer, and the launcher
keeping packages installed with ``pip --target`` importable in the processes it starts."""

from __future__ import annotations

import os

import pytest


def test_qwen2_5_omni_7b_shapes_are_the_published_ones():
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration

    from devtools.omni_models import QWEN2_5_SPECIAL_IDS, parameter_counts, qwen2_5_omni_7b_config

    config = qwen2_5_omni_7b_config()
    with torch.device("meta"):
        model = Qwen2_5OmniForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
    counts = parameter_counts(model)
    assert counts["total"] == pytest.approx(10.73e9, rel=0.01)  # the published "about 10 B" (22.4 GB in bf16)
    assert counts["thinker_llm"] == pytest.approx(7.62e9, rel=0.01)
    talker = config.talker_config
    assert (talker.hidden_size, talker.num_hidden_layers, talker.vocab_size) == (896, 24, 8448)
    thinker = config.thinker_config
    assert thinker.vision_start_token_id == QWEN2_5_SPECIAL_IDS["<|vision_bos|>"]
    assert thinker.audio_token_index == QWEN2_5_SPECIAL_IDS["<|AUDIO|>"]
    # The Talker's ids run past the vocoder's codebook, as in the real model: the backend must
    # keep the Talker inside it (tests/e2e/test_backend_qwen_omni.py).
    assert talker.vocab_size > config.token2wav_config.dit_config.num_embeds


def test_stand_in_tokenizer_has_the_real_ids_and_speaks_in_sentences(tmp_path):
    from devtools.omni_models import QWEN2_5_SPECIAL_IDS, QWEN2_5_VOCAB, word_tokenizer

    tok = word_tokenizer(tmp_path, QWEN2_5_VOCAB, QWEN2_5_SPECIAL_IDS)
    assert len(tok) == QWEN2_5_VOCAB
    for text, token_id in QWEN2_5_SPECIAL_IDS.items():
        assert tok.convert_tokens_to_ids(text) == token_id
    ids = tok("<|im_start|>user\nWhat is the time?<|im_end|>")["input_ids"]
    assert ids[0] == QWEN2_5_SPECIAL_IDS["<|im_start|>"] and ids[-1] == QWEN2_5_SPECIAL_IDS["<|im_end|>"]
    text = tok.decode(list(range(100, 125)), skip_special_tokens=True)
    assert len(text.split()) == 25 and text.count(".") == 2  # words, and sentence ends to cut pieces at


def test_children_keep_the_parents_python_path(monkeypatch):
    from launcher.processes import ROOT, child_env

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/tmp/site", str(ROOT)]))
    assert child_env()["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/tmp/site"]
    monkeypatch.delenv("PYTHONPATH")
    assert child_env()["PYTHONPATH"] == str(ROOT)
