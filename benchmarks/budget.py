"""The dollar budget against the simulator's own bill: the most billed in any sliding hour.

Workers call back to back (300-token answers, $2/$8 per million input/output tokens) on the
built-in ``gpu`` simulator with a virtual clock, for each budget mode; the server's billing
ledger is sampled every 10 simulated seconds. Runs in a few seconds:

    PYTHONPATH=$PWD python benchmarks/budget.py [--budget 2.8] [--hours 2] [--workers 2]
                                               [--seeds 1,2,3]
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import gptgate as gg
from gptgate.testing import (
    LoopClock,
    max_rise_within,
    run_virtual,
    sim_backend,
    spend_curve,
)

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)
TASK = [{"role": "user", "content": "Summarise the incident report in a paragraph. " * 20}]


async def job(
    budget: gg.Budget | None, seconds: float, workers: int, seed: int
) -> dict[str, Any]:
    clock = LoopClock()
    backend, engine = sim_backend(
        "gpu", name="sim", clock=clock, seed=seed, concurrency=workers, price=PRICE
    )
    counts = {"ok": 0, "refused": 0}
    async with gg.Gateway([backend], clock=clock, seed=seed, budget=budget) as gate:

        async def worker() -> None:
            while clock.now() < seconds:
                try:
                    await gate.chat(TASK, max_tokens=300)
                    counts["ok"] += 1
                except gg.BudgetExceededError:
                    counts["refused"] += 1
                    await clock.sleep(5.0)

        samples = await spend_curve(clock, engine, PRICE, [worker] * workers)
    first_10_min = [c for t, c in samples if t <= 600.0][-1]
    return {"hourly": max_rise_within(samples, 3600), "first_10_min": first_10_min, **counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=2.8, help="USD per hour")
    parser.add_argument("--hours", type=float, default=2.0, help="simulated hours per run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", default="1", help="simulator seeds, comma-separated")
    args = parser.parse_args()
    logging.getLogger("gptgate").setLevel(logging.ERROR)
    runs: list[tuple[str, gg.Budget | None]] = [
        ("no budget", None),
        ("throttle", gg.Budget(usd_per_hour=args.budget)),
        ("throttle burst_s=3600", gg.Budget(usd_per_hour=args.budget, burst_s=3600)),
        ("raise", gg.Budget(usd_per_hour=args.budget, on_exceed="raise")),
    ]
    print(f"budget ${args.budget:.2f}/h, {args.workers} workers, {args.hours:g} h simulated")
    print(f"{'mode':24s} {'seed':>4s} {'max $/any hour':>15s} {'x budget':>9s}"
          f" {'$ 1st 10 min':>13s} {'calls':>7s} {'refused':>8s}")
    for label, budget in runs:
        for seed in (int(s) for s in args.seeds.split(",")):
            out = run_virtual(job, budget, args.hours * 3600.0, args.workers, seed)
            print(f"{label:24s} {seed:4d} {out['hourly']:15.4f} {out['hourly'] / args.budget:9.4f}"
                  f" {out['first_10_min']:13.3f} {out['ok']:7d} {out['refused']:8d}")


if __name__ == "__main__":
    main()
