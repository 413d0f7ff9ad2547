"""Two halves, one package (``tests/unit/test_layering.py`` holds the line between them):

- the top-level modules (``core/*.py``: config, protocol events, errors, ids, media, transport,
  telemetry, the session store) are what the gateway and the workers share; the gateway imports
  nothing else from ``core``;
- the packages are the worker's model side: ``conversation`` (the model-neutral conversation and
  its parts), ``processors`` (the model backends behind ``processors.base.Backend``) and
  ``cascade`` (the embedded cascade's ASR, LLM and TTS). No top-level module imports them.
"""
