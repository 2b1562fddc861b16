"""Where ``auto`` loses goodput against the cold-start bound (issue 31, round 16: docs/adaptive.md).

For each family draw: ``auto`` on the adaptive judge's job (400 calls) with ``LLMLimit.update``
recorded (every answer's admission time, in-flight count and the limit then), beside the
oracle ramp (benchmarks/adaptive.py's ``RampLimit``: doubling from 4 at each level's first
answer, straight to the best fixed limit or the smallest within 95% of it, the better of the
two — the judge's cold-start bound). The job time ``auto`` loses against the ramp,
``τ_auto(400) − τ_ramp(400)`` (τ(n): when the n-th answer came back), is split at the
answers ``auto`` had by the end of its slow start and by its last admission:

* ``slow start`` — ``τ_auto(n1) − τ_ramp(n1)``, n1 the answers by slow start's end;
* ``settled`` — what the gap grew by from there to the last admission; ``settled level`` is
  the time-weighted mean limit over it, against the edge (the smallest fixed limit within 95%
  of the best's goodput);
* ``tail`` — what it grew by over the last calls, admitted before the end.

Beside them: how slow start ended (the event that ended it, the level and the centre it left),
the calls refused or failed (drops) and when, and the ramp's time to its top.

    python benchmarks/goodput_reach.py --draws 51,1001,1040
"""

from __future__ import annotations

import argparse
import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import adaptive
import family

from gptgate.limits import LLMLimit, Sample
from gptgate.sim import run_virtual

REQUESTS = 400
TIMEOUT_S = 3600.0


@dataclass
class Trace:
    """One run's answers: (admitted, answered, in flight at admission, kind, limit then)."""

    calls: list[tuple[float, float, int, str, int]] = field(default_factory=list)
    #: (when, limit, centre, cause) at slow start's (last) end (auto only)
    ss_end: tuple[float, int, float, str] | None = None
    limits: list[tuple[float, int]] = field(default_factory=list)

    def answers(self) -> list[float]:
        return sorted(end for _, end, _, kind, _ in self.calls if kind == "ok")

    def t0(self) -> float:
        return min(start for start, *_ in self.calls)


class RecordedRamp(adaptive.RampLimit):
    def __init__(self, top: int, trace: Trace) -> None:
        super().__init__(top)
        self.trace = trace
        self.reached: float | None = None

    def update(self, sample: Sample, now: float) -> None:
        self.trace.calls.append((sample.start, now, sample.inflight, sample.kind, self.limit))
        super().update(sample, now)
        if self.reached is None and self.limit >= self.top:
            self.reached = now


def run_auto(d: family.Draw) -> Trace:
    trace = Trace()
    update = LLMLimit.update

    def recorded(limit: LLMLimit, sample: Sample, now: float) -> None:
        slow, events = limit.in_slow_start, dict(limit.events)
        trace.calls.append((sample.start, now, sample.inflight, sample.kind, limit.limit))
        update(limit, sample, now)
        if slow and not limit.in_slow_start:  # the last end counts (a stair may be refuted)
            cause = ",".join(k for k, v in limit.events.items() if v != events.get(k, 0))
            trace.ss_end = (now, limit.limit, limit.center, cause or "?")
        if not trace.limits or trace.limits[-1][1] != limit.limit:
            trace.limits.append((now, limit.limit))

    LLMLimit.update = recorded  # type: ignore[method-assign]
    try:
        run_virtual(functools.partial(adaptive.run_row, timeout=TIMEOUT_S), d.server, None,
                    REQUESTS, d.seed)
    finally:
        LLMLimit.update = update  # type: ignore[method-assign]
    return trace


def tau(answers: Sequence[float], n: int, t0: float) -> float:
    return answers[min(len(answers), max(1, n)) - 1] - t0


def mean_limit(limits: Sequence[tuple[float, int]], start: float, end: float) -> float:
    if end <= start or not limits:
        return float("nan")
    total, times = 0.0, [t for t, _ in limits]
    i = max(0, bisect.bisect_right(times, start) - 1)
    t, level = start, limits[i][1]
    for when, value in limits[i + 1:]:
        if when >= end:
            break
        total += (when - t) * level
        t, level = when, value
    return (total + (end - t) * level) / (end - start)


def reach(seed: int) -> str:
    d = family.draw(seed)
    row = functools.partial(adaptive.run_row, timeout=TIMEOUT_S)
    grid = {c: run_virtual(row, d.server, c, REQUESTS, d.seed) for c in family.grid(d.server)}
    usable = {c: r for c, r in grid.items() if r.failed <= 0.01 * REQUESTS}
    best = max(usable, key=lambda c: usable[c].goodput)
    edge = min(c for c, r in usable.items() if r.goodput >= 0.95 * usable[best].goodput)
    ramps = []
    for top in sorted({best, edge}):
        trace = Trace()
        ramp = RecordedRamp(top, trace)
        r = run_virtual(adaptive.run_row, d.server, top, REQUESTS, d.seed, None, None,
                        TIMEOUT_S, ramp)
        ramps.append((r.goodput, top, trace, ramp.reached))
    g_ramp, top, ramp_t, reached = max(ramps, key=lambda x: x[0])
    auto = run_auto(d)
    a_ans, r_ans = auto.answers(), ramp_t.answers()
    a0, r0 = auto.t0(), ramp_t.t0()
    n = len(a_ans)
    total = tau(a_ans, n, a0) - tau(r_ans, n, r0)
    ss_t = auto.ss_end[0] if auto.ss_end else a_ans[-1]
    n1 = bisect.bisect_right(a_ans, ss_t)
    last_admit = max(start for start, *_ in auto.calls)
    n2 = max(n1, bisect.bisect_right(a_ans, last_admit))
    d1 = tau(a_ans, n1, a0) - tau(r_ans, n1, r0)
    d2 = tau(a_ans, n2, a0) - tau(r_ans, n2, r0) - d1
    d3 = total - d1 - d2
    settled = mean_limit(auto.limits, ss_t, last_admit)
    drops = [(start, end) for start, end, _, kind, _ in auto.calls if kind == "dropped"]
    drops_ss = sum(1 for start, _ in drops if start < ss_t)
    ramp_drops = sum(1 for *_, kind, _ in ramp_t.calls if kind == "dropped")
    g_auto = n / tau(a_ans, n, a0)
    how = ("never" if auto.ss_end is None else
           f"{auto.ss_end[3]} at {auto.ss_end[0] - a0:.1f} s, limit {auto.ss_end[1]}, "
           f"centre {auto.ss_end[2]:.1f}")
    job = tau(a_ans, n, a0)
    return (
        f"draw {seed}: {d.server.replicas}×{d.server.slots}, queue "
        f"{d.server.max_queue}, best fixed {best} ({usable[best].goodput:.3f}/s), edge {edge}; "
        f"ramp to {top} ({g_ramp / usable[best].goodput:.1%}, at {top} after "
        f"{(reached or r0) - r0:.1f} s, {ramp_drops} drops); "
        f"auto {g_auto / usable[best].goodput:.1%} ({n} ok)\n"
        f"  job {job:.1f} s, ramp {tau(r_ans, n, r0):.1f} s: lost {total:.1f} s = slow start "
        f"{d1:.1f} ({n1} answers) + settled {d2:.1f} (to answer {n2}) + tail {d3:.1f}\n"
        f"  slow start ended: {how}; settled level {settled:.1f} (edge {edge}, best {best}); "
        f"drops {len(drops)} ({drops_ss} in slow start)\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", default="51,1001,1040")
    args: Any = parser.parse_args(argv)
    for seed in (int(s) for s in args.draws.split(",") if s):
        print(reach(seed), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
