"""Soak, short form: thousands of calls of each kind leave the gateway as idle as they found it.

``benchmarks/soak.py`` watches RSS over 100k calls; this test catches the same leak without
measuring memory: after a warm-up round, a second round of the same calls must leave every
per-call structure (limiter heap, call registry, cache-gate groups, batcher queues, pool, …) at
the size the first round left it, and must not grow gptgate's live objects by more than a
small constant — a structure keyed per call would grow by one entry per call.

Backend ``b`` fails some requests (5xx, connections reset mid-body or mid-stream), since
leaks hide on the error paths. On virtual time (``run_virtual`` + ``LoopClock``): exact and
repeatable, and costs only CPU.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import pytest

import gptgate as gg
from gptgate.routing import LatencyWindow
from gptgate.sim import FaultPlan, LoopClock, SimEngine, SimTransport, get_profile, run_virtual

#: distinct system prompts long enough (≥ 1024 tokens) for the prompt-cache gate to hold them
PREFIXES = [
    {"role": "system", "content": f"Policy {p}. " + "Answer tersely and cite the rule. " * 200}
    for p in range(4)
]
PROFILE: dict[str, Any] = dict(
    slots=256, max_queue=None, rpm=None, tpm=None, jitter_sigma=0.0,
    load_jitter_sigma=0.0, overload_error_rate=0.0, output_tokens_mean=12,
    output_tokens_sigma=0.0,
)

Round = Callable[[gg.Gateway, int, int], Awaitable[None]]


def _messages(i: int) -> list[dict[str, str]]:
    return [PREFIXES[i % len(PREFIXES)], {"role": "user", "content": f"Ticket {i}."}]


def _gateway(clock: LoopClock) -> gg.Gateway:
    backends = []
    faults = FaultPlan(seed=5, error_rate=0.03, reset_rate=0.03)
    for name, profile, seed, plan in (("a", "gpu", 1, None), ("b", "tpu", 2, faults)):
        engine = SimEngine(get_profile(profile).model_copy(update=PROFILE), clock=clock,
                           seed=seed, faults=plan)
        backends.append(gg.Backend(name=name, base_url="http://127.0.0.1:9/v1", model="m",
                                   max_concurrency=32, transport=SimTransport(engine)))
    return gg.Gateway(backends, clock=clock, seed=7)


def sizes(gate: gg.Gateway) -> dict[str, int]:
    """Every per-call structure of the gateway, by size (0 when idle, else keyed per backend
    or per prefix group: bounded by the workload, not by the number of calls)."""
    out: dict[str, int] = {"registered calls": len(gate._calls)}
    runner = gate.runner
    for name in gate.config.backends:
        state = gate.backend_state(name.name)
        limiter, pool = state.limiter, state.pool.statistics()
        out |= {
            f"{name.name} in flight": limiter.in_flight,
            f"{name.name} queued": limiter.queued,
            f"{name.name} limiter heap": len(limiter._heap),
            f"{name.name} limiter priorities": sum(limiter._by_priority.values()),
            f"{name.name} pool checked out": pool.checked_out,
            f"{name.name} pool waiting": pool.waiting,
            f"{name.name} pacer pending": len(state.pacer._pending),
            f"{name.name} cache waiting": gate.cache_gate.waiting(name.name),
            f"{name.name} cache in flight": gate.cache_gate.in_flight(name.name),
        }
    cache = gate.cache_gate
    out |= {
        "cache active groups": len(cache._active),
        "cache idle groups": len(cache._idle),
        "cache turns running": sum(len(r) for r in cache._running.values()),
        "cache turn queue": sum(len(q) for q in cache._turn_queue.values()),
        "router affinity": len(runner.router._affinity),
        "keep-warm prefixes": len(gate._prefixes),
        "ledger entries": len(gate.ledger.entries),
        "billed-work models": len(runner.billed_work),
    }
    for scenario, batcher in gate._batchers.items():
        out[f"{scenario.name} batcher pending"] = len(batcher._pending)
        out[f"{scenario.name} batcher running"] = len(batcher._running)
    out["asyncio tasks"] = len(asyncio.all_tasks())
    return out


def live() -> Counter[str]:
    """Live objects after a full collection: gc-tracked ones (containers, instances) and
    every allocated block (strings and floats too: a dict of request id → time is blocks)."""
    gc.collect()
    return Counter({"objects": len(gc.get_objects()), "blocks": sys.getallocatedblocks()})


async def _map(gate: gg.Gateway, start: int, n: int) -> None:
    """Half through the micro-batcher and the cache gate's turns, half plain."""
    half = n // 2
    batched = await gate.map(
        ({"messages": _messages(i), "max_tokens": 12} for i in range(start, start + half)),
        scenario="batch_content",
    )
    plain = await gate.map(
        {"messages": _messages(i), "max_tokens": 12} for i in range(start + half, start + n)
    )
    ok = sum(isinstance(r, gg.ChatResult) for r in [*batched, *plain])
    assert ok >= 0.95 * n  # a fault is retried; the odd item may still fail


async def _workers(n: int, call: Callable[[int], Awaitable[None]], concurrency: int = 48
                   ) -> None:
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await call(i)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _stream(gate: gg.Gateway, start: int, n: int) -> None:
    """Read to the end, except every 10th stream, left after its first delta."""

    async def call(i: int) -> None:
        try:
            async with gate.stream(_messages(start + i), scenario="realtime_chat",
                                   max_tokens=12) as s:
                async for _ in s:
                    if i % 10 == 0:
                        break
        except gg.StreamInterruptedError:
            return  # a reset after the first delta: not retried, and said so
        if i % 10:
            assert s.result.text

    await _workers(n, call)


async def _sdk(gate: gg.Gateway, start: int, n: int) -> None:
    """The official SDK on ``gate.http_client``, alternately streamed and not."""
    openai = pytest.importorskip("openai")
    clients = {
        name: openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-soak",
                                 http_client=gate.http_client(name), max_retries=0)
        for name in ("a", "b")
    }

    async def call(i: int) -> None:
        client = clients["ab"[i % 2]]
        messages: Any = _messages(start + i)
        try:
            if i % 4 < 2:
                response = await client.chat.completions.create(
                    model="m", messages=messages, max_tokens=12)
                assert response.choices[0].message.content
                return
            stream = await client.chat.completions.create(
                model="m", messages=messages, max_tokens=12, stream=True)
            async with stream:
                async for _ in stream:
                    pass
        except (openai.APIError, httpx2.TransportError):
            assert i % 2  # only backend b fails

    try:
        await _workers(n, call)
    finally:
        for client in clients.values():
            await client.close()


def _soak(round_: Round, n: int) -> tuple[dict[str, int], dict[str, int], Counter[str], int]:
    async def main() -> tuple[dict[str, int], dict[str, int], Counter[str], int]:
        async with _gateway(LoopClock()) as gate:
            for name in ("a", "b"):
                # the latency windows are bounded (1,024 samples) but fill slower than this
                # test runs: small ones are full after the first round, so do not count
                state = gate.backend_state(name)
                state.latency, state.ttft = LatencyWindow(16), LatencyWindow(16)
            await round_(gate, 0, n)
            first, before = sizes(gate), live()
            await round_(gate, n, n)
            second = sizes(gate)
            after = live()
            after.subtract(before)
            return first, second, after, sum(s.calls for s in gate.stats().values())

    return run_virtual(main)


def _assert_idle(first: dict[str, int], second: dict[str, int]) -> None:
    busy = {k: v for k, v in second.items()
            if v and any(w in k for w in ("flight", "queued", "heap", "priorities", "checked",
                                          "waiting", "pending", "running", "queue", "registered"))}
    assert not busy, f"not idle after the calls: {busy}"
    assert second == first, "a per-call structure grew with the second round of calls"
    assert second["ledger entries"] == 2 and second["billed-work models"] <= 2
    assert second["cache idle groups"] <= 2 * len(PREFIXES)
    assert second["router affinity"] <= len(PREFIXES)


@pytest.mark.parametrize(("round_", "n"), [(_map, 1000), (_stream, 800), (_sdk, 500)],
                         ids=["map", "stream", "sdk"])
def test_a_second_round_of_calls_leaves_every_per_call_structure_where_the_first_did(
    round_: Round, n: int
) -> None:
    first, second, grown, calls = _soak(round_, n)
    assert calls >= 2 * n
    _assert_idle(first, second)
    # a leak of one object per call adds n objects (≥ 2n blocks): allow constant noise (the
    # second round grows by ~0.1 block per call: bounded buffers still filling), not that
    assert grown["objects"] < n // 20, f"live objects grew by {grown['objects']} over {n} calls"
    assert grown["blocks"] < n // 2, f"allocated blocks grew by {grown['blocks']} over {n} calls"
