"""Slow start's pace to the plateau, per level (issue 31, round 12: docs/adaptive.md).

For each family draw: ``auto``'s slow-start levels as ``LLMLimit`` ran them on the adaptive
judge's job (400 calls) — how long each window lasted, in seconds and in its own calls'
median latency, how many completions it closed on, and the doubling's elasticity as the
window read it, as the doubling's burst read it at its median (the time until half of the
calls admitted at the doubling's instant had answered: what a judge pacing one doubling per
burst median could read), and as the fixed grid gives it (whole-job goodput of fixed ``L``
against fixed ``L/2``). Then ramps that double after ``k`` answers of the calls admitted at
their level and stop exactly at ``top`` (the best fixed limit, and any ``--tops``): ``k`` = 1
is benchmarks/adaptive.py's oracle ramp (the cold-start bound), ``k`` = a quarter of the level
its burst's median, ``window`` slow start's nominal window (``max(min(16, L), L/2)``).

    python benchmarks/slow_start_pace.py [--draws 67,14,53,78,1095] [--tops 64]
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import adaptive
import family

from gptgate.limits import LLMLimit, Sample
from gptgate.sim import run_virtual

REQUESTS = 400
TIMEOUT_S = 3600.0

#: answers of the level's own calls a ramp waits for before doubling, by level
PACES: dict[str, Callable[[int], int]] = {
    "first answer (oracle)": lambda level: 1,
    "4 answers": lambda level: 4,
    "burst's quarter": lambda level: max(1, level // 8),
    "burst's median": lambda level: max(1, level // 4),
    "slow start's window": lambda level: max(min(16, level), level // 2, 2),
}


class PacedRamp:
    """From 4, doubles after ``pace(level)`` answers of the calls admitted at its level, and
    stops at ``top``: a cold start that knows where to stop, at a given pace."""

    def __init__(self, top: int, pace: Callable[[int], int], initial: int = 4) -> None:
        self.top = top
        self._pace = pace
        self._limit = min(initial, top)
        self._from = -math.inf
        self._answered = 0
        self.reached: float | None = None  # when the limit reached ``top``

    @property
    def limit(self) -> int:
        return self._limit

    def update(self, sample: Sample, now: float) -> None:
        if sample.kind != "ok" or self._limit >= self.top or sample.start < self._from:
            return
        self._answered += 1
        if self._answered >= self._pace(self._limit):
            self._limit = min(2 * self._limit, self.top)
            self._from, self._answered = now, 0
            if self._limit == self.top:
                self.reached = now


@dataclass
class Recorder:
    """``LLMLimit``'s answers and slow-start window closes, recorded by wrapping it."""

    calls: list[tuple[float, float]] = field(default_factory=list)  # (start, end)
    closes: list[dict[str, float]] = field(default_factory=list)

    def install(self) -> Callable[[], None]:
        update, close = LLMLimit.update, LLMLimit._close_window
        calls, closes = self.calls, self.closes

        def recorded_update(limit: LLMLimit, sample: Sample, now: float) -> None:
            if sample.kind == "ok":
                calls.append((sample.start, now))
            update(limit, sample, now)

        def recorded_close(limit: LLMLimit, now: float) -> None:
            before = {"t": now, "level": float(limit.limit), "n": float(limit._w.n),
                      "opened": limit._window_start, "slow": float(limit.in_slow_start)}
            close(limit, now)
            before["e"] = limit.elasticity
            closes.append(before)

        LLMLimit.update = recorded_update  # type: ignore[method-assign]
        LLMLimit._close_window = recorded_close  # type: ignore[method-assign]

        def uninstall() -> None:
            LLMLimit.update, LLMLimit._close_window = update, close  # type: ignore[method-assign]

        return uninstall


def fixed_goodputs(d: family.Draw) -> dict[int, float]:
    row = functools.partial(adaptive.run_row, timeout=TIMEOUT_S)
    return {c: run_virtual(row, d.server, c, REQUESTS, d.seed).goodput
            for c in family.grid(d.server)}


def levels(d: family.Draw, grid: dict[int, float]) -> list[str]:
    rec = Recorder()
    uninstall = rec.install()
    try:
        run_virtual(functools.partial(adaptive.run_row, timeout=TIMEOUT_S), d.server, None,
                    REQUESTS, d.seed)
    finally:
        uninstall()
    t0 = min(start for start, _ in rec.calls)
    rows, half_before = [], math.nan
    for c in (c for c in rec.closes if c["slow"]):
        opened, level = max(c["opened"], t0), int(c["level"])
        own = [end - start for start, end in rec.calls if opened <= start < c["t"]]
        burst = sorted(end - opened for start, end in rec.calls if start == opened)
        half = burst[(len(burst) + 1) // 2 - 1] if burst else math.nan
        median = statistics.median(own) if own else math.nan
        e_burst = 1 - math.log2(half / half_before) if half_before > 0 else math.nan
        e_grid = (math.log2(grid[level] / grid[level // 2])
                  if level in grid and level // 2 in grid else math.nan)
        rows.append(
            f"  {level:4d} | {opened - t0:6.1f} s | {c['t'] - opened:5.1f} s | "
            f"{(c['t'] - opened) / median:4.2f} | {int(c['n']):3d} | {half:5.2f} s | "
            f"{c['e']:5.2f} | {e_burst:5.2f} | {e_grid:5.2f}"
        )
        half_before = half
    return rows


def ramps(d: family.Draw, grid: dict[int, float], tops: Sequence[int]) -> list[str]:
    best = max(grid, key=lambda c: grid[c])
    rows = []
    for top in sorted({best, *tops}):
        for name, pace in PACES.items():
            ramp = PacedRamp(top, pace)
            r = run_virtual(adaptive.run_row, d.server, top, REQUESTS, d.seed, None, None,
                            TIMEOUT_S, ramp)
            reached = "—" if ramp.reached is None else f"{ramp.reached:.1f} s"
            rows.append(f"  {top:4d} | {name:22s} | {reached:>7s} | "
                        f"{r.goodput / grid[best]:6.1%} | {r.p99_s:6.1f} s")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", default="67,14,53,78,1095")
    parser.add_argument("--tops", default="64", help="stops beside the best fixed limit")
    args: Any = parser.parse_args(argv)
    tops = [int(t) for t in args.tops.split(",") if t]
    for seed in (int(s) for s in args.draws.split(",")):
        d = family.draw(seed)
        grid = fixed_goodputs(d)
        best = max(grid, key=lambda c: grid[c])
        print(f"draw {seed}: {d.server.replicas} × {d.server.slots} slots, best fixed {best} "
              f"({grid[best]:.3f} calls/s)")
        print("  level |  opened  | lasted | ×med | ans | burst ½ | e win | e ½ | e grid")
        print("\n".join(levels(d, grid)))
        print("  stop | pace                   | at stop | goodput | p99")
        print("\n".join(ramps(d, grid, tops)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
