"""RetryBudget: retries ≤ ratio × requests + floor, over a sliding window."""

from __future__ import annotations

import math
import random

import pytest

from gptgate.limits import RetryBudget


def test_fresh_budget_allows_the_floor() -> None:
    budget = RetryBudget(ratio=0.1, min_retries_per_s=1.0, window_s=10.0)
    assert budget.available(0.0) == 10
    assert all(budget.try_spend(0.0) for _ in range(10))
    assert not budget.try_spend(0.0)
    assert budget.statistics(0.0).denied == 1


def test_requests_fund_a_fraction_of_a_retry_each() -> None:
    budget = RetryBudget(ratio=0.2, min_retries_per_s=0.0, window_s=10.0)
    assert not budget.try_spend(0.0)
    for _ in range(10):
        budget.record_request(0.0)
    assert budget.available(0.0) == 2
    assert budget.try_spend(0.5)
    assert budget.try_spend(0.5)
    assert not budget.try_spend(0.5)
    s = budget.statistics(0.5)
    assert (s.requests, s.retries, s.available, s.denied) == (10, 2, 0, 2)


def test_credits_and_retries_leave_the_window() -> None:
    budget = RetryBudget(ratio=0.5, min_retries_per_s=0.0, window_s=10.0, buckets=10)
    for _ in range(4):
        budget.record_request(0.0)
    assert budget.try_spend(0.0) and budget.try_spend(5.0)
    assert not budget.try_spend(9.9)
    # at 10 s the bucket of t=0 (the 4 requests and the first retry) has left the window
    assert budget.statistics(10.0).requests == 0
    assert budget.statistics(10.0).retries == 1
    assert not budget.try_spend(10.0)
    assert budget.statistics(15.0).retries == 0
    # a long silence empties everything at once
    budget.record_request(1_000.0)
    assert budget.statistics(1_000.0).requests == 1


def test_ten_thousand_failing_calls_retry_at_most_ratio_plus_floor() -> None:
    """Every call fails and would retry 3 times; the budget holds the fleet to ~10% + 1/s."""
    ratio, floor, window = 0.1, 1.0, 10.0
    budget = RetryBudget(ratio=ratio, min_retries_per_s=floor, window_s=window)
    rng = random.Random(42)
    now = 0.0
    retries = 0
    for _ in range(10_000):
        now += rng.expovariate(50.0)  # 50 calls/s, Poisson
        budget.record_request(now)
        for _attempt in range(3):
            if not budget.try_spend(now):
                break  # fail fast with the original error
            retries += 1
    elapsed = now
    # the bound: the run cut into window-aligned blocks, each covered by one window
    bucket = window / 10
    bound = ratio * 10_000 + floor * window * math.ceil((elapsed + bucket) / window)
    assert retries <= bound
    # and it is tight: the budget is spent, not hoarded
    assert retries >= ratio * 10_000 + floor * elapsed - floor * window
    assert budget.statistics(now).denied > 0


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        RetryBudget(ratio=-0.1)
    with pytest.raises(ValueError):
        RetryBudget(min_retries_per_s=-1.0)
    with pytest.raises(ValueError):
        RetryBudget(window_s=0.0)
    with pytest.raises(ValueError):
        RetryBudget(buckets=0)
