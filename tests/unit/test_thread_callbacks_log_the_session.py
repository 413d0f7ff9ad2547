"""A verdict reached from a model thread's callback logs its session's ids (issue 47, thirteenth
stop: the overlap judge's interruptions, decided after a glance on the glance thread, were logged
without ``session=``, so an operator following one session could not find them)."""

from __future__ import annotations

import logging
import time

from core import logctx
from tests.unit.test_barge_in import feed, replying
from tests.support.scripted_backend import quiet, tone


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.addFilter(logctx.ContextFilter())
        self.lines: list[tuple[str | None, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.session_id, record.getMessage()))


async def test_an_interruption_judged_after_a_glance_is_logged_with_the_session():
    lines = Lines()
    judge = logging.getLogger("core.conversation.vad_turns")
    judge.addHandler(lines)
    old_level = judge.level
    judge.setLevel(logging.INFO)
    logctx.bind(session="sess_logged", worker="w_test")
    try:
        def slow_glance(clip) -> str:  # done on the glance thread after the callback is attached
            time.sleep(0.05)
            return "wait what about dogs"

        backend, conv, col = await replying(glance=slow_glance, transcript="what about dogs", step_s=0.15)
        await feed(conv, tone(0.9) + quiet(0.9))
        await col.wait_for("response_started", count=2)
        verdicts = [(session, text) for session, text in lines.lines if text.startswith("speech over the reply")]
        assert verdicts and all(session == "sess_logged" for session, _ in verdicts), lines.lines
        await conv.close()
        backend.close()
    finally:
        judge.removeHandler(lines)
        judge.setLevel(old_level)
