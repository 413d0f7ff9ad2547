"""OpenAI's full-duplex Live dialect (``/v1/live/sessions``), spoken by the worker over its Realtime session.

``channel.LiveChannel`` sits between the client's channel and a ``RealtimeSession``: Live client
events become Realtime client events, the session's Realtime server events become Live server
events, and the reply's audio goes out at real-time pace (``pacer.py``), as Live streams it.
``core/live_events.py`` holds the Live shapes: parsing client events, building server events.
"""
