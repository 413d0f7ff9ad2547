"""Tiny random-weight omni models for tests, built in a temp directory with no hub access.

They have the real architectures (``transformers`` classes, a real processor: a byte-level BPE
tokenizer trained here on a few sentences, Whisper's feature extractor, Qwen2-VL's image
processor, a Qwen-style chat template), laid out as a real model directory is:

    config.json  model.safetensors  generation_config.json
    tokenizer.json  tokenizer_config.json  chat_template.jinja
    preprocessor_config.json   (feature extractor + image processor, as Qwen ships it)
    spk_dict.pt                (Qwen2.5-Omni voices: bos_token, cond, ref_mel per speaker)

Hidden sizes are 32, one or two layers: loading takes about a second and a reply a few.
The text they produce is random tokens: tests check the streaming, not the words.
"""

from __future__ import annotations

import json
from pathlib import Path

from devtools.omni_models import EXTRA_SPECIAL, write_preprocessor

CORPUS = [
    "Hello there, how are you today? I am fine, thanks. The capital of France is Paris.",
    "What is the weather like? It is sunny and warm. Let us go for a walk in the park.",
    "One, two, three. Numbers and words make sentences; sentences make answers!",
]
SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>",
    "<|IMAGE|>", "<|VIDEO|>", "<|vision_bos|>", "<|vision_eos|>",
    "<tts_pad>", "<tts_text_bos>", "<tts_text_eos>", "<tts_text_bos_single>",
    "system", "user", "assistant",  # one token each: Qwen3-Omni finds turns by these ids
]
def _tokenizer(out: Path):
    """A byte-level BPE tokenizer with Qwen's special tokens, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens=EXTRA_SPECIAL,
    )
    fast.save_pretrained(out)
    return fast, {t: tok.token_to_id(t) for t in SPECIAL}


def build_qwen2_5_omni(out: Path, seed: int = 0, vocoder_codes: int | None = None) -> Path:
    """``vocoder_codes``: a vocoder codebook smaller than the Talker's vocabulary, as in the real
    model (8193 codes against 8448 ids); by default the two are the same size."""
    import torch
    from transformers import Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    tok, ids = _tokenizer(out)
    write_preprocessor(out)
    vocab = len(tok)
    rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [1, 1, 2]}
    media = {"audio_token_index": ids["<|AUDIO|>"], "image_token_index": ids["<|IMAGE|>"],
                 "video_token_index": ids["<|VIDEO|>"], "audio_start_token_id": ids["<|audio_bos|>"],
                 "audio_end_token_id": ids["<|audio_eos|>"], "vision_start_token_id": ids["<|vision_bos|>"],
                 "vision_end_token_id": ids["<|vision_eos|>"]}
    thinker = dict(
        audio_config={"d_model": 32, "encoder_attention_heads": 4, "encoder_ffn_dim": 32, "encoder_layers": 1,
                          "num_mel_bins": 128, "max_source_positions": 1500, "n_window": 100, "output_dim": 32},
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 4, "patch_size": 14,
                           "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 32,
                           "fullatt_block_indexes": [0], "window_size": 112},
        text_config={"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 8192,
                         "rope_parameters": rope, "tie_word_embeddings": False},
        user_token_id=ids["<|im_start|>"], **media,
    )
    codec = 64  # codec vocabulary; its last four ids are pad, bos, eos, mask
    talker = dict(
        vocab_size=codec, embedding_size=32, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=8192,
        rope_parameters=rope, tts_text_start_token_id=ids["<tts_text_bos>"],
        tts_text_end_token_id=ids["<tts_text_eos>"], tts_text_pad_token_id=ids["<tts_pad>"],
        tts_codec_pad_token_id=codec - 4, tts_codec_start_token_id=codec - 3, tts_codec_end_token_id=codec - 2,
        tts_codec_mask_token_id=codec - 1, **media,
    )
    token2wav = {
        "dit_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "ff_mult": 1, "emb_dim": 16,
                        "head_dim": 16, "num_embeds": vocoder_codes or codec, "mel_dim": 80, "enc_emb_dim": 16, "enc_dim": 16,
                        "enc_channels": [16, 16, 16, 16, 48], "enc_attention_channels": 8, "enc_se_channels": 8,
                        "look_ahead_layers": [0], "look_backward_layers": [0], "block_size": 24, "repeats": 2},
        "bigvgan_config": {"mel_dim": 80, "upsample_initial_channel": 64, "resblock_kernel_sizes": [3],
                            "resblock_dilation_sizes": [[1, 3, 5]], "upsample_rates": [5, 3, 2, 2, 2, 2],
                            "upsample_kernel_sizes": [11, 7, 4, 4, 4, 4]},
    }
    config = Qwen2_5OmniConfig(thinker_config=thinker, talker_config=talker, token2wav_config=token2wav,
                               enable_audio_output=True)
    torch.manual_seed(seed)
    model = Qwen2_5OmniForConditionalGeneration(config)
    with torch.no_grad():  # random BigVGAN layers shrink the signal to ~1e-8: make it audible
        model.token2wav.code2wav_bigvgan_model.conv_post.weight.mul_(1e6)
    model.save_pretrained(out)
    gen = torch.Generator().manual_seed(seed)
    speakers = {
        name: {"bos_token": ids["<tts_text_bos_single>"], "cond": torch.randn(1, 16, generator=gen),
               "ref_mel": torch.randn(1, 30, 80, generator=gen)}
        for name in ("Chelsie", "Ethan")
    }
    torch.save(speakers, out / "spk_dict.pt")
    return out


def build_qwen3_omni(out: Path, seed: int = 0) -> Path:
    """Qwen3-Omni (MoE Thinker, MoE Talker with a code predictor, Code2Wav), as small as it goes.

    The Talker's codec vocabulary is 1024 + 64: ``generate`` suppresses its top 1024 ids (the
    special ones) and samples codes below, so the codebook is 64.
    """
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    tok, ids = _tokenizer(out)
    write_preprocessor(out, patch_size=16)
    vocab = len(tok)
    rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [1, 1, 2], "interleaved": True}
    media = {"audio_token_id": ids["<|AUDIO|>"], "image_token_id": ids["<|IMAGE|>"], "video_token_id": ids["<|VIDEO|>"],
                 "audio_start_token_id": ids["<|audio_bos|>"], "vision_start_token_id": ids["<|vision_bos|>"]}
    moe = {"moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1}
    thinker = dict(
        audio_config={"d_model": 32, "encoder_attention_heads": 4, "encoder_ffn_dim": 32, "encoder_layers": 1,
                          "num_mel_bins": 128, "max_source_positions": 1500, "downsample_hidden_size": 32, "n_window": 50,
                          "output_dim": 32, "n_window_infer": 100},
        vision_config={"depth": 1, "hidden_size": 32, "out_hidden_size": 32, "intermediate_size": 24, "num_heads": 4,
                           "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "deepstack_visual_indexes": [0]},
        text_config=dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=8192,
                         rope_parameters=rope, tie_word_embeddings=False, **moe),
        audio_end_token_id=ids["<|audio_eos|>"], vision_end_token_id=ids["<|vision_eos|>"],
        user_token_id=ids["user"], **media,
    )
    codebook, groups, special = 64, 4, 1024 + 32
    talker = dict(
        text_config=dict(vocab_size=1024 + codebook, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=8192,
                         rope_parameters=rope, shared_expert_intermediate_size=16, **moe),
        code_predictor_config={"vocab_size": codebook, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
                                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
                                   "num_code_groups": groups, "max_position_embeddings": 64},
        num_code_groups=groups, thinker_hidden_size=32, accept_hidden_layer=1, spatial_merge_size=2,
        codec_pad_id=special, codec_bos_id=special + 1, codec_eos_token_id=special + 2,
        codec_nothink_id=special + 3, codec_think_bos_id=special + 4, codec_think_eos_id=special + 5,
        speaker_id={"ethan": special + 6, "chelsie": special + 7}, **media,
    )
    code2wav = {"codebook_size": codebook, "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
                    "intermediate_size": 32, "num_hidden_layers": 1, "num_quantizers": groups, "decoder_dim": 64,
                    "sliding_window": 72, "max_position_embeddings": 8000}
    config = Qwen3OmniMoeConfig(
        thinker_config=thinker, talker_config=talker, code2wav_config=code2wav, enable_audio_output=True,
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"], tts_pad_token_id=ids["<tts_pad>"],
        tts_bos_token_id=ids["<tts_text_bos>"], tts_eos_token_id=ids["<tts_text_eos>"],
        system_token_id=ids["system"], user_token_id=ids["user"], assistant_token_id=ids["assistant"],
    )
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(config)
    model.save_pretrained(out)
    return out
