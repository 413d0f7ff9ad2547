"""TEST DOUBLE config for ``modeling_minicpmo_double.py`` (see there)."""

from transformers import PretrainedConfig


class MiniCPMODoubleConfig(PretrainedConfig):
    model_type = "minicpmo_double"

    def __init__(self, init_vision: bool = True, init_audio: bool = True, init_tts: bool = True, **kwargs) -> None:
        self.init_vision = init_vision
        self.init_audio = init_audio
        self.init_tts = init_tts
        super().__init__(**kwargs)
