"""An inconclusive slow-start exit is measured again at the doubled level (issue 31, round 18;
gptgate/limits/revisit.py), scripted: every call fed by hand, the limit checked exactly."""

from __future__ import annotations

import math

import pytest

from gptgate.limits import LLMLimit
from gptgate.limits.revisit import Reading, inconclusive, pooled, reading, scaled_centre
from tests.test_limits_llm import Script

NOISE = 0.5  # each window's calls alternate latency·exp(±NOISE): per-call var of ln R ≈ 1/3


def noisy_window(s: Script, latency: float) -> int:
    """One window of four calls (``window_samples`` 4, no lengthening for noise) whose
    latencies alternate around ``latency``: its mean ``ln R`` is exact, its variance not 0."""
    for sign in (1, -1, 1, -1):
        s.window(latency * math.exp(sign * NOISE), n=1)
    return s.limit.limit


def exit_on_a_noisy_low_reading() -> Script:
    """Slow start 4 → 8 on a server that scales to 8 (3 s calls), the window at 8 reading
    latency ×1.7 by chance: ``e`` = 0.23 ± 0.59, under the exit (0.3) by far less than two
    standard errors. The centre lands at the linear-scaling target 4·2/1.7 = 4.7."""
    s = Script(LLMLimit(initial=4, window_samples=4, window_error=0.0))
    assert noisy_window(s, 3.0) == 8
    noisy_window(s, 3.0 * 1.7)
    lim = s.limit
    assert not lim.in_slow_start and lim.elasticity == pytest.approx(1 - math.log2(1.7))
    assert lim.center == pytest.approx(4 * 2 / 1.7)
    assert lim.limit == 4  # the low probe first
    assert noisy_window(s, 3.0) == 5
    # both probes measured at the centre: half the way to the doubled level (in ln N) next,
    # √(4.7·8) = 6.1
    assert noisy_window(s, 3.0) == 6
    return s


def test_an_inconclusive_exit_that_scales_when_measured_again_moves_the_centre_up() -> None:
    s = exit_on_a_noisy_low_reading()
    noisy_window(s, 3.0)  # at 6 the calls take 3 s, as at 4 and 5: goodput scaled
    lim = s.limit
    # the revisit alone reads e = 1 over 4.5 → 6; pooled with the exit's 0.23 ± 0.59: 0.38
    assert lim.elasticity == pytest.approx(0.38, abs=0.01)
    # the linear-scaling equivalent of what 6 bought over the centre's windows: 6 itself
    assert lim.center == pytest.approx(6.0)
    assert lim.limit == 6  # probing 6 and 7 from here
    assert lim.events["revisit"] == lim.events["revisit_up"] == 1


def test_an_inconclusive_exit_confirmed_when_measured_again_keeps_its_centre() -> None:
    s = exit_on_a_noisy_low_reading()
    noisy_window(s, 3.0 * 6 / math.sqrt(20))  # the server stops at the centre: nothing bought
    lim = s.limit
    assert lim.elasticity < 0.3
    assert lim.center == pytest.approx(4 * 2 / 1.7)
    assert lim.limit == 4  # back to probing, low side first
    assert lim.events["revisit"] == 1 and "revisit_up" not in lim.events
    # once: the next probes stay around the centre
    assert [noisy_window(s, 3.0) for _ in range(3)] == [5, 4, 5]


def test_a_conclusive_exit_is_final() -> None:
    lim = LLMLimit(initial=4, window_samples=4, window_error=0.0)
    s = Script(lim)
    assert s.window(3.0) == 8
    s.window(3.0 * 1.9)  # noise-free: e = 0.07 with no standard error, beyond any doubt
    assert not lim.in_slow_start
    assert max(s.window(3.0) for _ in range(6)) < 8
    assert "revisit" not in lim.events


def test_the_readings_arithmetic() -> None:
    r = reading(math.log(4), 0.0, 4, math.log(8), math.log(1.2), 4, 1 / 3)
    assert r is not None
    assert r.e == pytest.approx(math.log(1.2) / math.log(2))
    assert r.se == pytest.approx(math.sqrt(1 / 3 * 0.5) / math.log(2))
    assert reading(math.log(4), 0.0, 4, math.log(4.2), 0.0, 4, 1.0) is None  # too small a step
    assert inconclusive(Reading(0.26, 0.41), exit_elasticity=0.3, z=2.0)  # draw 51
    assert not inconclusive(Reading(-0.85, 0.32), exit_elasticity=0.3, z=2.0)  # draw 1037
    assert not inconclusive(Reading(0.4, 0.41), exit_elasticity=0.3, z=2.0)  # not an exit
    both = pooled(Reading(0.0, 1.0), Reading(1.0, 1.0))
    assert both.e == pytest.approx(0.5) and both.se == pytest.approx(math.sqrt(0.5))
    assert pooled(Reading(0.2, 0.1), None) == Reading(0.2, 0.1)
    assert scaled_centre(math.log(4), 0.0, math.log(8), math.log(1.5)) == pytest.approx(6.0)
    assert scaled_centre(math.log(4), 0.0, math.log(8), math.log(3.0)) == pytest.approx(8.0)
    assert scaled_centre(math.log(4), 0.0, math.log(8), -1.0) == pytest.approx(4.0)
