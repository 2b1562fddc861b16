"""Servers of every shape (issue 31): gptgate against the simple strategies, on a seeded family.

Each **draw** is one server shape from the simulator's family (``draw(seed)``: every knob from
a realistic range — replicas, slots, queue, prefix spreading, cache lifetime, speed, USL
contention, jitter, stragglers, rate limits, answers that fill ``max_tokens``, a small model's
hard-failure rate). On every draw the same jobs run through gptgate and through what a user
would write instead, side by side in one run, on the in-process simulator under virtual time
(exact, seeded: a draw costs CPU, not wall time), and four judges decide the issue's rules
(benchmarks/_family_judges.py, where each rule and its required share are spelt out):

* **cache** — a prompt-order job (``--cache-calls`` calls over ``--cache-prompts`` long system
  prompts) at a cap of ``--cache-c`` (or what a bounded queue holds, if less: :func:`cap`):
  ``gate.map(..., scenario="batch_content")`` against the plain client (httpx +
  ``Semaphore(c)``) and the hand warm-up (each prefix's first call alone, the rest released
  together when it returns, same cap) — benchmarks/_strategies.py, the clients of
  benchmarks/cache.py. Each client runs the job ``--cache-repeats`` times on other engine
  seeds, pooled (one job's time is one long answer's luck: ±20% for the same client). The
  plain clients retry a 429/5xx after its ``retry-after`` (the
  simplest client for a server that refuses); every client waits up to an hour for a call;
* **adaptive** — ``concurrency="auto"`` against a grid of fixed limits (powers of two to 128
  plus ½, ¾, 1 and 1½ × the draw's replicas × slots) on benchmarks/adaptive.py's job
  (``--adaptive-requests`` independent calls through ``gate.map``; with ``--adaptive-waves W``
  at least W × the draw's replicas × slots, up to 128, so that on a big server the steady
  state decides, not the ramp from a cold start); with ``--adaptive-signals`` a second
  ``auto`` row with ``Backend(signals=True)`` reading the draw's ``/metrics`` (and ``/slots``
  on a llama.cpp flavor), judged by the same rule as "adaptive+signals";
* **tiers** — benchmarks/_tiers.py's mixed workload (``--tier-calls`` calls, 30% hard,
  Poisson 2/s) through ``tier="auto"`` and through the large tier alone; the large backend is
  the draw's server, the small one the small tier the family draws beside it
  (``draw(seed).small``), each with the draw's answer lengths;
* **hedge** — benchmarks/hedge.py's job (``--hedge-calls`` calls at ``--hedge-c``, at most
  one per slot of the draw) with ``hedge=True`` and without.

Output: the draws' shapes, one table per judge (per draw: its figures and holds/MISS), and a
summary: per rule, the draws that hold against the required share, and the worst draw (the
smallest margin) with the command that reruns it alone; beside it, not judged, how many of
the draws a bound says are within reach held (adaptive: the cold-start bound's goodput
≥ 95% of the best fixed limit's; hedge: the oracle hedger's p99 within the bound, or no
stragglers) — a rule no policy can meet on a draw is told apart from one gptgate misses.

    python benchmarks/family.py [--draws 20] [--seed 1] [--only cache,adaptive,tiers,hedge]
                                [--workers 1] [--cache-calls 400] [--cache-prompts 4]
                                [--cache-c 64] [--cache-repeats 3]
                                [--adaptive-requests 400]
                                [--adaptive-waves 0] [--adaptive-signals]
                                [--tier-calls 600]
                                [--hedge-calls 400] [--hedge-c 32]

Draw ``k`` of a run is ``draw(seed + k)``: ``--draws 1 --seed K`` reruns the draw with seed
``K`` alone. ``--workers`` runs draws on that many processes (the results do not depend on
it; the default is 1, for a CPU shared with others).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import operator
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import _tiers
import adaptive
import hedge
from _family_judges import (
    JUDGE_OF,
    AdaptiveFigures,
    CacheFigures,
    Client,
    HedgeFigures,
    LimitRun,
    RuleSummary,
    TierFigures,
    Verdict,
    judge_adaptive,
    judge_cache,
    judge_hedge,
    judge_tiers,
    summarise,
    usable,
)
from _hedge_oracle import oracle_p99
from _strategies import MAX_TOKENS, Messages, Run, ceiling, job, run_gptgate, run_hand, run_naive

from gptgate.sim import FamilyDraw, SimProfile, family_draw, run_virtual
from gptgate.sim.ratelimit import TokenBucket
from gptgate.tokens import estimate_prompt_tokens

JUDGES = ("cache", "adaptive", "tiers", "hedge")


@dataclass(frozen=True, slots=True)
class Sizes:
    """The jobs' sizes: small enough that 100 draws take minutes, not hours."""

    cache_calls: int = 400
    cache_prompts: int = 4
    cache_c: int = 64
    #: runs of the cache job per client, pooled (each on its own engine seed): one job's time
    #: is set by which long answer starts last — the same client moves ±20% between engine
    #: seeds on a draw (draw 7: plain 13.6–20.7 s), four times the rule's 5%
    cache_repeats: int = 3
    adaptive_requests: int = 400
    #: the adaptive job is at least this many waves of the draw's replicas × slots (≤ 128):
    #: 0 = ``adaptive_requests`` calls on every draw; 10 = long enough on a big server for the
    #: steady state, not the ramp from a cold start, to decide goodput
    adaptive_waves: int = 0
    #: a second ``auto`` row per draw with ``Backend(signals=True)`` (the server's own
    #: ``/metrics`` and ``/slots``), judged by the same rule as "adaptive+signals"
    adaptive_signals: bool = False
    tier_calls: int = 600
    tier_rate: float = 2.0
    tier_hard_share: float = 0.3
    hedge_calls: int = 400
    hedge_c: int = 32
    #: sends per call of the plain clients: a 429/5xx is retried after its retry-after until
    #: it gets through (the job is about caching, not about giving up)
    plain_attempts: int = 100
    #: every client's per-call timeout, gptgate's and the plain clients' alike: an hour, so
    #: that a slow draw's long answers queued behind a cap of 64 are waited for
    timeout_s: float = 3600.0


#: the command-line options of :class:`Sizes` (the others are fixed by the issue's jobs)
SIZE_OPTIONS = ("cache_calls", "cache_prompts", "cache_c", "cache_repeats", "adaptive_requests",
                "adaptive_waves", "tier_calls", "hedge_calls", "hedge_c")


# --------------------------------------------------------------------------- the draws


Draw = FamilyDraw


def draw(seed: int) -> Draw:
    """The draw with this seed: the family's server and the small tier beside it."""
    return family_draw(seed)


def shape(d: Draw) -> dict[str, str]:
    """The knobs a reader needs to picture the draw (the table's columns)."""
    p = d.server
    queue = "∞" if p.max_queue is None else f"{p.max_queue}→{p.queue_full_status}"
    low, high = p.straggler_s
    limits = "/".join("-" if v is None else f"{v:,}" for v in (p.rpm, p.tpm))
    return {
        "hw": f"{p.hardware}{'/llama' if p.flavor == 'llamacpp' else ''}",
        "shape": f"{p.replicas}×{p.slots}",
        "queue": queue,
        "spreads at": "never" if p.spread_in_flight is None else str(p.spread_in_flight),
        "call s": f"{d.call_s:.3g}",
        "ttl calls": f"{d.cache_calls:.3g}" + ("" if p.cache_refresh_on_hit else "!"),
        "knee": "∞" if math.isinf(p.knee) else f"{p.knee:.0f}",
        "out tok": f"{p.output_tokens_mean:.0f}",
        "stragglers": f"{p.straggler_rate:.1%}×{low:.1f}-{high:.1f}s"
        if p.straggler_rate else "-",
        "rpm/tpm": limits,
        "fills": "yes" if p.fills_max_tokens else "-",
        "small fails": f"{d.small.hard_failure_rate:.0%}"
        + (" fills" if d.small.fills_max_tokens else ""),
    }


# --------------------------------------------------------------------------- the judges' runs


def _client(run: Run) -> Client:
    return Client(run.hit, run.total_s, run.failed)


def cap(profile: SimProfile, wanted: int) -> int:
    """A job's concurrency cap on this server: ``wanted``, or what the server holds when its
    queue is bounded (replicas × (slots + queue)) if less — above it every client meets 429s
    and 503s by design, and the job is about refusals, not caching or tails."""
    if profile.max_queue is None:
        return wanted
    return max(1, min(wanted, profile.replicas * (profile.slots + profile.max_queue)))


#: the engine seeds of a draw's cache repeats are ``seed + REPEAT_SEED_STEP × k``
REPEAT_SEED_STEP = 10_000


def run_cache(d: Draw, sizes: Sizes) -> CacheFigures:
    """The cache job through the three clients, ``sizes.cache_repeats`` times each on engine
    seeds ``seed + 10,000 × k`` (the simulator's jitter and answer lengths), pooled: totals of
    time, tokens and failed calls over the repeats."""
    items = job(sizes.cache_prompts, sizes.cache_calls, d.seed)
    c, attempts, timeout = cap(d.server, sizes.cache_c), sizes.plain_attempts, sizes.timeout_s
    gptgate = functools.partial(run_gptgate, timeout=sizes.timeout_s)
    seeds = [d.seed + REPEAT_SEED_STEP * k for k in range(max(1, sizes.cache_repeats))]

    def pooled(client: Callable[..., Any], *extra: Any) -> Run:
        runs = [run_virtual(client, d.server, [items], c, seed, *extra) for seed in seeds]
        return functools.reduce(operator.add, runs)

    plain = pooled(run_naive, attempts, timeout)
    hand = pooled(run_hand, attempts, timeout)
    gate = pooled(gptgate)
    completed = len(items) - gate.failed // len(seeds)
    return CacheFigures(
        _client(plain), _client(hand), _client(gate), len(items) * len(seeds), ceiling(items), c,
        rate_floor_s(d.server, items, completed) * len(seeds),
    )


def rate_floor_s(profile: SimProfile, items: Sequence[Messages], completed: int) -> float:
    """The least time in which the server's RPM and TPM buckets (full at the start, refilled
    at the limit per minute; a request reserves ``prompt + max_tokens`` tokens, as the
    simulator charges) admit ``completed`` of the job's calls, the cheapest ones: the last
    admission's time, a bound no client beats (its answer still comes after)."""
    costs = sorted(estimate_prompt_tokens(m) + MAX_TOKENS for m in items)[:completed]
    floor = 0.0
    for limit, spent, window_s in (
        (profile.rpm, float(len(costs)), profile.rpm_window_s),  # a short window: Azure's
        (profile.tpm, float(sum(costs)), 60.0),
    ):
        if limit is None:
            continue
        bucket = TokenBucket(limit, 0.0, window_s)
        floor = max(floor, (spent - bucket.limit) / bucket.rate)
    return floor


def grid(profile: SimProfile) -> list[int]:
    """Fixed limits to judge ``auto`` against: powers of two up to the benchmark's bound,
    closer around the draw's slots (½, ¾, 1, 1½ × replicas × slots), where its edge is."""
    top = adaptive.MAX_CONCURRENCY
    capacity = profile.replicas * profile.slots
    near = {round(capacity * f) for f in (0.5, 0.75, 1.0, 1.5)}
    powers = {2**k for k in range(int(math.log2(top)) + 1)}
    return sorted(level for level in powers | near if 1 <= level <= top)


def _limit_run(row: adaptive.Row) -> LimitRun:
    return LimitRun(row.concurrency, row.goodput, row.p99_s, row.failed)


def run_adaptive(d: Draw, sizes: Sizes) -> AdaptiveFigures:
    capacity = min(adaptive.MAX_CONCURRENCY, d.server.replicas * d.server.slots)
    n = max(sizes.adaptive_requests, sizes.adaptive_waves * capacity)
    row = functools.partial(adaptive.run_row, timeout=sizes.timeout_s)
    fixed = tuple(_limit_run(run_virtual(row, d.server, c, n, d.seed)) for c in grid(d.server))
    auto = _limit_run(run_virtual(row, d.server, None, n, d.seed))
    signals = _limit_run(run_virtual(functools.partial(row, signals=True), d.server, None, n,
                                     d.seed)) if sizes.adaptive_signals else None
    # the bound for any cold start: an oracle ramp from 4 straight to the best usable fixed
    # limit, or to the smallest within 95% of it (a ramp's last doubling may overshoot one)
    grid_ok = usable(fixed, n)
    best = max(grid_ok, key=lambda r: r.goodput)
    edge = min((r for r in grid_ok if r.goodput >= 0.95 * best.goodput),
               key=lambda r: r.limit or 0)
    ramps = [
        _limit_run(run_virtual(adaptive.ramp_row, d.server, top, n, d.seed, sizes.timeout_s))
        for top in sorted({r.limit for r in (best, edge) if r.limit is not None})
    ]
    return AdaptiveFigures(fixed, auto, n, max(ramps, key=lambda r: r.goodput), signals)


def run_tiers(d: Draw, sizes: Sizes) -> TierFigures:
    items = _tiers.workload(sizes.tier_calls, sizes.tier_hard_share, d.seed)
    # the draw's own answer lengths: answers that stop early or run to max_tokens are knobs
    # of the family (output_tokens_mean, fills_max_tokens), on either tier
    small, large = d.small, d.server
    auto, everything_large = (
        run_virtual(_tiers.run, mode, items, sizes.tier_rate, d.seed, small, large, sizes.timeout_s)
        for mode in ("auto", "large")
    )

    def successes(run: _tiers.Run) -> float:
        # expected: which of the small model's answers to hard requests are wrong is decided
        # out of sight, at its drawn hard-failure rate (_tiers.expected_wrong)
        return run.ok - run.wrong

    return TierFigures(
        calls=len(items),
        auto_cost=auto.cost_usd,
        large_cost=everything_large.cost_usd,
        auto_successes=successes(auto),
        large_successes=successes(everything_large),
        escalated=auto.escalated,
        in_vain=auto.no_change + auto.escalation_failed,
        auto_answered=auto.ok,
        large_answered=everything_large.ok,
    )


def run_hedge(d: Draw, sizes: Sizes) -> HedgeFigures:
    # at most one call per slot: Tail at Scale's setting is a service with room for the
    # duplicate; past the slots the tail is the server's queue, which no hedge shortens
    c = min(sizes.hedge_c, d.server.replicas * d.server.slots)
    # paired: each request meets the same stall and jitter in both runs (its own seeded draw);
    # drawn in arrival order, a hedge's duplicates re-drew every later request's, and the p99
    # of 400 calls moved by up to 9% for one duplicate (benchmarks/hedge.py --paired)
    server = d.server.model_copy(update={"paired_draws": True})
    plain, hedged = (
        run_virtual(hedge.job, on, sizes.hedge_calls, d.seed, c, 1, False, server,
                    sizes.timeout_s)
        for on in (False, True)
    )
    floor = oracle = None
    if d.server.straggler_rate:
        calm = server.model_copy(update={"straggler_rate": 0.0})
        floor = run_virtual(hedge.job, False, sizes.hedge_calls, d.seed, c, 1, False, calm,
                            sizes.timeout_s).p99_s
        # the bound: a client that foresees every stall (benchmarks/_hedge_oracle.py)
        oracle = oracle_p99(server, sizes.hedge_calls, d.seed, c, sizes.timeout_s,
                            plain.billed_tokens)
    return HedgeFigures(
        stragglers=d.server.straggler_rate > 0,
        plain_p99_s=plain.p99_s,
        hedged_p99_s=hedged.p99_s,
        plain_billed=plain.billed_tokens,
        hedged_billed=hedged.billed_tokens,
        hedges=hedged.hedges,
        c=c,
        floor_p99_s=floor,
        oracle_p99_s=oracle,
    )


Figures = CacheFigures | AdaptiveFigures | TierFigures | HedgeFigures
RUNS: dict[str, Callable[[Draw, Sizes], Any]] = {
    "cache": run_cache,
    "adaptive": run_adaptive,
    "tiers": run_tiers,
    "hedge": run_hedge,
}
JUDGE: dict[str, Callable[[Any], list[Verdict]]] = {
    "cache": judge_cache,
    "adaptive": judge_adaptive,
    "tiers": judge_tiers,
    "hedge": judge_hedge,
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One judge on one draw: its figures, its verdicts and the CPU seconds it took."""

    seed: int
    judge: str
    figures: Any
    verdicts: list[Verdict]
    cpu_s: float


def judge_draw(seed: int, judge: str, sizes: Sizes) -> Outcome:
    """Run one judge on the draw ``seed``: cheap enough for a test at tiny sizes."""
    start = time.process_time()
    figures = RUNS[judge](draw(seed), sizes)
    return Outcome(seed, judge, figures, JUDGE[judge](figures), time.process_time() - start)


def _task(task: tuple[int, str, Sizes]) -> Outcome:
    return judge_draw(*task)


def run_all(seeds: Sequence[int], judges: Sequence[str], sizes: Sizes, workers: int
            ) -> list[Outcome]:
    tasks = [(seed, judge, sizes) for seed in seeds for judge in judges]
    outcomes: list[Outcome] = []

    def progress(outcome: Outcome) -> None:  # on stderr: the tables go to stdout at the end
        outcomes.append(outcome)
        print(f"\r{len(outcomes)}/{len(tasks)} judged (draw {outcome.seed} {outcome.judge})",
              end="", file=sys.stderr, flush=True)

    if workers <= 1:
        for task in tasks:
            progress(_task(task))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for outcome in pool.map(_task, tasks, chunksize=1):
                progress(outcome)
    print(file=sys.stderr)
    return outcomes


# --------------------------------------------------------------------------- printing


def _figures_text(o: Outcome) -> str:
    f = o.figures
    if isinstance(f, CacheFigures):
        return (
            f"c={f.c} ceiling {f.ceiling:.1%} | plain {f.plain.hit:.1%} {f.plain.time_s:6.1f}s | "
            f"hand {f.hand.hit:.1%} {f.hand.time_s:6.1f}s | gate {f.gate.hit:.1%} "
            f"{f.gate.time_s:6.1f}s | failed {f.plain.failed}/{f.hand.failed}/{f.gate.failed}"
        )
    if isinstance(f, AdaptiveFigures):
        best = max(f.fixed, key=lambda r: r.goodput)
        signals = "" if f.signals is None else (
            f"+signals {f.signals.goodput:6.2f}/s p99 {f.signals.p99_s:6.2f}s | "
        )
        return (
            f"auto {f.auto.goodput:6.2f}/s p99 {f.auto.p99_s:6.2f}s | {signals}"
            f"best fixed {best.limit:>3}: "
            f"{best.goodput:6.2f}/s p99 {best.p99_s:6.2f}s | grid "
            + ",".join(str(r.limit) for r in f.fixed)
        )
    if isinstance(f, TierFigures):
        return (
            f"success auto {f.auto_successes:.1f}/large {f.large_successes:.1f} of {f.calls} | "
            f"cost ${f.auto_cost:.4f}/${f.large_cost:.4f} | escalated {f.escalated}"
        )
    assert isinstance(f, HedgeFigures)
    floor = "" if f.floor_p99_s is None else (
        f" | floor {f.floor_p99_s:6.2f}s ({f.floor_p99_s / f.plain_p99_s:.2f}×)"
    )
    if f.oracle_p99_s is not None:
        floor += f" | oracle {f.oracle_p99_s:6.2f}s ({f.oracle_p99_s / f.plain_p99_s:.2f}×)"
    return (
        f"c={f.c} stragglers {'yes' if f.stragglers else 'no ':<3} | p99 {f.plain_p99_s:6.2f}→"
        f"{f.hedged_p99_s:6.2f}s | billed {f.plain_billed:,}→{f.hedged_billed:,} | "
        f"hedges {f.hedges}{floor}"
    )


def print_shapes(seeds: Sequence[int]) -> None:
    rows = {seed: shape(draw(seed)) for seed in seeds}
    cols = list(next(iter(rows.values())))
    widths = {c: max(len(c), *(len(r[c]) for r in rows.values())) for c in cols}
    head = f"{'draw':>6} " + " ".join(f"{c:>{widths[c]}}" for c in cols)
    print(f"## the draws\n{head}\n{'-' * len(head)}")
    for seed, row in rows.items():
        print(f"{seed:>6} " + " ".join(f"{row[c]:>{widths[c]}}" for c in cols))
    print("(queue N→status: bounded, refused with that status; spreads at: a prefix's calls in "
          "flight on its home replica; call s: one typical call alone; ttl calls: cache lifetime "
          "in such calls, ! = not refreshed by a hit; knee: the USL batch of peak throughput per "
          "replica; out tok: mean answer length; fills: answers run to max_tokens)")


def print_judge(judge: str, outcomes: Sequence[Outcome]) -> None:
    mine = [o for o in outcomes if o.judge == judge]
    if not mine:
        return
    cpu = sum(o.cpu_s for o in mine)
    print(f"\n## {judge} ({cpu:.0f} s CPU, {cpu / len(mine):.1f} s a draw)")
    for o in mine:
        marks = " ".join(f"[{'holds' if v.ok else 'MISS'}] {v.rule}: {v.detail}"
                         for v in o.verdicts)
        print(f"{o.seed:>6} {_figures_text(o)}\n       {marks}")


def rerun(seed: int, judge: str, sizes: Sizes) -> str:
    return f"python benchmarks/family.py --draws 1 --seed {seed} --only {judge}" + size_flags(sizes)


def size_flags(sizes: Sizes) -> str:
    default = Sizes()
    return "".join(
        f" --{name.replace('_', '-')} {getattr(sizes, name)}"
        for name in SIZE_OPTIONS
        if getattr(sizes, name) != getattr(default, name)
    ) + (" --adaptive-signals" if sizes.adaptive_signals else "")


def print_summary(summaries: Sequence[RuleSummary], sizes: Sizes) -> None:
    print("\n## summary")
    head = (f"{'rule':<16} {'draws held':>10} {'share':>7} {'required':>8} {'verdict':>13}  "
            "worst draw")
    print(f"{head}\n{'-' * len(head)}")
    for s in summaries:
        worst = s.worst
        assert worst is not None and s.worst_seed is not None
        print(
            f"{s.rule:<16} {f'{s.held}/{s.judged}':>10} {s.share:>7.0%} {s.required:>8.0%} "
            f"{'holds' if s.holds else 'DOES NOT HOLD':>13}  seed {s.worst_seed} "
            f"(margin {worst.margin:+.1f} pts): {worst.detail}"
        )
    bounded = [s for s in summaries if s.reachable]
    if bounded:  # informative: the rule is the table above
        print("\non the draws the rule's bound says are within reach (adaptive: the cold-start "
              "bound's goodput ≥ 95%; hedge: the oracle hedger's p99 within the bound, or no "
              "stragglers) — shown, not the rule:")
        for s in bounded:
            print(f"  {s.rule:<16} {s.reachable_held}/{s.reachable} held "
                  f"({s.reachable_held / s.reachable:.0%}) of {s.judged} draws")
    print("\nrerun the worst draw of a rule alone:")
    for s in summaries:
        assert s.worst_seed is not None
        print(f"  {s.rule:<16} {rerun(s.worst_seed, JUDGE_OF[s.rule], sizes)}")


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Sizes, list[str]]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1, help="the first draw's seed")
    parser.add_argument("--only", default=",".join(JUDGES),
                        help="comma-separated judges: " + ", ".join(JUDGES))
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    default = Sizes()
    for name in SIZE_OPTIONS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(default, name))
    parser.add_argument("--adaptive-signals", action="store_true",
                        help="a second auto row per draw with signals=True (the server's own "
                             "/metrics, /slots), judged as adaptive+signals")
    args = parser.parse_args(argv)
    judges = [j for j in args.only.split(",") if j]
    unknown = sorted(set(judges) - set(JUDGES))
    if unknown or not judges:
        parser.error(f"--only takes {', '.join(JUDGES)}; got {args.only!r}")
    if args.draws < 1:
        parser.error("--draws must be at least 1")
    for name in SIZE_OPTIONS:
        least = 0 if name == "adaptive_waves" else 1
        if getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}")
    sizes = dataclasses.replace(default, **{n: getattr(args, n) for n in SIZE_OPTIONS},
                                adaptive_signals=args.adaptive_signals)
    return args, sizes, judges


def main(argv: Sequence[str] | None = None) -> int:
    args, sizes, judges = parse(argv)
    only = "" if judges == list(JUDGES) else f" --only {','.join(judges)}"
    print(f"$ python benchmarks/family.py --draws {args.draws} --seed {args.seed}{only}"
          f"{size_flags(sizes)} --workers {args.workers}")
    print(f"sizes: {sizes}; virtual time (exact, seeded)\n")
    seeds = [args.seed + k for k in range(args.draws)]
    wall = time.perf_counter()
    outcomes = run_all(seeds, judges, sizes, args.workers)
    print_shapes(seeds)
    for judge in judges:
        print_judge(judge, outcomes)
    summaries = summarise((o.seed, v) for o in outcomes for v in o.verdicts)
    print_summary(summaries, sizes)
    cpu = sum(o.cpu_s for o in outcomes)
    print(f"\n(wall time {time.perf_counter() - wall:.0f} s on {args.workers} process(es); "
          f"{cpu:.0f} s CPU in the judges, {cpu / len(seeds):.1f} s a draw)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
