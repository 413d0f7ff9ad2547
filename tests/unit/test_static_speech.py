"""Qwen2.5-Omni's speech on fixed tensors (issue 73), on the tiny model: the Talker on a static KV
cache (``core/processors/talker_static.py``) writes the codec frames transformers' ``generate``
writes (greedy and sampled with one seed, in several pieces through one reused cache), and the
vocoder's solve (``vocoder_static.py``) gives Token2Wav's waveform for one seed; a first piece's
early audio and its rest (``first_audio.py``) are the piece vocoded whole. The whole spoken
reply: ``tests/e2e/test_backend_qwen_omni.py``. Their CUDA graphs replay these same steps; they
are proved on a GPU."""

from __future__ import annotations

import pytest
import torch

import numpy as np

from core.processors.first_audio import CodesAt, FirstAudio
from core.processors.talker_static import MIN_BUCKET, StaticTalker, bucket
from core.processors.vocoder_static import StaticVocoder
from tests.support.tiny_omni import build_qwen2_5_omni


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_qwen2_5_omni(tmp_path_factory.mktemp("talker_static") / "model")


@pytest.fixture(scope="module")
def model(tiny_path):
    from transformers import Qwen2_5OmniForConditionalGeneration

    return Qwen2_5OmniForConditionalGeneration.from_pretrained(str(tiny_path), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def talker(model):
    return model.talker


def _inputs(talker, context: int, reply: int, seed: int) -> dict:
    """A piece's Talker inputs as the backend builds them: the context's ids masked, then the codec
    pad and start; the Thinker's states as embeddings; the reply's states to read frame by frame."""
    gen = torch.Generator().manual_seed(seed)
    e = talker.config.embedding_size
    ids = torch.randint(0, 300, (1, context + 2), generator=gen)
    talker_ids = torch.cat([torch.full((1, context), talker.codec_mask_token),
                            torch.tensor([[talker.codec_pad_token, talker.codec_bos_token]])], dim=1)
    return {"talker_ids": talker_ids, "input_text_ids": ids,
            "inputs_embeds": torch.randn(1, context + 2, e, generator=gen),
            "thinker_reply_part": torch.randn(1, reply, e, generator=gen)}


def _sampling(sample: bool) -> dict:
    if not sample:
        return {"do_sample": False, "repetition_penalty": 1.05}
    return {"do_sample": True, "top_k": 40, "top_p": 0.8, "temperature": 0.9, "repetition_penalty": 1.05}


def _eager(talker, x: dict, max_new: int, sample: bool, suppress=(1, 2, 3), **more) -> torch.Tensor:
    eos = [talker.codec_pad_token, talker.codec_eos_token]
    n = x["talker_ids"].shape[1]
    out = talker.generate(input_ids=x["talker_ids"], input_text_ids=x["input_text_ids"],
                          inputs_embeds=x["inputs_embeds"].clone(), thinker_reply_part=x["thinker_reply_part"],
                          attention_mask=torch.ones((1, n), dtype=torch.long), suppress_tokens=list(suppress),
                          eos_token_id=eos, pad_token_id=talker.codec_pad_token, max_new_tokens=max_new,
                          **_sampling(sample), **more)
    return out[:, n:]


def _static(decoder: StaticTalker, x: dict, max_new: int, sample: bool, suppress=(1, 2, 3), **more) -> torch.Tensor:
    t = decoder.talker
    return decoder.generate(talker_ids=x["talker_ids"], input_text_ids=x["input_text_ids"],
                            inputs_embeds=x["inputs_embeds"].clone(), thinker_reply_part=x["thinker_reply_part"],
                            suppress=list(suppress), eos=[t.codec_pad_token, t.codec_eos_token], max_new_tokens=max_new,
                            stop=lambda: False, **_sampling(sample), **more)


def test_cache_sizes_are_buckets():
    assert bucket(1) == MIN_BUCKET and bucket(MIN_BUCKET) == MIN_BUCKET
    assert bucket(MIN_BUCKET + 1) == 2 * MIN_BUCKET and bucket(3000) == 4096


@torch.inference_mode()
def test_greedy_frames_are_generates_through_one_reused_cache(talker):
    """Pieces of different lengths, in and across cache sizes, one after another on one decoder:
    each piece's frames are the ones generate writes (a cache left over from the piece before
    would change them)."""
    decoder = StaticTalker(talker, graphs=False)
    for context, reply, max_new, seed in ((12, 5, 40, 0), (30, 9, 60, 1), (230, 4, 50, 2), (12, 5, 40, 3)):
        x = _inputs(talker, context, reply, seed)
        want = _eager(talker, x, max_new, sample=False)
        got = _static(decoder, x, max_new, sample=False)
        assert got.tolist() == want.tolist(), f"piece with context {context}"
    assert len(decoder._slots) == 2  # 256 and 512 tokens


@torch.inference_mode()
def test_sampled_frames_are_generates_with_one_seed(talker):
    decoder = StaticTalker(talker, graphs=False)
    x = _inputs(talker, 20, 6, seed=5)
    torch.manual_seed(7)
    want = _eager(talker, x, 50, sample=True)
    torch.manual_seed(7)
    got = _static(decoder, x, 50, sample=True)
    assert got.tolist() == want.tolist()


@torch.inference_mode()
def test_a_stop_ends_the_piece_at_once(talker):
    decoder = StaticTalker(talker, graphs=False)
    x = _inputs(talker, 12, 5, seed=0)
    t = talker
    steps = []
    codes = decoder.generate(talker_ids=x["talker_ids"], input_text_ids=x["input_text_ids"],
                             inputs_embeds=x["inputs_embeds"].clone(), thinker_reply_part=x["thinker_reply_part"],
                             suppress=[t.codec_pad_token, t.codec_eos_token],  # it never ends by itself
                             eos=[t.codec_pad_token, t.codec_eos_token], max_new_tokens=100,
                             stop=lambda: steps.append(1) or len(steps) >= 3)
    assert codes.shape[1] == 3



@torch.inference_mode()
def test_the_vocoders_solve_is_token2wavs(model, tiny_path):
    t2w = model.token2wav.float()
    voice = torch.load(tiny_path / "spk_dict.pt")["Chelsie"]
    vocoder = StaticVocoder(t2w, graphs=False)
    for length, steps in ((24, 4), (37, 10)):
        codes = torch.randint(0, 60, (1, length), generator=torch.Generator().manual_seed(length))
        torch.manual_seed(3)
        want = t2w(codes, conditioning=voice["cond"], reference_mel=voice["ref_mel"], num_steps=steps)
        torch.manual_seed(3)
        got = vocoder(codes, conditioning=voice["cond"], reference_mel=voice["ref_mel"], num_steps=steps)
        assert got.shape == want.shape and want.abs().max() > 0
        assert torch.equal(got, want), f"{length} codes, {steps} steps"


def test_a_vocoder_solve_that_cannot_be_captured_runs_uncaptured_and_is_not_tried_again(monkeypatch):
    """On a GPU a shape whose capture fails runs the eager solve; capturing it again on every
    piece would pay the failure each time."""
    import types

    from core.processors import vocoder_static

    tries = []

    def cannot_capture(*args, **kwargs):
        tries.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")  # a CUDA capture's refusal

    monkeypatch.setattr(vocoder_static, "_Solve", cannot_capture)
    vocoder = StaticVocoder(types.SimpleNamespace(code2wav_dit_model=object()), graphs=True)
    shape = (torch.zeros(1, 48, 80), torch.zeros(1, 24, dtype=torch.long), torch.zeros(1, 192), torch.zeros(1, 30, 80))
    assert vocoder._captured(*shape, num_steps=10) is None
    assert vocoder._captured(*shape, num_steps=10) is None
    assert len(tries) == 1


@torch.inference_mode()
def test_the_talker_hands_its_first_frames_over_while_it_writes_on(talker):
    """The first audio's hook, on both paths: called once, with exactly the first k frames of the
    piece (the frames the piece then goes on from), before the later frames exist; not called for
    a piece that ends first."""
    decoder = StaticTalker(talker, graphs=False)
    eos = [talker.codec_pad_token, talker.codec_eos_token]
    x = _inputs(talker, 12, 5, seed=0)
    passes = []  # the Talker's forward passes: one per frame, the prompt's giving the first
    hook = talker.model.register_forward_pre_hook(lambda *_: passes.append(1))
    seen: dict[str, list] = {"static": [], "eager": []}

    def on(path: str):
        return lambda frames: seen[path].append((frames, len(passes)))

    try:
        passes.clear()
        static = _static(decoder, x, 40, sample=False, suppress=eos, at=(24, on("static")))  # never ends by itself
        passes.clear()
        eager = _eager(talker, x, 40, sample=False, suppress=eos, streamer=CodesAt(24, eos, on("eager")))
        assert len(passes) == 40
    finally:
        hook.remove()
    assert static.tolist() == eager.tolist() and static.shape[1] == 40
    for path, calls in seen.items():
        (frames, passes_then), = calls
        assert frames.tolist() == static[:, :24].tolist(), path
        assert passes_then == 24, f"{path}: handed over after {passes_then} of the Talker's 40 passes, not 24"
    short: list = []
    assert _static(decoder, x, 20, sample=False, suppress=eos, at=(24, short.append)).shape[1] == 20 and not short
    ended = CodesAt(3, eos, short.append)
    for value in (x["talker_ids"], torch.tensor([5]), torch.tensor([eos[1]]), torch.tensor([6])):
        ended.put(value)  # the prompt, a frame, the end, one frame more (a batch's padding)
    assert not short, "a piece that ended before k frames is spoken whole"


@torch.inference_mode()
@pytest.mark.parametrize("blocks, length", [(1, 30), (1, 61), (2, 61)])
def test_the_first_audio_and_its_rest_are_the_piece_vocoded_whole(model, tiny_path, blocks, length):
    """The first ``blocks`` DiT blocks' audio out of a solve of those blocks and the one ahead,
    then the rest solved from the block before it: with the piece's one noise, the two parts
    joined are the piece's mel solved and vocoded whole (the blocks each part lets out had every
    code their attention reads), to float rounding, and as long."""
    t2w = model.token2wav.float()
    voice = torch.load(tiny_path / "spk_dict.pt")["Chelsie"]
    vocoder = StaticVocoder(t2w, graphs=False)
    dit = t2w.config.dit_config
    codes = torch.randint(0, 60, (1, length), generator=torch.Generator().manual_seed(length))
    early: list[np.ndarray] = []
    first = FirstAudio(vocoder, dit, voice["cond"], voice["ref_mel"], 4, blocks, 100, early.append)
    assert first.at == (blocks + 1) * 12  # the tiny DiT: 24 mel frames (12 codes) a block, one layer looking ahead
    first.early(codes[:, :first.at])
    rest = first.rest(codes)
    whole = vocoder.wav(vocoder.mel(codes, voice["cond"], voice["ref_mel"], 4, noise=first.noise[:, :length * 2]))
    whole = whole.reshape(-1).numpy()
    assert len(early) == 1 and len(early[0]) == blocks * 12 * 480, "the first blocks' audio, at 24 kHz"
    joined = np.concatenate([early[0], rest])
    assert joined.shape == whole.shape and np.abs(whole).max() > 0
    assert np.abs(joined - whole).max() <= 1e-5 * np.abs(whole).max()
