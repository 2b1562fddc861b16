"""Fewer requests for the same work: ``gate.embed`` merging, and the response cache.

Embeddings: N single-text ``gate.embed`` calls from C concurrent tasks on the built-in ``gpu``
simulator (virtual clock: 20 ms a request + 0.02 ms an input, 32 slots), sent each alone
(``embed_window_s=0``, the per-text code every RAG pipeline starts with) and merged
(``embed_window_s=0.005``), at the same fixed concurrency: requests sent, simulated time,
the gateway's CPU time, vectors identical, the ledger against the server's bill.

Response cache: a job of P distinct ``temperature=0`` prompts run twice (a re-run after a
crash), with D identical calls of one prompt at once: requests sent, hit rate, dollars.

    PYTHONPATH=$PWD python benchmarks/embed.py [--calls 10000] [--tasks 200] [--prompts 200]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend

EMBED_PRICE = gg.Price(input_per_mtok=0.02)
CHAT_PRICE = gg.Price(input_per_mtok=1.25, output_per_mtok=10.0)


async def embed_run(calls: int, tasks: int, window_s: float) -> dict[str, Any]:
    clock = LoopClock()
    backend, engine = sim_backend(
        "gpu", name="emb", clock=clock, seed=1, embedding_model="text-embedding-3-small",
        price=EMBED_PRICE, concurrency=tasks, max_concurrency=max(64, tasks),
    )
    vectors: list[list[float] | None] = [None] * calls
    texts = iter(range(calls))
    async with gg.Gateway([backend], clock=clock, embed_window_s=window_s) as gate:

        async def worker() -> None:
            for i in texts:
                vectors[i] = await gate.embed(f"chunk {i} of the handbook")

        cpu = time.process_time()
        start = clock.now()
        async with anyio.create_task_group() as tg:
            for _ in range(tasks):
                tg.start_soon(worker)
        elapsed = clock.now() - start
        cpu = time.process_time() - cpu
        bill = engine.ledger.snapshot()
        entry = gate.ledger.entries["emb"]
    return {
        "requests": bill.requests, "time_s": elapsed, "cpu_s": cpu, "vectors": vectors,
        "ledger_usd": entry.cost_usd, "bill_usd": bill.bill_usd(EMBED_PRICE),
        "ledger_tokens": entry.input_tokens, "bill_tokens": bill.input_tokens,
    }


async def cache_run(prompts: int, duplicates: int) -> dict[str, Any]:
    clock = LoopClock()
    backend, engine = sim_backend("gpu", name="chat", clock=clock, seed=2, price=CHAT_PRICE)
    cache = gg.ResponseCache(ttl_s=3600, max_entries=10_000)
    jobs = [[{"role": "user", "content": f"Summarise ticket {i}."}] for i in range(prompts)]
    rows = []
    async with gg.Gateway([backend], clock=clock, response_cache=cache) as gate:
        for run in ("first run", "re-run"):
            before = engine.ledger.snapshot().requests
            cost = gate.ledger.total().cost_usd
            results = await gate.map(
                [{"messages": m, "temperature": 0, "max_tokens": 120} for m in jobs]
            )
            hits = sum(1 for r in results if isinstance(r, gg.ChatResult) and r.from_cache)
            rows.append((run, prompts, engine.ledger.snapshot().requests - before, hits,
                         gate.ledger.total().cost_usd - cost))
        before = engine.ledger.snapshot().requests
        same = [{"role": "user", "content": "The one question everybody asks."}]
        async with anyio.create_task_group() as tg:
            for _ in range(duplicates):
                tg.start_soon(lambda: gate.chat(same, temperature=0, max_tokens=120))
        stats = cache.statistics()
        rows.append((f"{duplicates} identical at once", duplicates,
                     engine.ledger.snapshot().requests - before, duplicates - 1, None))
    return {"rows": rows, "stats": stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--duplicates", type=int, default=50)
    args = parser.parse_args()

    alone = run_virtual(lambda: embed_run(args.calls, args.tasks, 0.0))
    merged = run_virtual(lambda: embed_run(args.calls, args.tasks, 0.005))
    print(f"gate.embed: {args.calls:,} single-text calls from {args.tasks} tasks (gpu sim)")
    print(f"{'':22}{'requests':>10}{'sim time s':>12}{'cpu s':>8}{'ledger $':>12}{'bill $':>12}")
    for name, row in (("each text alone", alone), ("merged (5 ms window)", merged)):
        print(f"{name:22}{row['requests']:>10,}{row['time_s']:>12.2f}{row['cpu_s']:>8.2f}"
              f"{row['ledger_usd']:>12.8f}{row['bill_usd']:>12.8f}")
    same = alone["vectors"] == merged["vectors"]
    ratio = merged["time_s"] / alone["time_s"]
    share = merged["requests"] / args.calls
    print(f"requests/call {share:.4f} (<= 0.05: {share <= 0.05}); time x{ratio:.2f} "
          f"(<= 0.3: {ratio <= 0.3}); vectors identical: {same}; ledger = bill: "
          f"{merged['ledger_tokens'] == merged['bill_tokens']}")

    cached = run_virtual(lambda: cache_run(args.prompts, args.duplicates))
    print("\nresponse cache: temperature=0 job run twice, then identical calls at once")
    print(f"{'':28}{'calls':>7}{'requests':>10}{'from cache':>12}{'cost $':>10}")
    for run, calls, requests, hits, cost in cached["rows"]:
        shown = f"{cost:>10.4f}" if cost is not None else f"{'':>10}"
        print(f"{run:28}{calls:>7}{requests:>10}{hits:>12}{shown}")
    stats = cached["stats"]
    print(f"hit rate {stats.hit_rate:.3f} (hits {stats.hits}, shared in flight {stats.shared}, "
          f"misses {stats.misses}, {stats.bytes:,} bytes stored)")


if __name__ == "__main__":
    main()
