"""WebRTC calls (``POST /v1/realtime/calls``): the browser's way into a realtime session.

A call ends at the gateway. The offer is answered at once; the call then waits in the FIFO queue
like any session and reaches its worker through the same ``RealtimeProxy`` as a WebSocket, over a
``WebRTCChannel``: JSON events ride the ``oai-events`` data channel, the microphone's Opus track
becomes binary PCM frames for the worker (``core/audio_frames.py``), and the reply's audio, which
the worker sends back as frames, leaves on a paced outbound track instead of as
``response.output_audio.delta`` events, so the gateway knows what was heard
(``output_audio_buffer.*``, truncation on barge-in).

- ``routes.py``: the HTTP endpoints (offer, hangup), auth and the answer's errors;
- ``sdp.py``: what an offer must hold before any peer connection is made;
- ``call.py``: one ``RTCPeerConnection`` and its tracks, from answer to close;
- ``registry.py``: the live calls and the task that runs each one's proxy;
- ``channel.py``: ``WebRTCChannel``, the call as an ``EventChannel``;
- ``playback.py``: what the outbound track holds and played; ``output_audio_buffer.*`` and barge-in;
- ``tracks.py``: media in (Opus -> PCM16 appends, camera -> JPEG frames) and out (paced audio).
"""
