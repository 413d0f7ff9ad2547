"""Omni model directories with random weights, built from a configuration, for timing and tests.

Timing does not depend on the weights' values: a model built from its published configuration
with random weights runs the same kernels on the same number of tokens. The hub is out of reach,
so the processor files are made here too:

- ``build_qwen2_5_omni_shapes``: Qwen2.5-Omni-7B's shapes (``QWEN2_5_OMNI_7B``: transformers'
  defaults, and the published checkpoint's values where transformers' defaults differ: the
  Talker, the vision tower, untied embeddings), optionally cut to ``depth`` layers per stack for
  a dry run on a CPU. Its tokenizer has the real vocabulary size with the special tokens at the
  checkpoint's ids; the other ids decode to short words, one in twelve ending a sentence, so a
  random reply streams and is cut into speakable pieces as a real one is.

The tests' tiny models (``tests/support/tiny_omni.py``) share the processor files made here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}"
    "{% elif c['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif c['type'] == 'image' %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif c['type'] == 'video' %}<|vision_bos|><|VIDEO|><|vision_eos|>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EXTRA_SPECIAL = {
    "audio_token": "<|AUDIO|>", "image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>",
    "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>",
    "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
}

# Qwen2.5-Omni's special token ids (its tokenizer's and config.json's).
QWEN2_5_SPECIAL_IDS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|AUDIO|>": 151646,
    "<|audio_bos|>": 151647, "<|audio_eos|>": 151648, "<|vision_bos|>": 151652, "<|vision_eos|>": 151653,
    "<|IMAGE|>": 151655, "<|VIDEO|>": 151656, "<tts_pad>": 151859, "<tts_text_bos>": 151860,
    "<tts_text_eos>": 151861, "<tts_text_bos_single>": 151862,
}
QWEN2_5_VOCAB = 152064
ROPE_7B = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}
# Where the published Qwen2.5-Omni-7B config.json differs from transformers' defaults.
QWEN2_5_OMNI_7B: dict[str, Any] = {
    "thinker_text": {"tie_word_embeddings": False, "rope_parameters": ROPE_7B},
    "vision": {"hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "depth": 32, "out_hidden_size": 3584,
               "fullatt_block_indexes": [7, 15, 23, 31]},
    "talker": {"hidden_size": 896, "intermediate_size": 18944, "num_hidden_layers": 24, "num_attention_heads": 12,
               "num_key_value_heads": 4, "head_dim": 128, "embedding_size": 3584, "vocab_size": 8448,
               "rope_parameters": ROPE_7B},
}


def write_preprocessor(out: Path, patch_size: int = 14) -> None:
    """One preprocessor_config.json holding the feature extractor and the image processor (as Qwen
    ships it), and the chat template."""
    from transformers import WhisperFeatureExtractor

    try:
        from transformers import Qwen2VLImageProcessorPil as ImageProcessor
    except ImportError:  # pragma: no cover - older transformers
        from transformers import Qwen2VLImageProcessor as ImageProcessor
    fe = WhisperFeatureExtractor(feature_size=128)
    ip = ImageProcessor(patch_size=patch_size)
    pre = {**fe.to_dict(), **ip.to_dict()}
    pre.pop("mel_filters", None)
    pre.update(feature_extractor_type="WhisperFeatureExtractor", image_processor_type="Qwen2VLImageProcessor")
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=1, default=str))
    (out / "chat_template.jinja").write_text(TEMPLATE)


def word_tokenizer(out: Path, vocab_size: int, special_ids: dict[str, int]):
    """A whitespace word-level tokenizer of ``vocab_size`` entries with the special tokens at
    ``special_ids``; every other id is a short word ("w123", every twelfth "w124."). Unknown words
    in a prompt become ``<unk>``, one token a word, about what a BPE tokenizer makes of English."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    taken = set(special_ids.values())
    vocab = {"<unk>": 0}
    for i in range(1, vocab_size):
        if i not in taken:
            vocab[f"w{i}." if i % 12 == 0 else f"w{i}"] = i
    vocab.update(special_ids)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(special_ids))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="<unk>", extra_special_tokens=EXTRA_SPECIAL)
    fast.save_pretrained(out)
    return fast


def qwen2_5_omni_7b_config(depth: int | None = None):
    """Qwen2.5-Omni-7B's configuration; ``depth`` caps every stack's layer count (a CPU dry run)."""
    from transformers import Qwen2_5OmniConfig

    base = Qwen2_5OmniConfig()
    thinker = base.thinker_config.to_dict()
    text = {**thinker["text_config"], **QWEN2_5_OMNI_7B["thinker_text"]}
    vision = {**thinker["vision_config"], **QWEN2_5_OMNI_7B["vision"]}
    audio = dict(thinker["audio_config"])
    talker = {**base.talker_config.to_dict(), **QWEN2_5_OMNI_7B["talker"]}
    t2w = base.token2wav_config.to_dict()
    for part in (text, talker):
        part.pop("layer_types", None)  # derived from the layer count
    if depth is not None:
        text["num_hidden_layers"] = talker["num_hidden_layers"] = depth
        audio["encoder_layers"] = depth
        vision["depth"] = depth
        vision["fullatt_block_indexes"] = [depth - 1]
        t2w["dit_config"] = {**t2w["dit_config"], "num_hidden_layers": max(depth, 2),
                             "look_ahead_layers": [0], "look_backward_layers": [0]}
    ids = QWEN2_5_SPECIAL_IDS
    thinker.update(text_config=text, vision_config=vision, audio_config=audio,
                   vision_start_token_id=ids["<|vision_bos|>"], vision_end_token_id=ids["<|vision_eos|>"],
                   audio_start_token_id=ids["<|audio_bos|>"], audio_end_token_id=ids["<|audio_eos|>"])
    return Qwen2_5OmniConfig(thinker_config=thinker, talker_config=talker, token2wav_config=t2w,
                             enable_audio_output=True)


def parameter_counts(model) -> dict[str, int]:
    """Parameters per part (Thinker's LLM, audio and vision encoders, Talker, Token2Wav)."""
    inner = model.thinker.model
    parts = {"thinker_llm": sum(p.numel() for p in inner.language_model.parameters())
             + sum(p.numel() for p in model.thinker.lm_head.parameters()),
             "audio_encoder": sum(p.numel() for p in inner.audio_tower.parameters()),
             "vision_encoder": sum(p.numel() for p in inner.visual.parameters()),
             "talker": sum(p.numel() for p in model.talker.parameters()),
             "token2wav": sum(p.numel() for p in model.token2wav.parameters())}
    parts["total"] = sum(parts.values())
    return parts


def build_qwen2_5_omni_shapes(out: Path, *, device: str = "cpu", dtype: str = "bfloat16",
                              depth: int | None = None, seed: int = 0) -> dict[str, Any]:
    """A Qwen2.5-Omni-7B-shaped model directory with random weights, made on ``device`` (a GPU
    initialises 10 B parameters in seconds) and saved as safetensors. Returns what was built;
    ``shapes.json`` in the directory says it too."""
    import time

    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    word_tokenizer(out, QWEN2_5_VOCAB, QWEN2_5_SPECIAL_IDS)
    write_preprocessor(out)
    config = qwen2_5_omni_7b_config(depth)
    torch.manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    with torch.device(device):
        model = Qwen2_5OmniForConditionalGeneration._from_config(config, dtype=torch_dtype)
    counts = parameter_counts(model)
    built_s = time.perf_counter() - t0
    model.save_pretrained(out)
    gen = torch.Generator().manual_seed(seed)
    enc_dim = config.token2wav_config.dit_config.enc_emb_dim
    speakers = {name: {"bos_token": bos, "cond": torch.randn(1, enc_dim, generator=gen) * 0.1,
                       "ref_mel": torch.randn(1, 300, 80, generator=gen) * 0.1}
                for name, bos in (("Chelsie", 151870), ("Ethan", 151871))}
    torch.save(speakers, out / "spk_dict.pt")
    info = {"model": "Qwen2.5-Omni-7B shapes, random weights", "depth": depth, "dtype": dtype,
            "parameters": counts, "built_s": round(built_s, 1), "saved_s": round(time.perf_counter() - t0 - built_s, 1)}
    (out / "shapes.json").write_text(json.dumps(info, indent=1))
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return info
