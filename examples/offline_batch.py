"""An offline job through the Batch API at half price, durable in a job directory.

What it shows
    * ``job = await gate.batch(items, backend=..., job_dir=...)``: the items written as JSONL,
      uploaded, run as a provider batch; ``job.status`` and ``job.counts`` while it runs;
    * ``await job.wait()``: the results in input order, a failed item retried live
      (``retry="live"``);
    * taking the job up again: a second ``gate.batch`` with the same items and ``job_dir``
      (as a process restarted after a crash would) resumes it and sends nothing twice;
    * the bill: the ledger's batch column at ``price × batch_discount`` (0.5) against the same
      job run live through ``gate.map`` — the cost ratio.

How to run
    python examples/offline_batch.py [--items 1000]

No API key, no network: the simulator's Batch API (``/v1/files``, ``/v1/batches``) in-process,
on a virtual clock (the batch's simulated hour costs no wall time).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import gptgate as gg
from gptgate.sim import LoopClock, SimBatches, SimBatchPlan, run_virtual
from gptgate.testing import sim_backend

PRICE = gg.Price(input_per_mtok=2.5, output_per_mtok=10.0)


def tickets(n: int) -> list[dict[str, Any]]:
    """The job's items: ``chat`` keyword arguments, as for ``gate.map``."""
    return [
        {"messages": [{"role": "user", "content": f"Summarise ticket #{i}: the printer on "
                       f"floor {i % 9} jams on page {i % 40 + 1}."}],
         "max_tokens": 80}
        for i in range(n)
    ]


async def main(n: int, job_dir: Path) -> None:
    clock = LoopClock()
    backend, engine = sim_backend("hosted", name="openai", clock=clock, price=PRICE)
    SimBatches(engine, SimBatchPlan(complete_after_s=1800, fail_rate=0.01, seed=3)).attach()
    async with gg.Gateway([backend], clock=clock) as gate:
        job = await gate.batch(tickets(n), backend="openai", job_dir=job_dir, retry="live")
        print(f"submitted   -> {job.id}: {job.status}, batches {job.batch_ids}")
        await clock.sleep(900)
        await job.refresh()
        print(f"after 15 min -> {job.status}, {job.counts.completed}/{job.counts.total} done")
        results = await job.wait()
        batch_usd = gate.ledger.entries["openai"].cost_usd
    async with gg.Gateway([backend], clock=clock) as gate:  # a restarted process
        again = await gate.batch(tickets(n), backend="openai", job_dir=job_dir, retry="live")
        same = [r.text if isinstance(r, gg.ChatResult) else None for r in await again.wait()]
        first = [r.text if isinstance(r, gg.ChatResult) else None for r in results]
        print(f"resumed     -> resumed={again.resumed}, the same results: {same == first}, "
              f"still {job.batch_ids} at the provider")
    async with gg.Gateway([backend], clock=clock) as gate:
        await gate.map(tickets(n), scenario="offline")
        live_usd = gate.ledger.entries["openai"].cost_usd
    answered = [r for r in results if isinstance(r, gg.ChatResult)]
    live = sum(r.stream_decision != "batch api" for r in answered)
    print(f"{len(answered):,} of {n:,} items answered ({live} failed in the batch, retried live)")
    print(f"cost: ${batch_usd:.4f} through the Batch API vs ${live_usd:.4f} live: "
          f"{batch_usd / live_usd:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="an offline job through the Batch API")
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run_virtual(main, args.items, Path(folder) / "job")
