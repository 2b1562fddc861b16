"""Adaptive concurrency: ``concurrency="auto"`` against every fixed limit, per backend profile.

For each simulator profile (hidden capacities and rate limits differ, so no knee can be
hard-coded): fixed limits 1, 5, 10, 20, 30, 50, 80 and ``auto`` run the same workload through
``gate.map`` on virtual time (exact and repeatable; costs only CPU). Columns: the field
U-curve's (docs/background.md) plus p50/p99 of the backend latency, billed tokens per success
(the simulator's ledger), retries and 429s. Then a capacity change: the backend is halved
mid-run and the limit's trace is printed (and plotted to benchmarks/out/adaptive-<profile>.png
when matplotlib is present).

Targets (issue #3, judged as issue 14 decided), per profile × length: goodput and p99 are
judged on the seeds pooled — the median over ``--seeds`` (11–17) of each fixed limit's and of
auto's figure — not per run (which fixed limit is "best" flips between seeds on noise): auto's
median goodput ≥ 95% of the best fixed limit's, its median p99 ≤ 1.25× the median p99 of the
smallest fixed limit within 10% of the best; after the capacity change the limit settles
within 250 calls (median over the seeds). Billed tokens per success ≤ 1.02× the minimum over
fixed limits, 0 failed calls and 429s ≤ 1% of calls hold in every run. The per-run figures are
printed beside the pooled verdict.

    python benchmarks/adaptive.py [--profiles tpu,gpu,cpu,gpu-small,tier1,plateau]
                                  [--requests 1000] [--seeds 11,12,13,14,15,16,17]
                                  [--levels 1,5,10,20,30,50,80] [--workers 2]
                                  [--png PATH]

The fixed grid reaches each backend's own bound (``LEVELS_BY_PROFILE``: tpu up to 128, its
slots and the benchmark's ``max_concurrency``), so the p99 reference is never just the top of
a grid that stops below the knee. ``--levels`` replaces it for every profile.

``--png PATH`` writes one figure (needs matplotlib): per profile, the median goodput and p99
against the fixed limit with ``auto``'s marked, and the first seed's limit through the halving.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

import gptgate as gg
from gptgate.limits import Limit, Sample
from gptgate.sim import LoopClock, SimEngine, SimProfile, get_profile, run_virtual
from gptgate.testing import sim_backend

LEVELS: tuple[int, ...] = (1, 5, 10, 20, 30, 50, 80)
#: per profile, a grid that reaches the backend's own bound (issue 14): tpu's knee (~158 per
#: replica) lies above 80, so its grid goes on to its 128 slots; plateau's flat stretch
#: (8–32) is scanned closely, or the smallest limit holding its goodput is not in the grid
LEVELS_BY_PROFILE: dict[str, tuple[int, ...]] = {
    "tpu": (*LEVELS, 96, 112, 128),
    "plateau": (1, 4, 6, 8, 12, 16, 24, 32, 64, 128),
}
#: the plateau's neighbours (issue 31): its edge at 4 or 16 slots, and more contention per
#: batch (throughput still flat past the slots). By name like the simulator's profiles
_PLATEAU = get_profile("plateau")
VARIANTS: dict[str, SimProfile] = {
    name: _PLATEAU.model_copy(update={"name": name, **change})
    for name, change in (
        ("plateau-4", {"slots": 4}),
        ("plateau-16", {"slots": 16}),
        ("plateau-usl", {"usl_sigma": 0.03, "usl_kappa": 0.0005}),
    )
}
LEVELS_BY_PROFILE.update(
    {
        "plateau-4": (1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128),
        "plateau-16": (1, 4, 8, 12, 16, 20, 24, 32, 64, 128),
        "plateau-usl": LEVELS_BY_PROFILE["plateau"],
    }
)
SEED_LIST: tuple[int, ...] = (11, 12, 13, 14, 15, 16, 17)
PROFILES = "tpu,gpu,cpu,gpu-small,tier1,plateau"
OUT = Path(__file__).resolve().parent / "out"
#: the backend's bound for every run, auto included (a fixed limit needs room too)
MAX_CONCURRENCY = 128
#: closed-loop workers in the capacity-change run (more than any limit it should reach)
WORKERS = 160


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    concurrency: int | None  # None for auto
    total_s: float
    goodput: float
    mean_s: float
    p50_s: float
    p99_s: float
    billed_per_ok: float
    retries: int
    rate_limited: int
    failed: int
    final_limit: int


def workload(n: int, seed: int) -> list[dict[str, Any]]:
    """Independent bulk-content calls: ~1,900 prompt tokens, ≤ 400 answer tokens (the field
    U-curve's job)."""
    body = "Assess the listing for accuracy, tone and policy compliance. " * 120
    return [
        {
            "messages": [
                {"role": "system", "content": f"[{seed}:{i}] {body}"},
                {"role": "user", "content": f"Listing #{i}: walnut desk, {i % 9} drawers."},
            ],
            "max_tokens": 400,
        }
        for i in range(n)
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def backend_for(
    profile: str | SimProfile,
    concurrency: int | str,
    clock: LoopClock,
    seed: int,
    timeout: float = 120.0,
    signals: bool = False,
) -> tuple[gg.Backend, SimEngine]:
    """The profile's simulated backend; with ``signals``, ``signals=True`` as a user of the
    server it imitates would configure it (``provider`` vllm, or llamacpp for a llama.cpp
    flavor, so that ``/slots`` is read too; the default interval)."""
    options: dict[str, Any] = {}
    if signals:
        flavor = profile.flavor if isinstance(profile, SimProfile) else get_profile(profile).flavor
        options = {"signals": True, "provider": "llamacpp" if flavor == "llamacpp" else "vllm"}
    return sim_backend(
        profile,
        name=profile_name(profile),
        clock=clock,
        seed=seed,
        concurrency=concurrency,
        max_concurrency=MAX_CONCURRENCY,
        timeout=timeout,
        **options,
    )


def profile_name(profile: str | SimProfile) -> str:
    """The backend's name: the profile's (benchmarks/family.py passes drawn profiles)."""
    return profile if isinstance(profile, str) else profile.name


async def run_row(
    profile: str | SimProfile,
    concurrency: int | None,
    requests: int,
    seed: int,
    state: dict[str, Any] | None = None,
    label: str | None = None,
    timeout: float = 120.0,
    limit: Limit | None = None,
    signals: bool = False,
) -> Row:
    """One measured run: a fixed limit, or ``auto`` (started from ``state`` when given); with
    ``limit``, that limit object instead (pool sized for ``concurrency``); with ``signals``,
    the backend reads the server's own load (``Backend(signals=True)``)."""
    clock = LoopClock()
    backend, engine = backend_for(profile, concurrency or "auto", clock, seed, timeout, signals)
    async with gg.Gateway([backend], clock=clock, seed=seed, state=state) as gate:
        if limit is not None:
            gate.backend_state(profile_name(profile)).limiter.limit = limit
        start = clock.now()
        results = await gate.map(workload(requests, seed), scenario="default")
        total = clock.now() - start
        stats = gate.stats()[profile_name(profile)]
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    service = [r.latency_s - r.queue_s for r in ok]
    ledger = engine.ledger.snapshot()
    return Row(
        label=label or (str(concurrency) if concurrency else "auto"),
        concurrency=concurrency,
        total_s=total,
        goodput=len(ok) / total if total else 0.0,
        mean_s=statistics.fmean(service) if service else float("nan"),
        p50_s=percentile(service, 0.5),
        p99_s=percentile(service, 0.99),
        billed_per_ok=ledger.billed_tokens / len(ok) if ok else float("inf"),
        retries=stats.retries,
        rate_limited=ledger.rate_limited,
        failed=len(results) - len(ok),
        final_limit=stats.limit,
    )


class RampLimit:
    """An oracle's cold start, the bound for any: from ``initial`` it doubles as soon as the
    first call admitted at the current level completes (one latency per doubling, as TCP's
    slow start, with no window to measure) and stops exactly at ``top`` — the best fixed
    limit, known in advance. A job shorter than a few waves of ``top`` is mostly this ramp:
    what it reaches is as much of the best fixed limit's goodput as a limit starting cold at
    ``initial`` can (benchmarks/family.py prints it beside ``auto``)."""

    def __init__(self, top: int, initial: int = 4) -> None:
        self.top = top
        self._limit = min(initial, top)
        self._level_from = -float("inf")  # when the current level began

    @property
    def limit(self) -> int:
        return self._limit

    def update(self, sample: Sample, now: float) -> None:
        if sample.kind == "ok" and self._limit < self.top and sample.start >= self._level_from:
            self._limit = min(2 * self._limit, self.top)
            self._level_from = now


async def ramp_row(
    profile: str | SimProfile, top: int, requests: int, seed: int, timeout: float = 120.0
) -> Row:
    """The job under :class:`RampLimit` to ``top``: the cold-start bound."""
    return await run_row(profile, top, requests, seed, label=f"ramp to {top}", timeout=timeout,
                         limit=RampLimit(top))


async def warm_row(profile: str | SimProfile, requests: int, seed: int) -> Row:
    """``auto`` started from the snapshot of an earlier run of the same profile (another
    seed, the same length): what a gateway restarted an hour later does with ``state=``."""
    earlier = LoopClock()
    backend, _ = backend_for(profile, "auto", earlier, seed + 1000)
    async with gg.Gateway([backend], clock=earlier, seed=seed + 1000) as gate:
        await gate.map(workload(requests, seed + 1000), scenario="default")
        state = gate.snapshot()
    return await run_row(profile, None, requests, seed, state=state, label="warm")


def warm_verdict(rows: list[Row], warm: Row, requests: int) -> tuple[str, bool, str]:
    """Warm start (issue 14): goodput ≥ 95% of the best fixed limit's."""
    best, _ = references([r for r in rows if r.concurrency is not None], requests)
    return (
        "warm start goodput ≥ 95% of best fixed",
        warm.goodput >= 0.95 * best.goodput,
        f"{warm.goodput / best.goodput:.1%} of limit {best.label}",
    )


async def capacity_change(
    profile: str | SimProfile, requests: int, seed: int, workers: int = 0
) -> tuple[list[tuple[int, float, int]], int, int]:
    """Halve the backend after 40% of the calls; returns the per-completion trace
    (index, time, limit), the index of the change and how many calls failed."""
    clock = LoopClock()
    backend, engine = backend_for(profile, "auto", clock, seed)
    items = workload(requests, seed)
    change_at = int(requests * 0.4)
    workers = workers or WORKERS
    trace: list[tuple[int, float, int]] = []
    next_item = 0
    failures: list[int] = []

    async with gg.Gateway([backend], clock=clock, seed=seed) as gate:
        limiter = gate.backend_state(profile_name(profile)).limiter

        async def worker() -> None:
            nonlocal next_item
            while next_item < len(items):
                item = dict(items[next_item])
                next_item += 1
                messages = item.pop("messages")
                try:
                    await gate.chat(messages, **item)
                except gg.GateError:
                    failures.append(len(trace))
                # the controller's centre: LLMLimit probes ±8% around it by design, so the
                # raw limit never "stays" anywhere; fixed/other limits report the limit itself
                centre = getattr(limiter.limit, "center", limiter.current_limit)
                trace.append((len(trace), clock.now(), round(centre)))
                if len(trace) == change_at:
                    engine.set_capacity(0.5)

        async with anyio.create_task_group() as tg:
            for _ in range(workers):
                tg.start_soon(worker)
    return trace, change_at, len(failures)


def settle_calls(
    trace: list[tuple[int, float, int]], change_at: int, drain: int = 0
) -> tuple[int, float]:
    """Calls after the change until the limit's centre stays within ±20% of where it ends up
    (the median over the last quarter of the run) — and at least ±1: a limit is a whole number,
    so around a final 2 the band must admit 1 and 3, or the smallest possible move would count
    as unsettled. The last ``drain`` completions are left out: there the workers run out of
    items and in-flight falls — not sustained load."""
    trace = trace[: len(trace) - drain] if drain else trace
    tail = [limit for _, _, limit in trace[-max(1, len(trace) // 4) :]]
    final = statistics.median(tail)
    band = max(0.2 * final, 1.0)
    low, high = final - band, final + band
    settled = len(trace)
    for index in range(len(trace) - 1, change_at - 1, -1):
        if not low <= trace[index][2] <= high:
            break
        settled = index
    return settled - change_at, final


def plot(profile: str, trace: list[tuple[int, float, int]], change_at: int) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    OUT.mkdir(exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot([t for _, t, _ in trace], [limit for _, _, limit in trace], lw=1.2)
    ax.axvline(trace[change_at][1], color="red", ls="--", label="capacity halved")
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("concurrency limit")
    ax.set_title(f"gptgate auto limit — profile {profile}")
    ax.legend(loc="upper right")
    fig.tight_layout()
    path = OUT / f"adaptive-{profile}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def plot_png(
    path: str,
    curves: dict[str, list[Row]],
    traces: dict[str, tuple[list[tuple[int, float, int]], int]],
    seeds: Sequence[int],
) -> None:
    """Per profile (one row of panels): goodput and p99 against the fixed limit, ``auto``'s as
    horizontal lines — the U-curve and where auto lands on it — and the limit's trace through
    the capacity halving."""
    import matplotlib  # lazily: the tables need no plotting library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(curves), 2, figsize=(10, 3 * len(curves)), squeeze=False)
    for (profile, rows), (left, right) in zip(curves.items(), axes, strict=True):
        fixed = [r for r in rows if r.concurrency is not None]
        auto = next(r for r in rows if r.concurrency is None)
        x = [r.concurrency or 0 for r in fixed]
        left.plot(x, [r.goodput for r in fixed], "o-", color="tab:blue", label="goodput, fixed")
        left.axhline(auto.goodput, color="tab:blue", ls="--", label="goodput, auto")
        left.set_xscale("log")
        left.set_xticks(x, [str(c) for c in x])
        left.minorticks_off()
        left.set_xlabel("fixed concurrency limit")
        left.set_ylabel("goodput (calls/s)", color="tab:blue")
        p99 = left.twinx()
        p99.plot(x, [r.p99_s for r in fixed], "s-", color="tab:red", label="p99, fixed")
        p99.axhline(auto.p99_s, color="tab:red", ls=":", label="p99, auto")
        p99.set_ylabel("p99 latency (s)", color="tab:red")
        over = f"median over seeds {seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
        left.set_title(f"{profile}: {over}", fontsize=9)
        handles = left.get_legend_handles_labels()
        extra = p99.get_legend_handles_labels()
        left.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=7, loc="center left")
        trace, change_at = traces[profile]
        right.plot([t for _, t, _ in trace], [limit for _, _, limit in trace], lw=1.2)
        right.axvline(trace[change_at][1], color="red", ls="--", label="capacity halved")
        right.set_xlabel("simulated seconds")
        right.set_ylabel("auto limit (centre)")
        right.set_title(f"{profile}: capacity halved mid-run, seed {seeds[0]}", fontsize=9)
        right.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def table(profile: str, rows: list[Row]) -> str:
    p = profile_of(profile)
    head = (
        f"profile {profile}: {p.hardware}, {p.replicas}×{p.slots} slots, rpm={p.rpm}, "
        f"hidden knee≈{p.knee:.0f}/replica"
    )
    cols = (
        f"{'limit':>6} {'total s':>8} {'goodput/s':>10} {'mean s':>7} {'p50 s':>6} {'p99 s':>6} "
        f"{'tok/ok':>7} {'retries':>8} {'429s':>5} {'failed':>7} {'final':>6}"
    )
    lines = [head, cols, "-" * len(cols)]
    for r in rows:
        lines.append(
            f"{r.label:>6} {r.total_s:>8.0f} {r.goodput:>10.2f} {r.mean_s:>7.2f} {r.p50_s:>6.2f} "
            f"{r.p99_s:>6.2f} {r.billed_per_ok:>7.0f} {r.retries:>8} {r.rate_limited:>5} "
            f"{r.failed:>7} {r.final_limit:>6}"
        )
    return "\n".join(lines)


def references(fixed: list[Row], requests: int) -> tuple[Row, Row]:
    """The best fixed limit and the p99 reference (the smallest limit within 10% of its
    goodput), among the fixed limits that complete the job: one that fails more than 1% of
    its calls (the bar for 429s) ends its run early on fast failures — gpu-small at 80 fails
    three calls in four and "wins" on goodput — and is no setting anyone would run."""
    usable = [r for r in fixed if r.failed <= 0.01 * requests] or fixed
    best = max(usable, key=lambda r: r.goodput)
    near = min(
        (r for r in usable if r.goodput >= 0.9 * best.goodput), key=lambda r: r.concurrency or 0
    )
    return best, near


def dominating(fixed: list[Row], auto: Row, requests: int) -> Row | None:
    """The fixed limit that dominates ``auto`` (issue 31's rule, benchmarks/family.py's
    judge): at least auto's goodput at ≤ 0.8× its p99 — the lowest such p99 — or None.
    Fixed limits failing more than 1% of their calls are left out, as in :func:`references`."""
    usable = [r for r in fixed if r.failed <= 0.01 * requests] or fixed
    rivals = [r for r in usable if r.goodput >= auto.goodput and r.p99_s <= 0.8 * auto.p99_s]
    return min(rivals, key=lambda r: r.p99_s, default=None)


def levels_for(profile: str) -> tuple[int, ...]:
    """The fixed grid ``auto`` is judged against on ``profile``."""
    return LEVELS_BY_PROFILE.get(profile, LEVELS)


def pooled(runs: Sequence[Sequence[Row]]) -> list[Row]:
    """One row per limit: the median over the runs (seeds) of each figure (issue 14: the
    reference flip between fixed limits from one seed to the next is noise)."""

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    rows: list[Row] = []
    for same in zip(*runs, strict=True):
        first = same[0]
        rows.append(
            Row(
                label=first.label,
                concurrency=first.concurrency,
                total_s=med([r.total_s for r in same]),
                goodput=med([r.goodput for r in same]),
                mean_s=med([r.mean_s for r in same]),
                p50_s=med([r.p50_s for r in same]),
                p99_s=med([r.p99_s for r in same]),
                billed_per_ok=med([r.billed_per_ok for r in same]),
                retries=round(med([r.retries for r in same])),
                rate_limited=round(med([r.rate_limited for r in same])),
                failed=round(med([r.failed for r in same])),
                final_limit=round(med([r.final_limit for r in same])),
            )
        )
    return rows


def per_run(rows: list[Row], requests: int, settle: int) -> str:
    """One run's goodput and p99 against its own references, and its settling: the per-run
    table kept beside the pooled verdict."""
    fixed = [r for r in rows if r.concurrency is not None]
    auto = next(r for r in rows if r.concurrency is None)
    best, near = references(fixed, requests)
    rival = dominating(fixed, auto, requests)
    return (
        f"{auto.goodput / best.goodput:.1%} of {best.label} / "
        f"{auto.p99_s / near.p99_s:.2f}× {near.label}'s / settle {settle} / "
        + (f"dominated by {rival.label}" if rival else "not dominated")
    )


def verdicts(
    rows: list[Row], requests: int, settle: float, runs: Sequence[Sequence[Row]] = ()
) -> list[tuple[str, bool, str]]:
    """The targets as issue 14 decided: goodput, p99 and settling on ``rows`` — the pooled
    (median) rows of ``runs``, or one run's own — and tokens per success, failures and 429s
    in every run of ``runs`` (``rows`` alone when none are given)."""
    every = list(runs) or [rows]
    fixed = [r for r in rows if r.concurrency is not None]
    auto = next(r for r in rows if r.concurrency is None)
    best, near = references(fixed, requests)
    rival = dominating(fixed, auto, requests)

    def auto_of(run: Sequence[Row]) -> Row:
        return next(r for r in run if r.concurrency is None)

    tokens = max(
        auto_of(run).billed_per_ok / min(r.billed_per_ok for r in run if r.concurrency)
        for run in every
    )
    failed = sum(auto_of(run).failed for run in every)
    limited = max(auto_of(run).rate_limited for run in every)
    runs_note = f" (worst of {len(every)} runs)" if len(every) > 1 else ""
    return [
        (
            "goodput ≥ 95% of best fixed",
            auto.goodput >= 0.95 * best.goodput,
            f"{auto.goodput / best.goodput:.1%} of limit {best.label}",
        ),
        (
            "p99 ≤ 1.25× smallest near-best",
            auto.p99_s <= 1.25 * near.p99_s,
            f"{auto.p99_s / near.p99_s:.2f}× limit {near.label}'s",
        ),
        (
            "not dominated (issue 31)",
            rival is None,
            "no fixed limit has auto's goodput at ≤ 0.8× its p99"
            if rival is None
            else f"limit {rival.label}: {rival.goodput / auto.goodput:.1%} of auto's goodput "
            f"at {rival.p99_s / auto.p99_s:.2f}× its p99",
        ),
        ("tokens/success ≤ 1.02× min", tokens <= 1.02, f"{tokens:.3f}×{runs_note}"),
        ("0 failed", failed == 0, f"{failed} failed in all"),
        ("429s ≤ 1%", limited <= 0.01 * requests, f"{limited} 429s{runs_note}"),
        ("settles ≤ 250 calls after halving", settle <= 250, f"{settle:.0f} calls"),
    ]


Key = tuple[str, int, int, int | None]  # profile, requests, seed, fixed limit (None: auto)


def profile_of(name: str) -> SimProfile:
    """A simulator profile or one of :data:`VARIANTS`, by name."""
    return VARIANTS.get(name) or get_profile(name)


def _row(key: Key) -> Row:
    profile, requests, seed, limit = key
    return run_virtual(run_row, profile_of(profile), limit, requests, seed)


def _warm(key: tuple[str, int, int]) -> Row:
    profile, requests, seed = key
    return run_virtual(warm_row, profile_of(profile), requests, seed)


def _halving(key: tuple[str, int, int]) -> tuple[list[tuple[int, float, int]], int, int]:
    profile, requests, seed = key
    return run_virtual(capacity_change, profile_of(profile), int(requests * 1.5), seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default=PROFILES)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument(
        "--seeds",
        default=",".join(map(str, SEED_LIST)),
        help="seeds pooled for the verdict (the median over them)",
    )
    parser.add_argument("--seed", type=int, default=None, help="one seed only (no pooling)")
    parser.add_argument(
        "--levels",
        default="",
        help="fixed limits to compare auto against, for every profile (at most the backend's "
        f"max, {MAX_CONCURRENCY}); default: each profile's grid, up to its bound",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="add a row: auto started from the snapshot of an earlier run (Gateway(state=))",
    )
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument(
        "--png", default=None, metavar="PATH", help="also write the figure to PATH (matplotlib)"
    )
    args = parser.parse_args()
    try:
        levels = sorted({int(level) for level in args.levels.split(",")}) if args.levels else []
        seeds = [args.seed] if args.seed is not None else [int(x) for x in args.seeds.split(",")]
    except ValueError:
        parser.error("--levels and --seeds take comma-separated integers")
    if levels and not 1 <= levels[0] <= levels[-1] <= MAX_CONCURRENCY:
        parser.error(f"--levels must be limits between 1 and {MAX_CONCURRENCY}")
    profiles = args.profiles.split(",")
    for profile in profiles:
        try:
            profile_of(profile)  # before any run
        except KeyError as exc:
            parser.error(str(exc.args[0]))
    grid = f" --levels {','.join(map(str, levels))}" if levels else ""
    print(
        f"$ python benchmarks/adaptive.py --profiles {args.profiles} "
        f"--requests {args.requests} --seeds {','.join(map(str, seeds))}{grid}"
        + (" --warm" if args.warm else "")
        + (f" --png {args.png}" if args.png else "")
    )
    print("virtual time (exact); latencies are the backend's, excluding the client-side queue")
    print(f"goodput and p99 judged on the median over seeds {seeds}\n")
    grids = {p: tuple(levels) or levels_for(p) for p in profiles}
    keys: list[Key] = [
        (p, args.requests, seed, c) for p in profiles for seed in seeds for c in (*grids[p], None)
    ]
    halvings = [(p, args.requests, seed) for p in profiles for seed in seeds]
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        rows = dict(zip(keys, pool.map(_row, keys, chunksize=1), strict=True))
        changes = dict(zip(halvings, pool.map(_halving, halvings, chunksize=1), strict=True))
        warms = (
            dict(zip(halvings, pool.map(_warm, halvings, chunksize=1), strict=True))
            if args.warm else {}
        )
    all_ok = True
    curves: dict[str, list[Row]] = {}
    for profile in profiles:
        runs = [
            [rows[(profile, args.requests, seed, c)] for c in (*grids[profile], None)]
            for seed in seeds
        ]
        median_rows = pooled(runs)
        curves[profile] = median_rows
        warm = (
            pooled([[warms[(profile, args.requests, seed)]] for seed in seeds])[0]
            if warms else None
        )
        print(
            table(profile, median_rows + ([warm] if warm else []))
            + f"\n(median over {len(seeds)} seeds)"
        )
        settles: list[int] = []
        for seed, run in zip(seeds, runs, strict=True):
            trace, change_at, failed = changes[(profile, args.requests, seed)]
            settle, final = settle_calls(trace, change_at, drain=WORKERS)
            window = trace[max(0, change_at - 100) : change_at] or trace[:1]  # short runs
            before = statistics.median(limit for _, _, limit in window)
            settles.append(settle)
            print(
                f"  seed {seed}: {per_run(run, args.requests, settle)} "
                f"(halved: {before:.0f} → {final:.0f}, {failed} failed)"
            )
            if seed == seeds[0]:
                png = plot(profile, trace, change_at)
                if png:
                    print(f"  (plot of seed {seed}'s capacity change: {png})")
        settle_median = float(statistics.median(settles))
        checks = verdicts(median_rows, args.requests, settle_median, runs)
        if warm:
            checks.append(warm_verdict(median_rows, warm, args.requests))
        for name, ok, detail in checks:
            all_ok &= ok
            print(f"  [{'holds' if ok else 'MISS'}] {name}: {detail}")
        print()
    if args.png:
        first = {p: changes[(p, args.requests, seeds[0])][:2] for p in profiles}
        plot_png(args.png, curves, first, seeds)
        print(f"(figure written to {args.png})")
    print("all targets hold" if all_ok else "some targets missed (see MISS above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
