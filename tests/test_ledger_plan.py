"""``gate.ledger.plan(budget_per_hour)`` answers a budget that is not a finite number >= 0, or
an unknown backend, with a ``ValueError`` that names it, and counts the calls a budget buys
without losing one to float rounding. Before: ``plan(-5)`` planned -500,000 calls an hour,
``plan(float("nan"))`` raised "cannot convert float NaN to integer", ``plan(10,
backend="nope")`` a bare ``KeyError: 'nope'``, and $10 at $0.00001 a call bought 999,999
calls, not 1,000,000."""

from __future__ import annotations

import math

import pytest

import gptgate as gg
from gptgate.ledger import Ledger

PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=1.0)


def _ledger() -> Ledger:
    ledger = Ledger({"g": PRICE, "h": PRICE})
    ledger.record_attempt("g", gg.Usage(input_tokens=5, output_tokens=5), streamed=False,
                          wasted=False)
    ledger.record_call("g", ok=True)
    return ledger


def test_a_budget_buys_the_whole_calls_it_pays_for() -> None:
    ledger = _ledger()
    assert ledger.entries["g"].cost_per_success == pytest.approx(1e-05)
    assert ledger.plan(10.0).calls_per_hour == 1_000_000
    assert ledger.plan(10.0, backend="g").calls_per_hour == 1_000_000
    assert ledger.plan(0.0).calls_per_hour == 0


@pytest.mark.parametrize("budget", [-5.0, math.nan, math.inf, -math.inf])
def test_a_budget_that_is_not_a_finite_number_at_least_zero_is_refused(budget: float) -> None:
    with pytest.raises(ValueError, match="budget_per_hour_usd"):
        _ledger().plan(budget)


def test_an_unknown_backend_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown backend 'nope'; known: g, h"):
        _ledger().plan(10.0, backend="nope")
