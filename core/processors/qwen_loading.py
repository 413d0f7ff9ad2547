"""Loading a Qwen-Omni model directory: its processor (with or without torchvision) and the Talker
ids that must never be sampled. Kept apart from the backend: what depends on the files and on
``transformers``' quirks, not on serving."""

from __future__ import annotations

import json
from pathlib import Path


def codec_suppressed(talker_vocab: int, vocoder_codes: int, bos: int, stops: tuple[int, ...]) -> list[int]:
    """Qwen2.5 Talker ids that must never be sampled: its start token, and every id the vocoder
    has no embedding for except the stop tokens. ``generate`` suppresses only the start token; a
    trained Talker never writes the others, but one that does (random weights, a fine-tune gone
    wrong) would index past the vocoder's codebook, which on a GPU is a device-side assert that
    poisons the worker's CUDA context for good."""
    return sorted({bos} | {i for i in range(vocoder_codes, talker_vocab) if i not in stops})


def as_list(value) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [int(value)]


def load_processor(path: Path, proc_cls):
    """The model's processor. Without torchvision, ``transformers`` cannot build a video processor,
    and the Qwen processors refuse to exist without one; then build it from its parts with no video
    support (camera frames go in as images instead)."""
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        return proc_cls.from_pretrained(str(path), local_files_only=True)

    class _NoVideoProcessor(proc_cls):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    _NoVideoProcessor.__name__ = proc_cls.__name__
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    template = None
    for name in ("chat_template.jinja", "chat_template.json"):
        file = path / name
        if file.is_file():
            text = file.read_text(encoding="utf-8")
            template = json.loads(text)["chat_template"] if name.endswith(".json") else text
            break
    return _NoVideoProcessor(
        image_processor=AutoImageProcessor.from_pretrained(str(path), local_files_only=True),
        video_processor=None,
        feature_extractor=AutoFeatureExtractor.from_pretrained(str(path), local_files_only=True),
        tokenizer=tokenizer,
        chat_template=template or getattr(tokenizer, "chat_template", None),
    )
