"""The one play-head clock (``core/play_head.py``) the worker's estimate of what was heard and the
Live pacer keep: audio plays from when it is sent, back to back, and a gap is silence."""

from core.play_head import PlayHead


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_pieces_play_back_to_back_and_one_after_a_gap_starts_when_it_lands():
    clock = Clock()
    head = PlayHead(clock)
    assert head.lay(1.0) == 100.0 and head.lay(0.5) == 101.0 and head.ahead() == 1.5
    clock.t = 101.2
    assert abs(head.ahead() - 0.3) < 1e-9
    clock.t = 105.0  # the queue ran dry: the next piece starts now, not at 101.5
    assert head.ahead() == 0.0 and head.lay(0.2) == 105.0 and head.ends_at == 105.2


def test_a_stop_ends_what_was_laid_now():
    clock = Clock()
    head = PlayHead(clock)
    head.lay(3.0)
    clock.t = 101.0
    head.stop()
    assert head.ahead() == 0.0 and head.ends_at == 101.0
    assert head.lay(1.0) == 101.0  # what comes after plays from now
