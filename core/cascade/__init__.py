"""Components of the embedded CPU pipeline: VAD, ASR, LLM, text chunker, TTS, frame describer."""
