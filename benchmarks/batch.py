"""An offline job live (``gate.map``) vs through the Batch API (``gate.batch``), on the
simulator: what it costs, and that nothing is lost or paid for twice.

The same items run both ways against one simulated ``hosted`` server on the virtual clock:
live through ``gate.map(scenario="offline")``, and as a Batch API job (the simulator's
``/v1/files`` + ``/v1/batches``, which answers each request with the same seeded draw as the
live path, so both runs bill the same tokens). The batch run is crashed once between its
upload and its create and resumed by a second gateway, with ``fail_rate`` items failed and
retried live. Columns: the ledger's cost of each run, the ratio (target 0.50× ± 1% — the
retried items cost the live price, so the ratio is ``0.5 + 0.5 × retried share``: without
failures exactly 0.50×), items lost (target 0), requests billed twice (target 0: every item
answered once, counted on the server), batches created (1).

    python benchmarks/batch.py [--items 10000] [--fail-rate 0] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path
from typing import Any

import gptgate as gg
from gptgate.batch_openai import OpenAIBatches
from gptgate.sim import LoopClock, SimBatches, SimBatchPlan, run_virtual
from gptgate.testing import sim_backend

PRICE = gg.Price(input_per_mtok=2.5, output_per_mtok=10.0)


def items(n: int) -> list[dict[str, Any]]:
    return [
        {"messages": [{"role": "user", "content": f"Summarise support ticket #{i}: the "
                       f"{i % 7}-port hub drops its link every {i % 13 + 2} minutes."}],
         "max_tokens": 120}
        for i in range(n)
    ]


class Crash(Exception):
    pass


async def live(n: int, seed: int) -> tuple[float, int]:
    """The job through gate.map: its cost, and the items that did not come back."""
    clock = LoopClock()
    backend, _ = sim_backend("hosted", name="oa", clock=clock, seed=seed, price=PRICE,
                             max_concurrency=256)
    async with gg.Gateway([backend], clock=clock, seed=seed) as gate:
        results = await gate.map(items(n), scenario="offline")
        return gate.ledger.total().cost_usd, sum(isinstance(r, gg.GateError) for r in results)


async def batch(n: int, seed: int, fail_rate: float, job_dir: Path) -> dict[str, Any]:
    """The job through gate.batch, crashed between upload and create, then resumed."""
    clock = LoopClock()
    backend, engine = sim_backend("hosted", name="oa", clock=clock, seed=seed, price=PRICE,
                                  max_concurrency=256)
    sim = SimBatches(engine, SimBatchPlan(complete_after_s=3600, fail_rate=fail_rate,
                                          seed=seed)).attach()
    upload = OpenAIBatches.upload

    async def upload_then_crash(self: OpenAIBatches, *args: Any) -> str:
        await upload(self, *args)
        raise Crash

    OpenAIBatches.upload = upload_then_crash  # type: ignore[method-assign]
    try:
        async with gg.Gateway([backend], clock=clock, seed=seed) as gate:
            with contextlib.suppress(Crash):
                await gate.batch(items(n), job_dir=job_dir, retry="live")
    finally:
        OpenAIBatches.upload = upload  # type: ignore[method-assign]
    async with gg.Gateway([backend], clock=clock, seed=seed) as gate:  # the restart
        job = await gate.batch(items(n), job_dir=job_dir, retry="live", poll_s=60)
        results = await job.wait()
        cost = gate.ledger.total().cost_usd
    answered = sim.billed_requests + engine.ledger.snapshot().ok
    ok = sum(isinstance(r, gg.ChatResult) for r in results)
    return {"cost": cost, "lost": n - ok, "twice": answered - ok, "creates": sim.creates,
            "retried": engine.ledger.snapshot().ok, "hours": clock.now() / 3600}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    live_cost, live_lost = run_virtual(live, args.items, args.seed)
    with tempfile.TemporaryDirectory() as folder:
        out = run_virtual(batch, args.items, args.seed, args.fail_rate, Path(folder) / "job")
    ratio = out["cost"] / live_cost
    target = 0.5 + 0.5 * out["retried"] / args.items
    print(f"{args.items:,} items, fail rate {args.fail_rate:g}, seed {args.seed}")
    print(f"  live  (gate.map offline): ${live_cost:.4f}, {live_lost} lost")
    print(f"  batch (gate.batch):       ${out['cost']:.4f}, {out['lost']} lost, "
          f"{out['twice']} billed twice, {out['creates']} batch created, "
          f"{out['retried']} retried live, {out['hours']:.1f} simulated hours")
    held = abs(ratio - target) <= 0.01 and out["lost"] == 0 and out["twice"] == 0
    print(f"  cost ratio {ratio:.3f}x (target {target:.3f}x ± 0.01) "
          f"[{'held' if held else 'MISSED'}]")


if __name__ == "__main__":
    main()
