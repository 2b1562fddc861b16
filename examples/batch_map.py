"""A 10,000-item batch job: ``gate.map`` with a progress bar and a cost summary.

What it shows
    * ``await gate.map(items, scenario="batch_content", on_result=...)`` over a *generator*
      (items are pulled only as fast as they can run: a million would not sit in memory);
    * ``on_result(index, outcome)``, called as each item ends, driving a ``rich`` progress bar;
    * the ``batch_content`` preset: micro-batches grouped by prompt prefix and a warmed prompt
      cache, so the long shared instructions are billed at the cached price;
    * a cost summary from ``gate.stats()`` and the ledger: tokens, cache hit rate, dollars,
      cost per successful item, and what a $10/hour budget buys at that price
      (``gate.ledger.plan``) — beside the simulated server's own bill.

How to run
    python examples/batch_map.py [--items 10000]

No API key, no network: a simulated GPU server in-process on a virtual clock (``run_virtual``:
the job's simulated minutes cost only the CPU to run 10,000 calls, a few seconds).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual

INSTRUCTIONS = (
    "You label customer reviews for a hardware store. Answer with one of: praise, complaint, "
    "question, spam. Then give a one-line reason. Be strict about spam: links, repeated text "
    "and unrelated products are spam. " * 24  # ~1,300 tokens: long enough to be cached
)
PRICE = gg.Price(input_per_mtok=1.25, cached_input_per_mtok=0.125, output_per_mtok=10.0)


def reviews(n: int) -> Iterator[dict[str, Any]]:
    """The job's items, generated lazily: ``chat`` keyword arguments for each."""
    for i in range(n):
        yield {
            "messages": [
                {"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": f"Review #{i}: the {i % 9}-inch clamp broke on day "
                 f"{i % 30 + 1}."},
            ],
            "max_tokens": 24,
        }


async def main(n: int) -> None:
    clock = LoopClock()
    engine = SimEngine("gpu", clock=clock, seed=11)
    backend = gg.Backend(
        name="gpu-sim", base_url="http://127.0.0.1:8000/v1", model="gpt-5.5", hardware="gpu",
        price=PRICE, transport=SimTransport(engine),
    )
    failed = 0
    async with gg.Gateway([backend], clock=clock, seed=11) as gate:
        with Progress(
            TextColumn("[bold]labelling reviews"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(),
        ) as progress:
            task = progress.add_task("map", total=n)

            def on_result(index: int, outcome: gg.ChatResult | gg.GateError) -> None:
                nonlocal failed
                failed += isinstance(outcome, gg.GateError)
                progress.advance(task)

            start, wall = clock.now(), time.perf_counter()
            results = await gate.map(reviews(n), scenario="batch_content", on_result=on_result)
            simulated_s, wall_s = clock.now() - start, time.perf_counter() - wall
        stats = gate.stats()["gpu-sim"]
        plan = gate.ledger.plan(10.0)
    server = engine.ledger.snapshot()

    ok = len(results) - failed
    hit = stats.cache_hit_rate or 0.0
    print(f"{ok:,} of {n:,} items done ({failed} failed) in {simulated_s:,.0f} simulated "
          f"seconds ({wall_s:.1f}s of wall time); limit ended at {stats.limit}, "
          f"{stats.retries} retries")
    print(f"tokens: {stats.input_tokens:,} input ({hit:.0%} from the prompt cache), "
          f"{stats.output_tokens:,} output")
    print(f"cost: ${stats.cost_usd:.4f} in all, ${plan.cost_per_call_usd:.6f} per successful "
          f"item -> $10/hour buys {plan.calls_per_hour:,} items an hour")
    print(f"server's own bill: {server.billed_tokens:,} tokens "
          f"({server.cached_input_tokens:,} cached input) over {server.requests:,} requests")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A 10,000-item gate.map job on the simulator.")
    parser.add_argument("--items", type=int, default=10_000)
    items = parser.parse_args().items
    if items < 1:
        parser.error("--items must be >= 1")
    run_virtual(main, items)
