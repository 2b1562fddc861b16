"""Prompt caching on Anthropic's Messages API: the gate's marker against a plain client.

Anthropic caches nothing without a ``cache_control`` marker (at most 4 per request, none on
a prefix shorter than the model's minimum). A client that sends the shared system prompt
without one pays for every token of it on every call, however warm the server; gptgate's
Anthropic dialect puts the marker at the end of the prefix its cache gate groups calls on,
so warm-up and the ramp (``scenario="batch_content"``) work as on OpenAI.

**Workload.** ``--calls`` calls (default 300) = one shared ~2,000-token system prompt × that
many distinct user questions, ``max_tokens=256``, sent at concurrency ``--concurrency``
(default 32) to the simulator's Anthropic flavor (``ANTHROPIC_PROFILE``: 4 replicas behind
one cache, Sonnet's 1,024-token minimum) under virtual time.

* **plain** — an ``httpx2.AsyncClient`` sending the Messages bodies a user writes by hand
  (system prompt as a string, no marker) under an ``anyio.Semaphore``: every call a miss;
* **plain + marker** — the same, with a ``cache_control`` marker on the system prompt but no
  warm-up: the first burst all misses (and writes), the rest read;
* **gptgate** — ``gate.map(items, scenario="batch_content")`` on
  ``Backend(provider="anthropic")``: OpenAI-style messages, the marker placed by the dialect,
  single-flight warm-up then the ramp.

**Below the minimum.** The same job on a model whose minimum is above the prompt
(``claude-haiku-4-5``: 4,096 tokens) caches nothing for anyone; the gate must then step aside
(its warm-up would wait for hits that cannot come): gptgate's time against the plain client's.

**The ceiling** is every call but one reading the whole prefix: ``(calls − 1) × prefix``
tokens, ``prefix`` being what one call writes (read from the server's own usage). The rule
printed (issue 32): gptgate reaches ≥ 90% of it, where the plain client reads 0. Dollars are
the server's bill (``bill_usd``: writes 1.25×, reads 0.1× Sonnet's $3/MTok input).

    python benchmarks/cache_anthropic.py [--calls 300] [--concurrency 32] [--seed 1]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

import gptgate as gg
from gptgate.sim import (
    ANTHROPIC_PROFILE,
    LoopClock,
    SimEngine,
    SimProfile,
    SimTransport,
    run_virtual,
)
from gptgate.sim.anthropic import bill_usd
from gptgate.sim.ledger import LedgerSnapshot
from gptgate.testing import sim_backend

SYSTEM = (
    "You are the style editor of a product catalogue. Keep sentences short, prefer concrete "
    "nouns, never use superlatives, and end every description with one practical tip. "
) * 45  # ~2,000 tokens
AUTH = {"x-api-key": "sk-ant-sim", "anthropic-version": "2023-06-01"}
INPUT_PER_MTOK, OUTPUT_PER_MTOK = 3.0, 15.0
MAX_TOKENS = 256


@dataclass(frozen=True)
class Row:
    name: str
    ledger: LedgerSnapshot
    seconds: float


def questions(calls: int) -> list[str]:
    colours = ("red", "blue", "green")
    return [f"Describe product #{i}: a {colours[i % 3]} kettle." for i in range(calls)]


async def plain(
    profile: SimProfile, calls: int, concurrency: int, seed: int, marker: bool
) -> Row:
    clock = LoopClock()
    engine = SimEngine(profile, clock=clock, seed=seed)
    gate = anyio.Semaphore(concurrency)
    system: Any = (
        [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        if marker else SYSTEM
    )
    async with httpx2.AsyncClient(
        transport=SimTransport(engine), base_url="http://sim", timeout=600.0
    ) as client:

        async def call(question: str) -> None:
            body = {"model": profile.model, "max_tokens": MAX_TOKENS, "system": system,
                    "messages": [{"role": "user", "content": question}]}
            async with gate:
                for _ in range(5):  # a 429/529 is retried after a second, like an SDK
                    r = await client.post("/v1/messages", json=body, headers=AUTH)
                    if r.status_code == 200:
                        return
                    await clock.sleep(1.0)

        start = clock.now()
        async with anyio.create_task_group() as tg:
            for q in questions(calls):
                tg.start_soon(call, q)
        seconds = clock.now() - start
    name = "plain + marker" if marker else "plain"
    return Row(name, engine.ledger.snapshot(), seconds)


async def gateway(profile: SimProfile, calls: int, concurrency: int, seed: int) -> Row:
    clock = LoopClock()
    backend, engine = sim_backend(
        profile, name="claude", clock=clock, seed=seed, provider="anthropic",
        base_url="http://127.0.0.1:8000", api_key="sk-ant-sim", concurrency=concurrency,
    )
    items = [
        {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
         "max_tokens": MAX_TOKENS}
        for q in questions(calls)
    ]
    async with gg.Gateway([backend], clock=clock, seed=seed) as gate:
        start = clock.now()
        results = await gate.map(items, scenario="batch_content", max_pending=len(items))
        seconds = clock.now() - start
    failed = [r for r in results if not isinstance(r, gg.ChatResult)]
    if failed:
        raise SystemExit(f"gptgate: {len(failed)} calls failed, e.g. {failed[0]!r}")
    return Row("gptgate", engine.ledger.snapshot(), seconds)


async def prefix_tokens(seed: int) -> int:
    """What one call writes to the cache: the marked prefix, in the server's tokens."""
    engine = SimEngine(ANTHROPIC_PROFILE, clock=LoopClock(), seed=seed)
    body = {"model": ANTHROPIC_PROFILE.model, "max_tokens": 1,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "x"}]}
    async with httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim") as c:
        r = await c.post("/v1/messages", json=body, headers=AUTH)
    return int(r.json()["usage"]["cache_creation_input_tokens"])


def measure(
    calls: int, concurrency: int, seed: int, profile: SimProfile = ANTHROPIC_PROFILE
) -> tuple[int, list[Row]]:
    """(the read ceiling, the three clients' rows) on ``profile``."""
    prefix = run_virtual(prefix_tokens, seed)
    rows = [
        run_virtual(plain, profile, calls, concurrency, seed, False),
        run_virtual(plain, profile, calls, concurrency, seed, True),
        run_virtual(gateway, profile, calls, concurrency, seed),
    ]
    return (calls - 1) * prefix, rows


#: a model whose minimum (4,096 tokens) is above the shared prompt: nothing can be cached
HAIKU = ANTHROPIC_PROFILE.model_copy(
    update={"name": "anthropic-haiku", "model": "claude-haiku-4-5", "cache_min_tokens": 4096}
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    ceiling, rows = measure(args.calls, args.concurrency, args.seed)
    print(f"{args.calls} calls, one ~2,000-token system prompt, c={args.concurrency}, "
          f"server {ANTHROPIC_PROFILE.name} ({ANTHROPIC_PROFILE.replicas} replicas, one cache, "
          f"min {ANTHROPIC_PROFILE.cache_min_tokens} tokens); ceiling {ceiling:,} read tokens")
    print(f"{'client':<16}{'read':>10}{'of ceiling':>12}{'written':>10}{'bill $':>10}"
          f"{'time s':>9}")
    for row in rows:
        snap = row.ledger
        share = snap.cached_input_tokens / ceiling if ceiling else 0.0
        bill = bill_usd(snap, INPUT_PER_MTOK, OUTPUT_PER_MTOK)
        print(f"{row.name:<16}{snap.cached_input_tokens:>10,}{share:>11.1%} "
              f"{snap.cache_write_input_tokens:>10,}{bill:>10.4f}{row.seconds:>9.1f}")
    plain_row, _, gate_row = rows
    held = (gate_row.ledger.cached_input_tokens >= 0.9 * ceiling
            and plain_row.ledger.cached_input_tokens == 0)
    print(f"rule (gptgate >= 90% of the ceiling, plain client 0): "
          f"{'holds' if held else 'DOES NOT HOLD'}")
    _, (bare, _, gated) = measure(args.calls, args.concurrency, args.seed, HAIKU)
    ratio = gated.seconds / bare.seconds
    print(f"below the minimum ({HAIKU.model}: {HAIKU.cache_min_tokens:,} tokens, nothing "
          f"cacheable): gptgate {gated.seconds:.1f} s, plain {bare.seconds:.1f} s "
          f"(x{ratio:.2f}: the gate {'steps aside' if ratio <= 1.1 else 'HOLDS CALLS BACK'})")


if __name__ == "__main__":
    main()
