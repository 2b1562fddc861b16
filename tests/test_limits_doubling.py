"""Slow start's doubling into a server queue (gptgate/limits/doubling.py), on numbers, and
LLMLimit ending slow start on it mid-window (``doubling_z=2``; off by default, see
docs/adaptive.md, "At a plateau's edge")."""

from __future__ import annotations

import math

import pytest

from gptgate.limits import LLMLimit, Sample
from gptgate.limits.doubling import doubling_queued, served_after_doubling

LN2 = math.log(2.0)


def test_a_doubling_whose_latency_doubled_bought_nothing() -> None:
    # N ×2 and R ×2: goodput unchanged (e = 0), far beyond two standard errors of 0.05
    assert doubling_queued(LN2, LN2, 0.05, exit_elasticity=0.3, z=2.0)
    # R ×1.4 for N ×2: e = 0.51, still worth doubling
    assert not doubling_queued(LN2, math.log(1.4), 0.05, exit_elasticity=0.3, z=2.0)


def test_on_a_few_noisy_calls_only_an_excess_beyond_z_standard_errors_counts() -> None:
    # e = 0 in the mean, but the threshold (0.7·ln 2 = 0.485) is within 2 SE of it
    assert not doubling_queued(LN2, LN2, 0.11, exit_elasticity=0.3, z=2.0)
    assert doubling_queued(LN2, LN2, 0.09, exit_elasticity=0.3, z=2.0)


def test_no_growth_in_flight_is_no_doubling() -> None:
    assert not doubling_queued(0.0, 1.0, 0.0, exit_elasticity=0.3, z=2.0)
    assert not doubling_queued(-0.1, 1.0, 0.0, exit_elasticity=0.3, z=2.0)


def test_after_the_doubling_the_centre_is_the_calls_served_plus_the_queue_tolerance() -> None:
    def centre(excess: float) -> float:
        return served_after_doubling(16, 8, excess, queue_tolerance=0.1, probe=0.08)

    # 16 in flight at twice the latency of 8: by Little's law 8 are served, the rest wait
    assert centre(LN2) == pytest.approx(8.8)
    # a latency that did not grow: every call is served, but no more than the level in force
    assert centre(0.0) == pytest.approx(16.0)
    # a latency ×4 on the first (short) answers reads as 4 served: but 8 were served before
    # the doubling, so probing's low side stays on 8 (8 / 0.92)
    assert centre(math.log(4.0)) == pytest.approx(8 / 0.92)
    assert round(centre(math.log(4.0)) * 0.92) == 8


def _calls(lim: LLMLimit, t: float, latencies: list[float], inflight: int) -> float:
    """Calls admitted together at ``t``, completing one by one; returns the last completion."""
    for latency in latencies:
        lim.update(
            Sample(start=t, latency_s=latency, inflight=inflight, kind="ok", output_tokens=100),
            t + latency,
        )
    return t + max(latencies) + 1_000.0


def _noisy(latency: float, n: int) -> list[float]:
    """``n`` calls of about ``latency``, ±3% alternately (a per-call spread to measure)."""
    return [latency * math.exp(0.03 * (-1) ** i) for i in range(n)]


def test_slow_start_ends_on_the_first_calls_of_a_doubling_into_a_queue() -> None:
    # a server of 8 slots and a queue: 4 → 8 doubles goodput at the same latency, 8 → 16
    # doubles the latency (every extra call waits a service time). The doubling's window is
    # 16 calls; by then 16 more would have been admitted into the queue. Its first four calls
    # already show it: slow start ends there, at the 8 served (× 1.1)
    lim = LLMLimit(initial=4, window_samples=16, doubling_z=2.0)
    t = _calls(lim, 0.0, _noisy(1.0, 4), 4)
    assert lim.limit == 8
    t = _calls(lim, t, _noisy(1.0, 8), 8)
    assert lim.limit == 16 and lim.in_slow_start
    assert lim._window_size() == 16
    fed = 0
    for latency in _noisy(2.0, 16):
        lim.update(
            Sample(start=t, latency_s=latency, inflight=16, kind="ok", output_tokens=100),
            t + latency,
        )
        fed += 1
        if not lim.in_slow_start:
            break
    assert fed == 4  # window_samples // 4 calls: the first chance
    assert lim.events["slow_start_exit"] == 1
    assert lim.center == pytest.approx(8.8, rel=0.03)
    assert lim.limit == round(lim.center * 0.92)  # probing starts on its low side
    assert lim.elasticity == pytest.approx(0.0, abs=0.05)


def test_by_default_slow_start_waits_for_the_window() -> None:
    lim = LLMLimit(initial=4, window_samples=16)
    t = _calls(lim, 0.0, _noisy(1.0, 4), 4)
    t = _calls(lim, t, _noisy(1.0, 8), 8)
    _calls(lim, t, _noisy(2.0, 8), 16)  # half the doubling's window
    assert lim.in_slow_start and lim.limit == 16


def test_a_doubling_that_scales_is_not_ended_early() -> None:
    # the same first calls at 16, at the latency of 8 (the server scales): slow start goes on
    lim = LLMLimit(initial=4, window_samples=16, doubling_z=2.0)
    t = _calls(lim, 0.0, _noisy(1.0, 4), 4)
    t = _calls(lim, t, _noisy(1.0, 8), 8)
    _calls(lim, t, _noisy(1.15, 16), 16)  # a batch slows a little: e ≈ 0.8
    assert lim.in_slow_start and lim.limit == 32
