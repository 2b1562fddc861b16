"""Issue 31's tier case on real llama-servers, whose answers fill ``max_tokens``.

A random-weight model never emits its end-of-sequence token, so every answer ends with
``finish_reason="length"`` — the server shape on which ``tier="auto"`` once escalated every
short ask to the large model, which has the same ``max_tokens`` and is cut the same way
(double the cost, nothing bought). This runs the same short asks three ways against two real
servers we did not write: ``tier="auto"``, everything large (``tier="large"``) and everything
small, and prints per way the calls, where they were served, escalations (those that changed
nothing, and those skipped because the large tier could not answer longer), finish reasons
and the bill at the given prices. A second block asks ``--long`` calls past the small tier's
own cap (``max_tokens`` above the heuristic's 512): they go large by rule.

Start the servers first (tiny model: small tier; slow model: large tier)::

    PARALLEL=4 MODEL=tiny bash ../shared/realserver/start_server.sh 18081
    PARALLEL=2 MODEL=slow bash ../shared/realserver/start_server.sh 18082
    python benchmarks/tiers_real.py [--small-url http://127.0.0.1:18081/v1]
                                    [--large-url http://127.0.0.1:18082/v1] [--calls 40]

Not in CI (it needs the real servers).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import anyio

import gptgate as gg

SMALL_PRICE = gg.Price(input_per_mtok=0.05, output_per_mtok=0.4)
LARGE_PRICE = gg.Price(input_per_mtok=1.25, output_per_mtok=10.0)
Tier = Literal["small", "large", "auto"]
WAYS: tuple[tuple[str, Tier], ...] = (("auto", "auto"), ("large", "large"), ("small", "small"))


@dataclass(frozen=True, slots=True)
class Way:
    name: str
    calls: int
    served: Counter[str]
    finish: Counter[str]
    escalated: int
    no_change: int
    skipped: int
    failed: int
    cost_usd: float


def backends(small_url: str, large_url: str) -> list[gg.Backend]:
    return [
        gg.Backend(name="edge", provider="llamacpp", base_url=small_url, model="tiny",
                   tier="small", hardware="cpu", price=SMALL_PRICE),
        gg.Backend(name="big", provider="llamacpp", base_url=large_url, model="slow",
                   tier="large", price=LARGE_PRICE),
    ]


async def run_way(name: str, tier: Tier, urls: tuple[str, str], asks: list[str],
                  max_tokens: int) -> Way:
    served: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    failed = 0
    async with gg.Gateway(backends(*urls)) as gate:
        async def one(text: str) -> None:
            nonlocal failed
            try:
                r = await gate.chat([{"role": "user", "content": text}],
                                    max_tokens=max_tokens, tier=tier)
            except gg.GateError:
                failed += 1
                return
            served[r.tier or "?"] += 1
            finish[r.finish_reason or "?"] += 1

        async with anyio.create_task_group() as tg:
            for text in asks:
                tg.start_soon(one, text)
        stats = gate.tier_stats()
        cost = sum(e.cost_usd for e in gate.ledger.entries.values())
    rules = stats.rules.values()
    return Way(name, len(asks), served, finish,
               escalated=sum(r.escalated for r in rules),
               no_change=sum(r.escalated_no_change for r in rules),
               skipped=sum(r.escalation_skipped for r in rules),
               failed=failed, cost_usd=cost)


def table(ways: list[Way], max_tokens: int) -> None:
    print(f"\nmax_tokens={max_tokens}")
    print(f"{'way':>8} {'calls':>5} {'small':>5} {'large':>5} {'escal.':>6} {'in vain':>7} "
          f"{'skipped':>7} {'failed':>6} {'finish':>18} {'bill $':>10} {'vs large':>8}")
    large = next((w.cost_usd for w in ways if w.name == "large"), 0.0)
    for w in ways:
        fin = ",".join(f"{k} {v}" for k, v in sorted(w.finish.items()))
        ratio = f"{w.cost_usd / large:.2f}×" if large else "-"
        print(f"{w.name:>8} {w.calls:>5} {w.served['small']:>5} {w.served['large']:>5} "
              f"{w.escalated:>6} {w.no_change:>7} {w.skipped:>7} {w.failed:>6} {fin:>18} "
              f"{w.cost_usd:>10.6f} {ratio:>8}")


async def main(args: argparse.Namespace) -> None:
    urls = (args.small_url, args.large_url)
    asks = [f"Suggest a name for cat number {i}." for i in range(args.calls)]
    for max_tokens in (16, args.long):
        ways = [await run_way(name, tier, urls, asks, max_tokens)
                for name, tier in WAYS]
        table(ways, max_tokens)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small-url", default="http://127.0.0.1:18081/v1")
    p.add_argument("--large-url", default="http://127.0.0.1:18082/v1")
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--long", type=int, default=600, help="max_tokens of the second block")
    a = p.parse_args()
    print("$ python " + " ".join(sys.argv))
    anyio.run(main, a)
