"""``gptgate plan``: what an hourly budget buys at each measured concurrency band."""

from __future__ import annotations

import argparse
import math
import sys

from ..planning import Band, Plan, bands_from_csv, parse_budget, plan
from .common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Command,
    RunFailed,
    UsageError,
    positive_int,
    print_json,
)
from .measure import Target, parse_levels, run_sweep, workload
from .sweep import DEFAULT_CONCURRENCY, add_target_arguments, parse_price

__all__ = ["COMMAND", "format_plan"]

EXAMPLES = """\
examples:
  gptgate plan --budget 10/h --from runs/hosted/sweep.csv
  gptgate plan --budget 240/day --sim hosted --requests 300
  gptgate plan --budget 10/h --from runs/openai/sweep.csv --json

How it counts: requests per hour = floor(budget / cost per completed request), capped by what
the band completed per hour. With $10/h and $0.0215, $0.0219, $0.0225 a request at
concurrency 10, 30, 50 that is 465, 456 and 444 requests an hour: planned with the price at
10 but run at 50, the same 465 requests cost $10.46/h.

exit codes: 0 done, 1 the measurement failed, 2 bad usage (a budget like '10/h', a file that
is not a sweep.csv), 130 interrupted
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", required=True, metavar="AMOUNT",
                        help="dollars per period: 10/h, $240/day, 0.5/min (a bare number is "
                        "per hour)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="csv", metavar="CSV",
                        help="a sweep.csv written by 'gptgate sweep'")
    source.add_argument("--sim", metavar="PROFILE",
                        help="measure the bands on the built-in simulator first")
    parser.add_argument("--concurrency", default=DEFAULT_CONCURRENCY, metavar="LIST",
                        help=f"with --sim: the levels (default: {DEFAULT_CONCURRENCY})")
    parser.add_argument("--requests", type=positive_int, default=300, metavar="N",
                        help="with --sim: requests per level (default: 300)")
    add_target_arguments(parser)


def format_plan(result: Plan) -> str:
    header = (f"{'concurrency':>11} {'cost/request':>13} {'requests/hour':>14} "
              f"{'spend/hour':>11} {'vs best':>8}  limited by")
    lines = [header, "-" * len(header)]
    for band in result.bands:
        mark = "  <- best" if band is result.best else ""
        vs = "best" if band is result.best else f"{band.vs_best:+.1%}"
        lines.append(
            f"{band.concurrency!s:>11} {'$' + format(band.cost_per_request_usd, '.4f'):>13} "
            f"{band.requests_per_hour:>14,} {'$' + format(band.spend_per_hour_usd, '.2f'):>11} "
            f"{vs:>8}  {band.limited_by}{mark}"
        )
    best = result.best
    lines.append(
        f"\nWithin ${result.budget_usd_per_hour:,.2f}/h, concurrency {best.concurrency} buys the "
        f"most: {best.requests_per_hour:,} requests an hour at "
        f"${best.cost_per_request_usd:.4f} each."
    )
    overrun = result.worst_overrun
    if overrun is not None:
        band, over = overrun
        lines.append(
            f"Planned at that price but run at concurrency {band.concurrency}, the same "
            f"{best.requests_per_hour:,} requests cost "
            f"${best.requests_per_hour * band.cost_per_request_usd:,.2f}/h ({over:+.1%})."
        )
    for band in result.too_slow:
        lines.append(
            f"Run at concurrency {band.concurrency}, the same {best.requests_per_hour:,} "
            f"requests would not fit in an hour: it completes at most "
            f"{band.capacity_per_hour:,}."
        )
    return "\n".join(lines)


def _measured_bands(args: argparse.Namespace) -> list[Band] | None:
    """The bands measured on the simulator (None if Ctrl-C stopped the measurement)."""
    from ..sim import get_profile

    try:
        model = get_profile(args.sim).model
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    target = Target(model=model, profile=args.sim, price=parse_price(args.price))
    levels = parse_levels(args.concurrency, append_auto=False)
    sweep = run_sweep(target, levels, workload(args.requests, args.seed), seed=args.seed)
    if sweep.interrupted:
        return None
    if sweep.failure is not None:
        raise RunFailed(sweep.failure)
    return [Band(r.concurrency, r.cost_per_call_usd, r.goodput_rps) for r in sweep.rows
            if not math.isnan(r.cost_per_call_usd)]


def run(args: argparse.Namespace) -> int:
    try:
        budget = parse_budget(args.budget)
    except ValueError as exc:
        raise UsageError(f"--budget: {exc}") from None
    if args.csv is not None:
        try:
            bands = bands_from_csv(args.csv)
        except ValueError as exc:
            raise UsageError(f"--from: {exc}") from None
    else:
        measured = _measured_bands(args)
        if measured is None:
            print("gptgate: interrupted before every band was measured; no plan",
                  file=sys.stderr)
            return EXIT_INTERRUPTED
        bands = measured
    result = plan(budget, bands)
    if args.json:
        print_json(result.to_dict())
    else:
        print(format_plan(result))
    return EXIT_OK


COMMAND = Command(
    name="plan",
    summary="requests per hour a budget buys at each concurrency band",
    description="The cost of a completed request rises with concurrency (retries and "
    "timeouts are billed too): plan capacity from the price measured at the band you run at.",
    add_arguments=add_arguments,
    run=run,
    examples=EXAMPLES,
)
