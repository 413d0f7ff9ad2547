"""How many threads the cascade's stages get: one each while a session listens on a two-core
machine, the configured count for a REST request (issue 47), and the LLM thread's count is its own."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from core.cascade import stage_threads
from core.cascade.llm import SmolLm
from core.cascade.stage_threads import live_stage_threads
from core.conversation.config import TurnDetection
from core.processors.cascade import CascadeBackend, CascadeOptions


@pytest.mark.parametrize(("cpus", "options", "expected"), [
    (2, {}, 1),
    (1, {}, 1),
    (8, {}, 2),
    (8, {"threads": 4}, 4),
    (2, {"live_threads": 2}, 2),
])
def test_live_stages_take_one_thread_on_two_cores(monkeypatch, cpus, options, expected):
    monkeypatch.setattr(stage_threads, "available_cpus", lambda: cpus)
    o = CascadeOptions(**options)
    assert live_stage_threads(o.live_threads, o.threads) == expected


def test_a_listening_session_replies_on_the_live_count_and_rest_on_threads(monkeypatch):
    monkeypatch.setattr(stage_threads, "available_cpus", lambda: 2)
    backend = CascadeBackend(CascadeOptions(threads=2))
    try:
        live = SimpleNamespace(config=SimpleNamespace(turn_detection=TurnDetection()))
        rest = SimpleNamespace(config=SimpleNamespace(turn_detection=None))
        assert backend._llm_threads(live) == 1
        assert backend._llm_threads(rest) == 2
    finally:
        backend.close()


def test_use_threads_sets_the_calling_threads_count_only():
    """The LLM thread switches per job; the rest of the process must keep its own count."""
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1  # left set on the other thread: differs from this one's
    seen = {}

    def llm_thread() -> None:
        SmolLm.use_threads(1)
        seen["one"] = torch.get_num_threads()
        SmolLm.use_threads(2)
        seen["two"] = torch.get_num_threads()
        SmolLm.use_threads(other)

    t = threading.Thread(target=llm_thread)
    t.start()
    t.join()
    assert seen == {"one": 1, "two": 2}
    assert torch.get_num_threads() == before
