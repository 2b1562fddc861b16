"""The cache gate on a server that spreads a hot prefix by its calls in flight (issue 31).

8 replicas × 4 slots; a prefix spreads to the least-loaded other replica once 2 of its calls
run on its home replica; a replica forgets a copy idle for 3 call latencies; answers short
next to a 1,300-token prefix's prefill. The floor is the simplest warm-up by hand: each
prefix's first call alone, the rest released together when it returns, under the same
limit. Paced sends at ``start`` per warm-up prefill time capped each prefix below what its
window ran on its own and left a third of the slots idle: 1.41× the hand client's time
(benchmarks/cache.py --hot-ttl 3, seeds 7–9).
"""

from __future__ import annotations

import random

import anyio
import httpx2

import gptgate as gg
from gptgate.results import ChatResult
from gptgate.sim import LoopClock, SimEngine, SimProfile, SimTransport, get_profile, run_virtual
from gptgate.testing import sim_backend

Messages = list[dict[str, str]]
LIMIT = 64


def issue31_server() -> SimProfile:
    base = get_profile("spread").model_copy(
        update={
            "name": "spread-in-flight",
            "slots": 4,
            "prefix_overflow_rpm": None,
            "spread_in_flight": 2,
            "prefill_tokens_per_s": 2500.0,
            "output_tokens_mean": 60.0,
        }
    )
    latency = base.ttft_overhead_s + 128 / base.prefill_tokens_per_s + 60 * base.step_time(4)
    return base.model_copy(update={"cache_ttl_s": 3 * latency})


def job(seed: int, prefixes: int = 4, calls: int = 600) -> list[Messages]:
    rng = random.Random(seed)
    words = ["brand", "voice", "tone", "claim", "format", "bullet", "benefit", "care"]
    systems = [
        f"Style guide {k}: " + " ".join(rng.choice(words) for _ in range(1000))
        for k in range(prefixes)
    ]
    for k, text in enumerate(systems):
        systems[k] = text[: 4 * 1296]  # 1,300 tokens with the message overhead
    return [
        [{"role": "system", "content": systems[k]}, {"role": "user", "content": f"item {k}.{i}"}]
        for k in range(prefixes)
        for i in range(calls // prefixes)
    ]


async def hand(profile: SimProfile, items: list[Messages], seed: int) -> tuple[float, float]:
    """Hit rate and time of the warm-up by hand, under one ``Semaphore(LIMIT)``."""
    clock = LoopClock()
    engine = SimEngine(profile, clock=clock, seed=seed)
    semaphore = anyio.Semaphore(LIMIT)
    async with httpx2.AsyncClient(
        transport=SimTransport(engine), base_url="http://sim/v1", timeout=600.0
    ) as client:

        async def call(messages: Messages) -> None:
            body = {"model": profile.model, "messages": messages, "max_tokens": 1024}
            async with semaphore:
                assert (await client.post("chat/completions", json=body)).status_code == 200

        async def prefix(calls: list[Messages]) -> None:
            await call(calls[0])
            async with anyio.create_task_group() as tg:
                for messages in calls[1:]:
                    tg.start_soon(call, messages)

        groups: dict[str, list[Messages]] = {}
        for messages in items:
            groups.setdefault(messages[0]["content"], []).append(messages)
        start = clock.now()
        async with anyio.create_task_group() as tg:
            for calls in groups.values():
                tg.start_soon(prefix, calls)
        total = clock.now() - start
    return engine.ledger.snapshot().cache_hit_rate, total


async def gate(profile: SimProfile, items: list[Messages], seed: int) -> tuple[float, float]:
    """Hit rate and time of ``gate.map(..., scenario="batch_content")`` at the same limit."""
    clock = LoopClock()
    backend, engine = sim_backend(profile, name="sim", clock=clock, seed=seed, concurrency=LIMIT)
    async with gg.Gateway([backend], clock=clock, seed=seed) as g:
        start = clock.now()
        results = await g.map(
            ({"messages": m, "max_tokens": 1024} for m in items),
            scenario="batch_content",
            max_pending=len(items),
        )
        total = clock.now() - start
    assert all(isinstance(r, ChatResult) for r in results)
    return engine.ledger.snapshot().cache_hit_rate, total


def test_the_gate_keeps_the_hand_warm_up_s_hits_and_time_on_a_server_spreading_by_in_flight() -> (
    None
):
    """Issue 31's floor on its server: hit rate ≥ the hand warm-up's − 2 points, time within
    5% of it. Before: 24.4 s against the hand client's 17.8 s (now 87.2% hits against 78.2%,
    in 16.2 s)."""
    profile = issue31_server()
    items = job(seed=7)
    hand_hit, hand_s = run_virtual(hand, profile, items, 7)
    gate_hit, gate_s = run_virtual(gate, profile, items, 7)
    assert gate_hit >= hand_hit - 0.02, (gate_hit, hand_hit)
    assert gate_s <= 1.05 * hand_s, (gate_s, hand_s)
