"""The rules of issue 31, as pure functions of one draw's figures: what benchmarks/family.py
prints as holds / MISS, importable by a test without running a simulation.

Each judge takes one draw's figures (a small frozen dataclass) and returns one
:class:`Verdict` per rule it decides. A verdict carries a **margin** in points (percentage
points of the figure the rule bounds, the tightest of its conditions): positive when the rule
holds with room, negative when it misses — so "the worst draw" of a rule is the one with the
smallest margin, whether it holds or not. :func:`summarise` then counts the draws that hold
against each rule's required share.

The rules (issue 31, "Judged"):

* ``cache`` — ``batch_content`` ≥ the better of the plain client and the hand warm-up in hit
  rate, less 2 points, and within 5% of that client's time; on ≥ 95% of draws. "The better"
  is the one with the higher hit rate (the faster on a tie): its own time is the reference.
* ``cache floor`` — on no draw worse than the plain client by more than 5 points of hits or
  10% of time.
  For both, gptgate failing calls the reference client completed is a miss (a job cut short
  is fast and cheap; it is not the same job) — and, the same way, a reference client that
  gave up on calls gptgate completed is timed per completed call, over gptgate's completed
  calls, not by the time of its shorter job.
* ``adaptive`` — ``concurrency="auto"``'s goodput ≥ 95% of the best fixed limit's, and not
  dominated: no fixed limit has both ≥ auto's goodput and ≤ 0.8× its p99; on ≥ 95% of draws.
  Fixed limits that fail more than 1% of their calls are no setting anyone would run and are
  left out (as benchmarks/adaptive.py does: a limit that fails fast "wins" on goodput).
* ``adaptive+signals`` — the same rule for ``auto`` with ``Backend(signals=True)`` (the
  server's own ``/metrics``, ``/slots``), judged against the same fixed limits; only with
  ``benchmarks/family.py --adaptive-signals``.
* ``tiers`` — ``tier="auto"`` costs ≤ sending everything large and succeeds ≥ 99% as often,
  on every draw.
* ``tiers in vain`` — escalations that changed nothing ≤ 2% of the calls, on every draw: the
  gateway's own count (``tier_stats().escalated_no_change``: the large answer failed the way
  the small one did — cut at ``length`` no longer than the small answer, empty again, invalid
  JSON again; gptgate.tiers ``changed_nothing``) plus the escalations whose large call failed
  (the small answer stood).
* ``hedge`` — on a draw with stragglers, p99 ≤ 0.7× unhedged at ≤ 5% extra billed tokens; on
  one without, p99 and billed tokens at most 2% above unhedged (below is no harm); on every
  draw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: each rule's required share of the draws that hold
REQUIRED: dict[str, float] = {
    "cache": 0.95,
    "cache floor": 1.0,
    "adaptive": 0.95,
    "adaptive+signals": 0.95,
    "tiers": 1.0,
    "tiers in vain": 1.0,
    "hedge": 1.0,
}
#: the judge (``--only``) that decides each rule
JUDGE_OF: dict[str, str] = {
    "cache": "cache",
    "cache floor": "cache",
    "adaptive": "adaptive",
    "adaptive+signals": "adaptive",
    "tiers": "tiers",
    "tiers in vain": "tiers",
    "hedge": "hedge",
}
#: a margin shown for a condition that cannot bind (no fixed limit reaches auto's goodput)
ROOM = 100.0
#: a figure exactly on its bound holds (1.02 × 10.0 is 10.200000000000001 in floating point)
_EPSILON = 1e-9


def _holds(*slacks: float) -> tuple[bool, float]:
    """Whether every condition holds, and the tightest slack (the verdict's margin)."""
    margin = min(slacks)
    return margin >= -_EPSILON, margin


@dataclass(frozen=True, slots=True)
class Verdict:
    rule: str
    ok: bool
    #: the tightest condition's slack in points (negative: missed by that much)
    margin: float
    detail: str
    #: whether the draw's bound says the rule is within reach (the cold-start bound's
    #: goodput, the oracle hedger's p99); None: no bound for this rule — shown, not judged
    reachable: bool | None = None


# --------------------------------------------------------------------------- cache gate


@dataclass(frozen=True, slots=True)
class Client:
    """One client's run of the prompt-cache job."""

    hit: float
    time_s: float
    failed: int = 0


@dataclass(frozen=True, slots=True)
class CacheFigures:
    plain: Client
    hand: Client
    gate: Client
    calls: int
    #: the best hit rate any client can reach (block-aligned prefix / input)
    ceiling: float = 1.0
    #: the cap every client ran at
    c: int = 0
    #: the least time in which the server's RPM/TPM buckets admit the calls gptgate completed
    #: (benchmarks/family.py ``rate_floor_s``): no client completes them sooner; 0 unlimited
    rate_floor_s: float = 0.0


def _lost(gate: Client, other: Client, calls: int) -> tuple[float, str]:
    """Slack (points of the calls) and a note for calls gptgate failed beyond ``other``'s: a
    run that fails calls the other completed did not do the same job, however fast."""
    extra = gate.failed - other.failed
    return (-100 * extra / calls, f"; {extra} more calls failed") if extra > 0 else (ROOM, "")


def _job_time(
    other: Client, gate: Client, calls: int, rate_floor_s: float = 0.0
) -> tuple[float, str]:
    """``other``'s time for the calls gptgate completed, and a note: its own time, or — when
    it gave up on calls gptgate completed — its time per completed call over gptgate's
    completed calls. A job cut short is fast; timed as it ran, the client that gave up on a
    bounded queue's refusals would set gptgate's bound with a job of half the calls (family
    draw 6: the hand warm-up's 1,913 s were 182 of the 400 calls).

    That extrapolation is never below ``rate_floor_s``, the time the server's RPM/TPM limits
    take to admit gptgate's completed calls: a rate-limited client that gives up completes
    its calls out of the full bucket it started with, faster per call than the limit's pace
    that a whole job must keep (family draw 24, 62 RPM: the hand client's 167 calls in 105 s
    extrapolate to 252 s for 400, which the limit admits in no less than 327 s)."""
    if other.failed <= gate.failed:
        return other.time_s, ""
    done = max(1, calls - other.failed)
    per_call = other.time_s * (calls - gate.failed) / done
    if rate_floor_s > per_call:
        return rate_floor_s, (
            f" ({other.failed} of its calls failed: the server's rate limit's time for the "
            "calls, more than its time per completed call)"
        )
    return per_call, f" ({other.failed} of its calls failed: its time per completed call)"


def judge_cache(f: CacheFigures) -> list[Verdict]:
    best_name, best = max(
        (("plain", f.plain), ("hand", f.hand)),
        key=lambda nc: (nc[1].hit, -_job_time(nc[1], f.gate, f.calls, f.rate_floor_s)[0]),
    )
    hit_slack = 100 * (f.gate.hit - (best.hit - 0.02))
    best_s, best_note = _job_time(best, f.gate, f.calls, f.rate_floor_s)
    time_ratio = f.gate.time_s / best_s
    time_slack = 100 * (1.05 - time_ratio)
    lost_slack, lost = _lost(f.gate, best, f.calls)
    plain_s, plain_note = _job_time(f.plain, f.gate, f.calls, f.rate_floor_s)
    plain_ratio = f.gate.time_s / plain_s
    floor_hit = 100 * (f.gate.hit - (f.plain.hit - 0.05))
    floor_time = 100 * (1.10 - plain_ratio)
    floor_lost_slack, floor_lost = _lost(f.gate, f.plain, f.calls)
    return [
        Verdict(
            "cache",
            *_holds(hit_slack, time_slack, lost_slack),
            f"hit {f.gate.hit:.1%} vs {best_name} {best.hit:.1%} (−2 pts), "
            f"time {time_ratio:.2f}× {best_name}'s (≤ 1.05×){best_note}{lost}",
        ),
        Verdict(
            "cache floor",
            *_holds(floor_hit, floor_time, floor_lost_slack),
            f"hit {f.gate.hit - f.plain.hit:+.1%} vs plain (≥ −5 pts), "
            f"time {plain_ratio:.2f}× plain's (≤ 1.10×){plain_note}{floor_lost}",
        ),
    ]


# --------------------------------------------------------------------------- adaptive limit


@dataclass(frozen=True, slots=True)
class LimitRun:
    """One run of the adaptive job: a fixed limit, or ``auto`` (``limit`` None)."""

    limit: int | None
    goodput: float
    p99_s: float
    failed: int = 0


@dataclass(frozen=True, slots=True)
class AdaptiveFigures:
    fixed: tuple[LimitRun, ...]
    auto: LimitRun
    requests: int
    #: the cold-start bound: an oracle doubling once per latency from 4 straight to the best
    #: fixed limit (benchmarks/adaptive.py ``RampLimit``); informative, not judged
    ramp: LimitRun | None = None
    #: ``auto`` with ``signals=True`` (``--adaptive-signals``), judged by the same rule
    signals: LimitRun | None = None


def usable(fixed: Sequence[LimitRun], requests: int) -> list[LimitRun]:
    """The fixed limits that complete the job (≤ 1% failed), or all when none does."""
    return [r for r in fixed if r.failed <= 0.01 * requests] or list(fixed)


def judge_adaptive(f: AdaptiveFigures) -> list[Verdict]:
    verdicts = [_judge_auto("adaptive", f, f.auto)]
    if f.signals is not None:
        verdicts.append(_judge_auto("adaptive+signals", f, f.signals))
    return verdicts


def _judge_auto(rule: str, f: AdaptiveFigures, auto: LimitRun) -> Verdict:
    grid = usable(f.fixed, f.requests)
    best = max(grid, key=lambda r: r.goodput)
    ratio = auto.goodput / best.goodput if best.goodput else math.inf
    goodput_slack = 100 * (ratio - 0.95)
    # a fixed limit at least as fast as auto: its p99 must not be ≤ 0.8× auto's
    rivals = [r for r in grid if r.goodput >= auto.goodput]
    dominators = [r for r in rivals if r.p99_s <= 0.8 * auto.p99_s]
    domination_slack = min(
        (100 * (r.p99_s / auto.p99_s - 0.8) for r in rivals if auto.p99_s > 0),
        default=ROOM,
    )
    detail = f"goodput {ratio:.1%} of limit {best.limit}'s (≥ 95%)"
    reachable = None
    if f.ramp is not None and best.goodput:
        bound = f.ramp.goodput / best.goodput
        detail += f" [cold-start bound {bound:.1%}]"
        reachable = 100 * (bound - 0.95) >= -_EPSILON
    if dominators:
        top = min(dominators, key=lambda r: r.p99_s)
        detail += (f"; dominated by limit {top.limit}: goodput {top.goodput / auto.goodput:.2f}×,"
                   f" p99 {top.p99_s / auto.p99_s:.2f}× auto's (≤ 0.8×)")
    else:
        detail += "; not dominated"
    return Verdict(
        rule, _holds(goodput_slack)[0] and not dominators, min(goodput_slack, domination_slack),
        detail, reachable,
    )


# --------------------------------------------------------------------------- tiers


@dataclass(frozen=True, slots=True)
class TierFigures:
    calls: int
    auto_cost: float
    large_cost: float
    #: calls answered well (expected: a hard request answered by the small model counts as
    #: wrong with that model's hard-failure rate)
    auto_successes: float
    large_successes: float
    escalated: int
    #: escalations that changed nothing (``escalated_no_change``) or whose large call failed
    in_vain: int
    #: calls answered (None: all): cost is compared per answered call — the same job
    auto_answered: int | None = None
    large_answered: int | None = None


def judge_tiers(f: TierFigures) -> list[Verdict]:
    # per answered call: an everything-large run that leaves calls unanswered is not cheaper
    # for it (family draw 93: 598 answers against auto's 600, for 1.0003× the bill)
    auto_cost = f.auto_cost / (f.auto_answered or f.calls)
    large_cost = f.large_cost / (f.large_answered or f.calls)
    cost = auto_cost / large_cost if large_cost else math.inf
    success = f.auto_successes / f.large_successes if f.large_successes else 1.0
    vain = f.in_vain / f.calls
    cost_slack, success_slack = 100 * (1 - cost), 100 * (success - 0.99)
    return [
        Verdict(
            "tiers",
            *_holds(cost_slack, success_slack),
            f"cost {cost:.2f}× all-large (≤ 1×), success {success:.3f}× (≥ 0.99×)",
        ),
        Verdict(
            "tiers in vain",
            *_holds(100 * (0.02 - vain)),
            f"{f.in_vain} of {f.escalated} escalations changed nothing = {vain:.1%} of "
            f"{f.calls} calls (≤ 2%)",
        ),
    ]


# --------------------------------------------------------------------------- hedging


@dataclass(frozen=True, slots=True)
class HedgeFigures:
    stragglers: bool
    plain_p99_s: float
    hedged_p99_s: float
    plain_billed: int
    hedged_billed: int
    hedges: int = 0
    #: the job's concurrency
    c: int = 0
    #: the plain job's p99 on the same server with its stalls removed (each request's own
    #: jitter kept): about the best hedging the stalls alone can reach — shown, not judged
    floor_p99_s: float | None = None
    #: the oracle hedger's p99 (benchmarks/_hedge_oracle.py: every stall foreseen and
    #: duplicated at once, gptgate's hedging on top, ≤ 5% extra billed): above 0.7× the
    #: plain p99, no hedging policy meets the rule on the draw — shown, not judged
    oracle_p99_s: float | None = None


def _oracle_reach(f: HedgeFigures, p99_bound: float) -> bool | None:
    """Whether the oracle hedger met the p99 bound: whether any hedging could have."""
    if f.oracle_p99_s is None or not f.plain_p99_s:
        return None
    return f.oracle_p99_s / f.plain_p99_s <= p99_bound


def _oracle_note(f: HedgeFigures, p99_bound: float) -> str:
    """The oracle's p99 beside the verdict: whether any hedging could have met the rule."""
    reach = _oracle_reach(f, p99_bound)
    if reach is None or f.oracle_p99_s is None:
        return ""
    ratio = f.oracle_p99_s / f.plain_p99_s
    return f" [oracle {ratio:.2f}×: {'feasible' if reach else 'infeasible'}]"


def judge_hedge(f: HedgeFigures) -> list[Verdict]:
    p99 = f.hedged_p99_s / f.plain_p99_s if f.plain_p99_s else 1.0
    extra = f.hedged_billed / f.plain_billed - 1 if f.plain_billed else 0.0
    if f.stragglers:
        p99_bound, extra_bound = 0.7, 0.05
        text = f"stragglers: p99 {p99:.2f}× (≤ 0.7×), extra billed {extra:+.1%} (≤ 5%)"
    else:
        p99_bound, extra_bound = 1.02, 0.02
        text = f"no stragglers: p99 {p99:.2f}× (≤ 1.02×), extra billed {extra:+.1%} (≤ 2%)"
    p99_slack, extra_slack = 100 * (p99_bound - p99), 100 * (extra_bound - extra)
    return [
        Verdict(
            "hedge",
            *_holds(p99_slack, extra_slack),
            f"{text}, {f.hedges} hedges{_oracle_note(f, p99_bound)}",
            # without stragglers not hedging meets the rule: always within reach
            _oracle_reach(f, p99_bound) if f.stragglers else True,
        )
    ]


# --------------------------------------------------------------------------- the summary


@dataclass(frozen=True, slots=True)
class RuleSummary:
    rule: str
    judged: int
    held: int
    required: float
    #: the draw seed with the smallest margin, and that verdict
    worst_seed: int | None
    worst: Verdict | None
    #: of the draws the rule's bound says are within reach: how many, and how many held
    #: (0, 0: the rule has no bound)
    reachable: int = 0
    reachable_held: int = 0

    @property
    def share(self) -> float:
        return self.held / self.judged if self.judged else 1.0

    @property
    def holds(self) -> bool:
        return self.share >= self.required


def summarise(verdicts: Iterable[tuple[int, Verdict]]) -> list[RuleSummary]:
    """Per rule (in :data:`REQUIRED`'s order, those judged): draws held, the required share,
    and the worst draw. ``verdicts`` are (draw seed, verdict) pairs."""
    by_rule: dict[str, list[tuple[int, Verdict]]] = {}
    for seed, verdict in verdicts:
        by_rule.setdefault(verdict.rule, []).append((seed, verdict))
    summaries = []
    for rule, required in REQUIRED.items():
        judged = by_rule.get(rule)
        if not judged:
            continue
        worst_seed, worst = min(judged, key=lambda sv: (sv[1].margin, sv[0]))
        held = sum(v.ok for _, v in judged)
        reach = [v for _, v in judged if v.reachable]
        summaries.append(RuleSummary(rule, len(judged), held, required, worst_seed, worst,
                                     len(reach), sum(v.ok for v in reach)))
    return summaries
