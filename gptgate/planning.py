"""Capacity planning from a measured cost per request: what an hourly budget buys per band.

The cost of a request rises with concurrency (retries and timeouts past the knee are billed
too), so a plan made with the price measured at low concurrency overruns its budget when the
job runs higher. With a $10/hour budget and the field's measured costs, $0.0215 a request at
concurrency 10 buys 465 requests an hour, $0.0219 at 30 buys 456, $0.0225 at 50 only 444
(−4.5%); planned at 10's price but run at 50, the same 465 requests cost $10.46 an hour.

:func:`plan` does this arithmetic for every band of a sweep (``gptgate sweep`` writes the
costs to ``sweep.csv``) and names the band that buys the most requests within the budget.
A band's measured goodput caps what it can deliver, whatever the budget.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Band", "BandPlan", "Plan", "bands_from_csv", "parse_budget", "plan"]

#: seconds in each period a budget may be given per
_PERIODS = {
    "s": 1 / 3600, "sec": 1 / 3600,
    "m": 1 / 60, "min": 1 / 60,
    "h": 1.0, "hr": 1.0, "hour": 1.0,
    "d": 24.0, "day": 24.0,
}
_BUDGET = re.compile(r"^\s*\$?\s*(?P<amount>[0-9]*\.?[0-9]+)\s*(?:/\s*(?P<period>[a-z]+))?\s*$")
#: ``budget / cost`` is floored: a float quotient a hair under a whole number (10 / 0.02)
#: must not lose a request
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Band:
    """One measured concurrency band: its level (an int, or a label such as ``"auto→42"``),
    what a completed request cost there (every billed attempt included), and optionally the
    completed requests per second it sustained."""

    concurrency: int | str
    cost_per_request_usd: float
    goodput_rps: float | None = None

    def __post_init__(self) -> None:
        level = self.concurrency
        fixed = isinstance(level, int) and not isinstance(level, bool) and level >= 1
        if not (fixed or (isinstance(level, str) and level.strip())):
            # a band at no concurrency could be planned, even be the best: "concurrency 0
            # buys the most"
            raise ValueError(f"band {level!r}: concurrency must be an int >= 1 or a label "
                             "such as 'auto→42'")
        if not math.isfinite(self.cost_per_request_usd) or self.cost_per_request_usd <= 0:
            raise ValueError(
                f"band {self.concurrency}: cost per request must be > 0, "
                f"got {self.cost_per_request_usd}"
            )
        if self.goodput_rps is not None and (
            not math.isfinite(self.goodput_rps) or self.goodput_rps < 0
        ):
            raise ValueError(f"band {self.concurrency}: goodput must be >= 0")


@dataclass(frozen=True, slots=True)
class BandPlan:
    """What the budget buys in one band. ``limited_by`` is ``"budget"`` or ``"throughput"``
    (the band cannot complete more requests an hour than its goodput, whatever the money)."""

    concurrency: int | str
    cost_per_request_usd: float
    requests_per_hour: int
    spend_per_hour_usd: float
    limited_by: str
    #: requests an hour relative to the best band (0.0 for the best, −0.045 for 4.5% fewer)
    vs_best: float = 0.0
    #: the most requests the band completes an hour (its goodput × 3,600); None: not measured
    capacity_per_hour: int | None = None

    def completes(self, requests_per_hour: int) -> bool:
        """Whether the band can complete ``requests_per_hour`` (unknown capacity: assumed)."""
        return self.capacity_per_hour is None or self.capacity_per_hour >= requests_per_hour


@dataclass(frozen=True, slots=True)
class Plan:
    """Every band's plan, in the order given, and the one buying the most requests (the lower
    concurrency on a tie: the same requests for less load)."""

    budget_usd_per_hour: float
    bands: tuple[BandPlan, ...]
    best: BandPlan

    @property
    def worst_overrun(self) -> tuple[BandPlan, float] | None:
        """The band where the best band's request rate would cost the most, and by how much
        that exceeds the budget (0.046 = +4.6%); None when no band costs more than the best.
        Only bands that can complete that rate count: a slower one falls short (``too_slow``)
        rather than overrunning."""
        able = [b for b in self.bands if b.completes(self.best.requests_per_hour)]
        worst = max(able, key=lambda b: b.cost_per_request_usd)  # the best itself is able
        spend = self.best.requests_per_hour * worst.cost_per_request_usd
        over = spend / self.budget_usd_per_hour - 1.0
        return (worst, over) if over > 0 else None

    @property
    def too_slow(self) -> tuple[BandPlan, ...]:
        """The bands dearer per request than the best that cannot complete the best band's
        requests in an hour: run there, the job falls short of its plan."""
        return tuple(
            b for b in self.bands
            if b.cost_per_request_usd > self.best.cost_per_request_usd
            and not b.completes(self.best.requests_per_hour)
        )

    def to_dict(self) -> dict[str, Any]:
        overrun = self.worst_overrun
        return {
            "budget_usd_per_hour": self.budget_usd_per_hour,
            "bands": [asdict(b) for b in self.bands],
            "best": asdict(self.best),
            "worst_overrun": None
            if overrun is None
            else {"concurrency": overrun[0].concurrency, "over_budget": overrun[1]},
            "too_slow": [b.concurrency for b in self.too_slow],
        }


def parse_budget(budget: float | str) -> float:
    """A budget in dollars per hour: a number, or text such as ``"10/h"``, ``"$240/day"``,
    ``"0.5/min"``. A ``ValueError`` names what is wrong."""
    if isinstance(budget, bool):
        raise ValueError("budget must be a number of dollars per hour or text like '10/h'")
    if isinstance(budget, (int, float)):
        per_hour = float(budget)
    else:
        match = _BUDGET.match(budget.lower())
        if match is None:
            raise ValueError(f"budget {budget!r} is not like '10/h', '$240/day' or '10'")
        period = match["period"] or "h"
        if period not in _PERIODS:
            raise ValueError(f"budget period {period!r} is not one of s, min, h, day")
        per_hour = float(match["amount"]) / _PERIODS[period]
    if not math.isfinite(per_hour) or per_hour <= 0:
        raise ValueError(f"budget must be > 0 dollars per hour, got {budget!r}")
    return per_hour


def bands_from_csv(path: str | os.PathLike[str]) -> list[Band]:
    """The bands of a ``sweep.csv`` written by ``gptgate sweep``; a level where no call
    completed has no cost per request and is left out."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8-sig")  # Excel's "CSV UTF-8" starts with a BOM
    except OSError as exc:
        raise ValueError(f"cannot read {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:  # the sweep.png beside it, say: not Python's codec message
        raise ValueError(f"{file} is not a sweep.csv: not UTF-8 text") from None
    reader = csv.DictReader(text.splitlines())
    needed = {"concurrency", "cost_per_call_usd", "goodput_rps"}
    if reader.fieldnames is None or not needed <= set(reader.fieldnames):
        raise ValueError(
            f"{file} is not a sweep.csv: it needs the columns {', '.join(sorted(needed))}"
        )
    bands: list[Band] = []
    for line, row in enumerate(reader, start=2):
        cost = (row["cost_per_call_usd"] or "").strip()
        if not cost:
            continue
        try:
            level: int | str = _level(row["concurrency"], row.get("final_limit"))
            goodput = (row["goodput_rps"] or "").strip()
            bands.append(Band(level, float(cost), float(goodput) if goodput else None))
        except ValueError as exc:
            raise ValueError(f"{file}, line {line}: {exc}") from None
    if not bands:
        raise ValueError(f"{file} has no level where a call completed")
    return bands


def _level(concurrency: str, final_limit: str | None) -> int | str:
    text = concurrency.strip()
    if text.isdigit():
        return int(text)
    if text == "auto":
        return f"auto→{final_limit.strip()}" if final_limit and final_limit.strip() else "auto"
    raise ValueError(f"concurrency {text!r} is neither an int nor 'auto'")


def plan(
    budget: float | str,
    bands: Mapping[int | str, float] | Iterable[Band] | str | os.PathLike[str],
) -> Plan:
    """Requests per hour that ``budget`` (dollars per hour, or ``"10/h"``) buys in each band.

    ``bands`` is ``{concurrency: cost per request}``, :class:`Band` objects (with goodput, to
    cap a band by what it can complete), or the path of a ``gptgate sweep`` ``sweep.csv``:

    >>> p = plan("10/h", {10: 0.0215, 30: 0.0219, 50: 0.0225})
    >>> [b.requests_per_hour for b in p.bands], p.best.concurrency
    ([465, 456, 444], 10)
    """
    per_hour = parse_budget(budget)
    if isinstance(bands, (str, os.PathLike)):
        measured = bands_from_csv(bands)
    elif isinstance(bands, Mapping):
        measured = [Band(level, cost) for level, cost in bands.items()]
    else:
        measured = list(bands)
    if not measured:
        raise ValueError("plan needs at least one band")
    raw = [_band_plan(per_hour, band) for band in measured]
    best = max(raw, key=lambda b: (b.requests_per_hour, -_order(b.concurrency)))
    top = best.requests_per_hour
    planned = tuple(
        BandPlan(
            b.concurrency, b.cost_per_request_usd, b.requests_per_hour, b.spend_per_hour_usd,
            b.limited_by, b.requests_per_hour / top - 1.0 if top else 0.0, b.capacity_per_hour,
        )
        for b in raw
    )
    return Plan(per_hour, planned, planned[raw.index(best)])


def _band_plan(per_hour: float, band: Band) -> BandPlan:
    affordable = math.floor(per_hour / band.cost_per_request_usd + _EPSILON)
    limited_by = "budget"
    deliverable = None
    if band.goodput_rps is not None:
        deliverable = math.floor(band.goodput_rps * 3600 + _EPSILON)
        if deliverable < affordable:
            affordable, limited_by = deliverable, "throughput"
    return BandPlan(
        band.concurrency,
        band.cost_per_request_usd,
        affordable,
        affordable * band.cost_per_request_usd,
        limited_by,
        capacity_per_hour=deliverable,
    )


def _order(concurrency: int | str) -> float:
    """Ties go to the lower fixed level; an adaptive band ranks after the fixed ones."""
    return float(concurrency) if isinstance(concurrency, int) else math.inf
