"""OpenAI's Live dialect at the gateway: ``/v1/live/sessions``, on the same keys, queue, limits,
recording and traces as ``/v1/realtime`` (the worker translates the dialect, ``worker/live/``)."""
