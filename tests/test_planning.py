"""Capacity planning: the field table (a $10/h budget buys 465 / 456 / 444 requests an hour at
$0.0215 / $0.0219 / $0.0225 a request, concurrency 10 / 30 / 50) and its edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

import gptgate as gg
from gptgate.planning import Band, bands_from_csv, parse_budget, plan

FIELD = {10: 0.0215, 30: 0.0219, 50: 0.0225}


def test_the_field_table() -> None:
    result = gg.plan("10/h", FIELD)
    assert [b.concurrency for b in result.bands] == [10, 30, 50]
    assert [b.requests_per_hour for b in result.bands] == [465, 456, 444]
    assert result.best.concurrency == 10
    assert all(b.limited_by == "budget" for b in result.bands)
    assert all(b.spend_per_hour_usd <= 10.0 for b in result.bands)
    # 50 buys 4.5% fewer requests than 10
    assert round(result.bands[2].vs_best, 3) == -0.045
    # planned with 10's price, run at 50: 465 x $0.0225 = $10.46 an hour, 4.6% over
    overrun = result.worst_overrun
    assert overrun is not None and overrun[0].concurrency == 50
    assert round(465 * 0.0225, 2) == 10.46 and round(overrun[1], 3) == 0.046


def test_a_quotient_a_hair_under_a_whole_number_keeps_its_request() -> None:
    # 10 / 0.02 is 500, but 10 // 0.02 is 499.0 in floating point
    assert plan(10, {5: 0.02}).best.requests_per_hour == 500


def test_a_band_delivers_no_more_than_its_goodput() -> None:
    # 0.05 req/s = 180 an hour, whatever the budget would buy
    result = plan("100/h", [Band(1, 0.01, goodput_rps=0.05), Band(10, 0.02, goodput_rps=2.0)])
    slow, fast = result.bands
    assert (slow.requests_per_hour, slow.limited_by) == (180, "throughput")
    assert (fast.requests_per_hour, fast.limited_by) == (5000, "budget")
    assert result.best is fast


def test_a_tie_goes_to_the_lower_concurrency() -> None:
    assert plan(1, {30: 0.01, 10: 0.01}).best.concurrency == 10


@pytest.mark.parametrize(
    ("text", "per_hour"),
    [("10/h", 10.0), ("$10/hour", 10.0), ("240/day", 10.0), ("0.5/min", 30.0), ("10", 10.0),
     (2.5, 2.5)],
)
def test_budgets(text: str | float, per_hour: float) -> None:
    assert parse_budget(text) == pytest.approx(per_hour)


@pytest.mark.parametrize("text", ["", "ten", "10/week", "-5/h", "0", "10/h/h"])
def test_bad_budgets_are_a_clear_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="budget"):
        parse_budget(text)


def test_bad_bands_are_refused() -> None:
    with pytest.raises(ValueError, match="cost per request must be > 0"):
        plan(10, {10: 0.0})
    with pytest.raises(ValueError, match="at least one band"):
        plan(10, {})


def test_bands_from_a_sweep_csv(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    path.write_text(
        "concurrency,final_limit,goodput_rps,cost_per_call_usd\n"
        "10,10,4.76,0.0215\n"
        "30,30,11.24,0.0219\n"
        "50,50,13.89,0.0225\n"
        "80,80,0,\n"  # no call completed: no cost, left out
        "auto,42,12.1,0.0220\n"
    )
    bands = bands_from_csv(path)
    assert [b.concurrency for b in bands] == [10, 30, 50, "auto→42"]
    result = plan("10/h", path)
    assert [b.requests_per_hour for b in result.bands] == [465, 456, 444, 454]
    assert result.best.concurrency == 10


def test_a_file_that_is_not_a_sweep_csv(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"not a sweep\.csv"):
        bands_from_csv(path)
    with pytest.raises(ValueError, match="cannot read"):
        bands_from_csv(tmp_path / "missing.csv")


def test_the_plot_given_for_the_csv_is_named_as_not_a_sweep_csv(tmp_path: Path) -> None:
    """``--from runs/x/sweep.png`` (the file beside it): the message was Python's own
    "'utf-8' codec can't decode byte 0x89 in position 0: invalid start byte"."""
    path = tmp_path / "sweep.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    with pytest.raises(ValueError, match=r"sweep\.png is not a sweep\.csv: not UTF-8 text") as e:
        bands_from_csv(path)
    assert "codec" not in str(e.value)


def test_the_overrun_compares_only_bands_that_can_run_the_best_rate() -> None:
    """Planned with the best band's price, run at a pricier band: the overrun is quoted at a
    band that can complete those requests in an hour. 50 is dearer but completes only 360 an
    hour (its throughput), so the comparison is 30's, and 50 is named as too slow."""
    result = plan("10/h", [Band(10, 0.0215), Band(30, 0.0219, goodput_rps=11.24),
                           Band(50, 0.0225, goodput_rps=0.1)])
    assert result.best.requests_per_hour == 465
    assert [b.capacity_per_hour for b in result.bands] == [None, 40464, 360]
    overrun = result.worst_overrun
    assert overrun is not None and overrun[0].concurrency == 30
    assert round(overrun[1], 3) == round(465 * 0.0219 / 10 - 1, 3)
    assert [b.concurrency for b in result.too_slow] == [50]
    assert result.to_dict()["too_slow"] == [50]


def test_no_overrun_when_no_dearer_band_can_run_the_best_rate() -> None:
    # gptgate plan's own table: band 4 completes 19,714 an hour, never the best's 50,563
    result = plan("1000/h", [Band(4, 0.0201202, goodput_rps=5.47621),
                             Band(16, 0.0195412, goodput_rps=4.26516),
                             Band(14, 0.0197773, goodput_rps=26.1477)])
    assert (result.best.concurrency, result.best.requests_per_hour) == (14, 50563)
    assert result.worst_overrun is None
    assert [b.concurrency for b in result.too_slow] == [4]


@pytest.mark.parametrize("level", [0, -5, True, 2.5, ""])
def test_a_band_at_no_concurrency_is_refused(level: object) -> None:
    """docs/cli.md: "a bad budget or band is a ValueError saying what is wrong". A band at
    concurrency 0 (or -5, True, 2.5) was planned, and could be the plan's best: "concurrency 0
    buys the most". A level is an int >= 1 or a label ("auto→42")."""
    with pytest.raises(ValueError, match="concurrency must be an int >= 1 or a label"):
        gg.plan(10, {level: 0.02})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="concurrency must be an int >= 1 or a label"):
        gg.Band(level, 0.02)  # type: ignore[arg-type]
    assert gg.plan(10, {"auto→42": 0.02, 1: 0.02}).best.concurrency == 1
