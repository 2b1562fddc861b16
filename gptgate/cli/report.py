"""A sweep as text, CSV and JSON: the U-curve table, where the knee is, what ``auto`` found.

The knee is only named where it was measured: the best fixed level with a higher fixed level
after it that delivered less. When the best is the highest level measured, throughput may
still be rising: the table says "best so far" and the summary says to try higher levels.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import RunFailed
from .measure import LevelResult, Sweep

__all__ = [
    "CSV_COLUMNS",
    "DEMO_COLUMNS",
    "SWEEP_COLUMNS",
    "Knee",
    "find_knee",
    "format_table",
    "row_dict",
    "summary",
    "sweep_dict",
    "write_csv",
]


@dataclass(frozen=True, slots=True)
class Knee:
    """The best fixed level, and whether a higher level was measured to deliver less
    (``confirmed``): only then is it the knee of the curve."""

    row: LevelResult
    confirmed: bool
    #: the level right after the best (the first measured fall), when confirmed
    after: LevelResult | None = None


def find_knee(rows: Sequence[LevelResult]) -> Knee | None:
    fixed = sorted(
        (r for r in rows if isinstance(r.concurrency, int)), key=lambda r: int(r.concurrency)
    )
    completed = [r for r in fixed if r.ok > 0]
    if not completed:
        return None
    best = max(completed, key=lambda r: r.goodput_rps)
    # a higher level where every call failed delivered nothing: a fall, measured
    higher = [r for r in fixed if int(r.concurrency) > int(best.concurrency)]
    return Knee(best, bool(higher), higher[0] if higher else None)


# -- the terminal table ----------------------------------------------------------------------

Column = tuple[str, int, Callable[[LevelResult], str]]


def _seconds(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}s"


def _dollars(value: float, digits: int) -> str:
    return "-" if math.isnan(value) else f"${value:.{digits}f}"


#: the field table's columns: totals per row, as the measurement was reported
DEMO_COLUMNS: list[Column] = [
    ("concurrency", 11, lambda r: r.label),
    ("total time", 11, lambda r: _seconds(r.duration_s, 0)),
    ("mean latency", 13, lambda r: _seconds(r.mean_latency_s)),
    ("throughput", 13, lambda r: f"{r.goodput_rps:.2f} req/s"),
    ("total tokens", 13, lambda r: f"{r.total_tokens:,}"),
    ("cost", 9, lambda r: _dollars(r.cost_usd, 2)),
    ("retries", 8, lambda r: str(r.retries)),
    ("failed", 7, lambda r: str(r.errors)),
]

#: the sweep's columns: per completed call, tails, and what went wrong
SWEEP_COLUMNS: list[Column] = [
    ("concurrency", 11, lambda r: r.label),
    ("goodput", 12, lambda r: f"{r.goodput_rps:.2f} req/s"),
    ("p50", 7, lambda r: _seconds(r.latency(0.5))),
    ("p99", 7, lambda r: _seconds(r.latency(0.99))),
    ("ttft p50", 8, lambda r: _seconds(r.ttft(0.5))),
    ("tokens/call", 11, lambda r: _per_call(r, r.total_tokens)),
    ("cost/call", 10, lambda r: _dollars(r.cost_per_call_usd, 4)),
    ("429s", 5, lambda r: str(r.rate_limited)),
    ("retries", 7, lambda r: str(r.retries)),
    ("timeouts", 8, lambda r: str(r.timeouts)),
    ("errors", 6, lambda r: str(r.errors)),
]


def _per_call(row: LevelResult, total: int) -> str:
    value = row.per_call(total)
    return "-" if math.isnan(value) else f"{value:,.0f}"


def format_table(rows: Sequence[LevelResult], columns: Sequence[Column]) -> str:
    header = " ".join(f"{title:>{width}}" for title, width, _ in columns)
    lines = [header, "-" * len(header)]
    knee = find_knee(rows)
    for row in rows:
        mark = ""
        if knee is not None and row is knee.row:
            mark = "  <- knee" if knee.confirmed else "  <- best so far"
        cells = " ".join(f"{show(row):>{width}}" for _, width, show in columns)
        lines.append(cells + mark)
    return "\n".join(lines)


def summary(rows: Sequence[LevelResult]) -> str:
    """What the rows show, claiming only what was measured."""
    knee = find_knee(rows)
    auto = next((r for r in rows if r.concurrency == "auto"), None)
    lines: list[str] = []
    if knee is not None and knee.confirmed and knee.after is not None:
        best, after = knee.row, knee.after
        fall = after.goodput_rps / best.goodput_rps - 1.0 if best.goodput_rps else 0.0
        there = (
            "every call failed"
            if after.ok == 0
            else f"it is {after.goodput_rps:.2f} req/s ({fall:+.0%})"
        )
        lines.append(
            f"Throughput peaks at concurrency {best.concurrency} ({best.goodput_rps:.2f} req/s); "
            f"at {after.concurrency} {there}."
        )
        dearer = after.cost_per_call_usd / best.cost_per_call_usd - 1.0
        if dearer > 0.005:
            lines.append(
                f"Past the knee a completed call costs more: {_dollars(best.cost_per_call_usd, 4)}"
                f" at {best.concurrency}, {_dollars(after.cost_per_call_usd, 4)} at "
                f"{after.concurrency} ({dearer:+.1%}, retries and timeouts billed)."
            )
    elif knee is not None:
        lines.append(
            f"Throughput is highest at concurrency {knee.row.concurrency}, the highest fixed "
            f"level measured ({knee.row.goodput_rps:.2f} req/s): the knee was not reached; "
            "measure higher levels to find it."
        )
    if auto is not None and auto.ok:
        found = (
            f"concurrency='auto' (the default) found its limit online, {auto.final_limit} at "
            f"the end: {auto.goodput_rps:.2f} req/s for {_dollars(auto.cost_per_call_usd, 4)} "
            "a call"
        )
        if knee is not None and knee.row.goodput_rps > 0:
            best = knee.row
            found += (
                f" ({auto.goodput_rps / best.goodput_rps:.0%} of the best fixed level's "
                f"throughput; best fixed: {_dollars(best.cost_per_call_usd, 4)} a call)."
            )
        else:
            found += (
                ". Add fixed levels (e.g. 1,5,10,20,30,50,80) to compare it with the U-curve."
            )
        lines.append(found)
    elif auto is None and knee is not None:
        lines.append("Use concurrency='auto' (the default) to find the knee online.")
    return "\n".join(lines)


# -- CSV and JSON ----------------------------------------------------------------------------

#: sweep.csv, one row per level (see docs/cli.md); empty cells where nothing was measured
CSV_COLUMNS: tuple[str, ...] = (
    "concurrency",
    "final_limit",
    "requests",
    "ok",
    "errors",
    "duration_s",
    "goodput_rps",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "input_tokens_per_call",
    "cached_input_tokens_per_call",
    "output_tokens_per_call",
    "cost_per_call_usd",
    "cost_usd",
    "rate_limited",
    "retries",
    "timeouts",
)


def row_dict(row: LevelResult) -> dict[str, Any]:
    """One level as the CSV's columns (NaN where nothing was measured)."""
    return {
        "concurrency": row.concurrency,
        "final_limit": row.final_limit,
        "requests": row.requests,
        "ok": row.ok,
        "errors": row.errors,
        "duration_s": row.duration_s,
        "goodput_rps": row.goodput_rps,
        "latency_mean_s": row.mean_latency_s,
        "latency_p50_s": row.latency(0.5),
        "latency_p95_s": row.latency(0.95),
        "latency_p99_s": row.latency(0.99),
        "ttft_p50_s": row.ttft(0.5),
        "ttft_p95_s": row.ttft(0.95),
        "ttft_p99_s": row.ttft(0.99),
        "input_tokens_per_call": row.per_call(row.input_tokens),
        "cached_input_tokens_per_call": row.per_call(row.cached_input_tokens),
        "output_tokens_per_call": row.per_call(row.output_tokens),
        "cost_per_call_usd": row.cost_per_call_usd,
        "cost_usd": row.cost_usd,
        "rate_limited": row.rate_limited,
        "retries": row.retries,
        "timeouts": row.timeouts,
    }


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def write_csv(rows: Sequence[LevelResult], path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(CSV_COLUMNS)
            for row in rows:
                values = row_dict(row)
                writer.writerow([_cell(values[name]) for name in CSV_COLUMNS])
    except OSError as exc:
        raise RunFailed(f"cannot write {path}: {exc.strerror or exc}") from None


def sweep_dict(sweep: Sweep) -> dict[str, Any]:
    """The whole sweep for ``--json``."""
    knee = find_knee(sweep.rows)
    return {
        "target": sweep.target.describe(),
        "simulated": sweep.target.simulated,
        "requests_per_level": sweep.requests,
        "levels": [str(level) for level in sweep.levels],
        "rows": [{**row_dict(r), "first_error": r.first_error} for r in sweep.rows],
        "knee": None
        if knee is None
        else {"concurrency": knee.row.concurrency, "confirmed": knee.confirmed},
        "interrupted": sweep.interrupted,
        "warnings": sweep.warnings,
        "failure": sweep.failure,
        "wall_s": sweep.wall_s,
    }
