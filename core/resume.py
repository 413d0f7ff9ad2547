"""How a gateway and its worker speak of a resumable session (issue 72): close codes both read.

The worker's side is ``worker/reattachable.py``, the gateway's ``gateway/realtime/resume.py``.
"""

CLOSE_CLIENT_LOST = 4100  # gateway -> worker: my client dropped; hold the session for its token
CLOSE_TAKEN_OVER = 4009  # worker -> gateway: a newer connection brought this session's token
CLOSE_NO_SESSION = 4404  # worker -> gateway: no held session of that id and token (ended, or its grace passed)
