"""KV-cache pressure on the prefix cache (profile ``kv_blocks``): running sequences hold
blocks for prompt + output, cached prefixes live in the blocks they leave free (LRU)."""

from __future__ import annotations

import json
import random
from typing import Any

import anyio

from gptgate.sim import LoopClock, SimEngine, SimProfile, get_profile, run_virtual
from gptgate.sim.cache import KVPrefixCache, PrefixCache


class _Timer:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _chain(tag: str, n: int) -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


def _kv(budget: int, *, ttl_s: float = 300.0, timer: _Timer | None = None) -> KVPrefixCache:
    return KVPrefixCache(
        budget=budget, min_blocks=2, max_blocks=10_000, ttl_s=ttl_s, timer=timer or _Timer()
    )


def _run_once(cache: KVPrefixCache, digests: list[bytes], blocks: int) -> int:
    lease = cache.admit(digests, blocks)
    hit = lease.pinned
    lease.publish()
    lease.release()
    return hit


def test_prefix_survives_without_pressure() -> None:
    cache = _kv(100)
    a = _chain("a", 8)
    assert _run_once(cache, a, 10) == 0
    assert cache.used == 0 and cache.free_cached == 8
    assert _run_once(cache, a, 10) == 8


def test_running_sequences_evict_idle_prefixes_lru() -> None:
    cache = _kv(30)
    a, b = _chain("a", 8), _chain("b", 8)
    _run_once(cache, a, 10)
    _run_once(cache, b, 10)  # a is older than b
    assert cache.free_cached == 16
    # a long private sequence needs 20 blocks: only 10 stay free, a's blocks go first
    big = cache.admit([], 20)
    assert cache.used == 20 and cache.free_cached == 10
    assert cache.cached(b) == 8
    assert cache.cached(a) == 2  # the older chain lost 6 blocks, from its tail
    big.release()
    assert _run_once(cache, b, 10) == 8
    assert _run_once(cache, a, 10) == 2


def test_a_chain_loses_its_tail_before_its_head() -> None:
    cache = _kv(12)
    a = _chain("a", 8)
    _run_once(cache, a, 8)
    lease = cache.admit([], 7)  # 5 blocks of room left: the head of a's chain survives
    assert cache.cached(a) == 5
    lease.release()


def test_shared_blocks_count_once() -> None:
    cache = _kv(100)
    a = _chain("a", 8)
    first = cache.admit(a, 10)
    assert cache.used == 10
    first.publish()  # the 8 prompt blocks become shared cache entries
    assert cache.used == 10
    second = cache.admit(a, 10)  # hits all 8, holds 2 private blocks of its own
    assert second.pinned == 8
    assert cache.used == 8 + 2 + 2
    # a burst duplicate: computed without a hit, then published onto the same entries
    third = cache.admit(_chain("a", 8)[:1], 10)
    assert third.pinned == 0
    third.digests = a
    third.publish()
    assert cache.used == 8 + 2 + 2 + 2
    for lease in (first, second, third):
        lease.release()
        lease.release()  # exactly once
    assert cache.used == 0 and cache.free_cached == 8


def test_in_use_blocks_are_never_evicted() -> None:
    cache = _kv(12)
    a = _chain("a", 8)
    holder = cache.admit(a, 10)
    holder.publish()
    squeeze = cache.admit([], 50)  # over budget: the cache is empty but a's blocks are held
    assert cache.free_cached == 0
    assert cache.cached(a) == 8
    squeeze.release()
    holder.release()


def test_idle_ttl_expires_free_blocks() -> None:
    timer = _Timer()
    cache = _kv(100, ttl_s=10.0, timer=timer)
    a = _chain("a", 8)
    _run_once(cache, a, 10)
    timer.t = 9.0
    assert _run_once(cache, a, 10) == 8  # the hit refreshed it
    timer.t = 18.0
    assert cache.cached(a) == 8
    timer.t = 19.5
    assert cache.cached(a) == 0 and len(cache) == 0


# -- through the engine --------------------------------------------------------------------

MODEL_SYSTEMS = [f"Tenant {k} policy. " + "clause " * 900 for k in range(24)]  # ~1.4k tokens


def _body(k: int, i: int) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": MODEL_SYSTEMS[k]},
            {"role": "user", "content": f"question {i} for tenant {k}"},
        ],
        "max_tokens": 200,
    }


def _workload(prefixes: int, per: int) -> list[dict[str, Any]]:
    items = [_body(k, i) for k in range(prefixes) for i in range(per)]
    random.Random(5).shuffle(items)
    return items


async def _naive(profile: SimProfile, items: list[dict[str, Any]], c: int) -> tuple[float, int]:
    engine = SimEngine(profile, clock=LoopClock(), seed=3)
    limiter = anyio.CapacityLimiter(c)

    async def one(body: dict[str, Any]) -> None:
        async with limiter:
            r = await engine.handle("POST", "/v1/chat/completions", {}, json.dumps(body).encode())
            assert r.status == 200

    async with anyio.create_task_group() as tg:
        for body in items:
            tg.start_soon(one, body)
    ledger = engine.ledger.snapshot()
    return ledger.cache_hit_rate, ledger.cached_input_tokens


def _gpu(**update: Any) -> SimProfile:
    return get_profile("gpu").model_copy(update={"jitter_sigma": 0.0, **update})


def test_kv_none_keeps_the_plain_prefix_cache() -> None:
    async def main() -> tuple[bool, bool]:
        plain = SimEngine(_gpu(), clock=LoopClock())
        kv = SimEngine(_gpu(kv_blocks=64), clock=LoopClock())
        return (
            all(isinstance(r.cache, PrefixCache) for r in plain._replicas),
            isinstance(kv._replicas[0].cache, KVPrefixCache),
        )

    assert get_profile("gpu").kv_blocks is None
    assert run_virtual(main) == (True, True)


def test_an_ample_budget_caches_like_no_budget() -> None:
    items = _workload(6, 5)
    _, without = run_virtual(_naive, _gpu(), items, 4)
    _, ample = run_virtual(_naive, _gpu(kv_blocks=1_000_000), items, 4)
    assert ample == without > 0


def test_hit_rate_falls_with_concurrency_under_a_budget() -> None:
    items = _workload(24, 6)
    budget = _gpu(kv_blocks=24 * 11 + 4 * 13)  # the prefixes fit beside ~4 running calls
    low, _ = run_virtual(_naive, budget, items, 2)
    high, _ = run_virtual(_naive, budget, items, 24)
    unbounded, _ = run_virtual(_naive, _gpu(), items, 24)
    assert high < low - 0.1
    assert high < unbounded - 0.1
    # without a budget only the burst misses grow with concurrency: much less
    low_unbounded, _ = run_virtual(_naive, _gpu(), items, 2)
    assert low - high > (low_unbounded - unbounded) + 0.1


def test_kv_blocks_are_all_returned_after_the_run() -> None:
    async def main() -> tuple[int, int]:
        engine = SimEngine(_gpu(kv_blocks=200), clock=LoopClock(), seed=1)
        for body in _workload(3, 2):
            await engine.handle("POST", "/v1/chat/completions", {}, json.dumps(body).encode())
        cache = engine._replicas[0].cache
        assert isinstance(cache, KVPrefixCache)
        return cache.used, cache.free_cached

    used, free = run_virtual(main)
    assert used == 0 and 0 < free <= 200
