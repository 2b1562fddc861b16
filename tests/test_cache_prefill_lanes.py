"""The verdict on whether a slot-cache server's slots prefill side by side
(gptgate/cache_prefill_lanes.py): calls that kept their hits, beside a cold prefill."""

from __future__ import annotations

from gptgate.cache_prefill_lanes import PrefillLanes


def _miss_beside(lanes: PrefillLanes, at: float, hit_s: float, *, before: bool) -> None:
    """A 6 s cold call admitted at ``at``; a hit admitted 0.5 s later that took ``hit_s``,
    ended before the miss (``before``) or after it."""
    if before:
        lanes.hit_released("b", at + 0.5, at + 0.5 + hit_s)
        lanes.miss_released("b", at, at + 6.0)
    else:
        lanes.miss_released("b", at, at + 6.0)
        lanes.hit_released("b", at + 0.5, at + 0.5 + hit_s)


def test_two_misses_with_hits_in_their_usual_time_beside_them_say_side_by_side() -> None:
    lanes = PrefillLanes()
    _miss_beside(lanes, 0.0, 0.5, before=True)
    assert not lanes.side_by_side("b")  # one vote is not enough
    _miss_beside(lanes, 10.0, 0.5, before=True)
    assert lanes.side_by_side("b")
    assert not lanes.side_by_side("other")


def test_a_hit_that_waited_for_the_prefill_says_shared_at_once() -> None:
    lanes = PrefillLanes()
    _miss_beside(lanes, 0.0, 0.5, before=True)
    _miss_beside(lanes, 10.0, 0.5, before=True)
    _miss_beside(lanes, 20.0, 5.8, before=False)  # ended after the miss: read then
    assert not lanes.side_by_side("b")


def test_hits_of_the_same_burst_or_late_in_the_prefill_or_mid_way_say_nothing() -> None:
    lanes = PrefillLanes()
    for at in (0.0, 10.0, 20.0):
        lanes.hit_released("b", at, at + 0.5)  # admitted with the miss: it may go first
        lanes.hit_released("b", at + 4.0, at + 4.5)  # admitted late in its prefill
        lanes.hit_released("b", at + 0.5, at + 0.5 + 2.0)  # neither fast nor slow
        lanes.miss_released("b", at, at + 6.0)
    assert not lanes.side_by_side("b")
    _miss_beside(lanes, 30.0, 0.5, before=True)
    assert not lanes.side_by_side("b")  # a first vote only


def test_a_hit_before_the_miss_was_admitted_is_not_beside_it() -> None:
    lanes = PrefillLanes()
    for at in (0.0, 10.0):
        lanes.hit_released("b", at - 0.2, at + 0.3)
        lanes.miss_released("b", at, at + 6.0)
    assert not lanes.side_by_side("b")
