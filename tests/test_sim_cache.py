"""Prefix caching follows OpenAI's rules: cached only after a prefill, 1024 then 128-token
steps, idle TTL, and a hot prefix overflowing onto replicas with cold caches."""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
import pytest

from gptgate.sim import PROFILES, LoopClock, SimEngine, SimProfile, get_profile, run_virtual
from gptgate.sim.cache import PrefixCache, block_digests, canonical_text
from gptgate.tokens import estimate_prompt_tokens

SYSTEM = {"role": "system", "content": "Policy clause. " * 400}  # ~1500 tokens


def _body(question: str, **extra: Any) -> bytes:
    msgs = [SYSTEM, {"role": "user", "content": question}]
    return json.dumps({"model": "m", "messages": msgs, **extra}).encode()


async def _usage(engine: SimEngine, question: str, **extra: Any) -> dict[str, Any]:
    r = await engine.handle("POST", "/v1/chat/completions", {}, _body(question, **extra))
    assert r.status == 200 and r.body is not None
    usage: dict[str, Any] = json.loads(r.body)["usage"]
    return usage


def _cached(usage: dict[str, Any]) -> int:
    return int(usage["prompt_tokens_details"]["cached_tokens"])


def _gpu(**update: Any) -> SimProfile:
    return get_profile("gpu").model_copy(update=update)


def test_canonical_text_matches_the_token_estimate() -> None:
    msgs = [SYSTEM, {"role": "user", "content": "odd length!"}, {"role": "assistant"}]
    assert len(canonical_text(msgs)) == 4 * estimate_prompt_tokens(msgs)


def test_first_request_misses_then_the_prefix_is_cached_block_aligned() -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        engine = SimEngine("gpu", clock=LoopClock())
        return await _usage(engine, "first?"), await _usage(engine, "second, different?")

    first, second = run_virtual(main)
    assert _cached(first) == 0
    cached = _cached(second)
    assert cached >= 1024
    assert cached % 128 == 0
    assert cached <= second["prompt_tokens"]
    # only the shared system prefix can be cached, not the differing question
    assert cached <= estimate_prompt_tokens([SYSTEM])


def test_a_cache_hit_prefills_faster() -> None:
    async def main() -> tuple[float, float]:
        engine = SimEngine(_gpu(jitter_sigma=0.0, prefill_tokens_per_s=2000.0), clock=LoopClock())
        times = []
        for q in ("a", "b"):
            t0 = anyio.current_time()
            r = await engine.handle(
                "POST", "/v1/chat/completions", {}, _body(q, stream=True, max_tokens=4)
            )
            assert r.stream is not None
            await r.stream.__anext__()
            times.append(anyio.current_time() - t0)
            await r.stream.aclose()
        return times[0], times[1]

    miss_ttft, hit_ttft = run_virtual(main)
    assert hit_ttft < miss_ttft / 2


def test_a_simultaneous_burst_all_misses() -> None:
    async def main() -> tuple[list[int], int]:
        engine = SimEngine("gpu", clock=LoopClock())
        cached: list[int] = []

        async def one(i: int) -> None:
            cached.append(_cached(await _usage(engine, f"burst {i}")))

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        return cached, _cached(await _usage(engine, "after the burst"))

    burst, after = run_virtual(main)
    assert burst == [0] * 8
    assert after >= 1024


def test_idle_ttl_expires_and_use_refreshes() -> None:
    ttl = 300.0

    async def main() -> tuple[int, int]:
        engine = SimEngine(_gpu(cache_ttl_s=ttl), clock=LoopClock())
        await _usage(engine, "warm", max_tokens=1)
        for i in range(4):  # 4 × 0.6 ttl > ttl in total, but never idle for ttl
            await anyio.sleep(0.6 * ttl)
            assert _cached(await _usage(engine, f"keep {i}")) >= 1024
        await anyio.sleep(ttl + 1)
        expired = _cached(await _usage(engine, "late", max_tokens=1))
        refilled = _cached(await _usage(engine, "again"))
        return expired, refilled

    expired, refilled = run_virtual(main)
    assert expired == 0
    assert refilled >= 1024


def test_lru_bound_evicts_chain_tails_first() -> None:
    cache = PrefixCache(min_blocks=8, max_blocks=10, ttl_s=1e9, timer=lambda: 0.0)
    a = block_digests(canonical_text([{"role": "user", "content": "a" * 7700}]), 128)
    b = block_digests(canonical_text([{"role": "user", "content": "b" * 7700}]), 128)
    assert len(a) == len(b) == 15  # 8 cacheable prefixes each: 8..15 blocks
    cache.insert(a)
    assert cache.lookup(a) == 15
    cache.insert(b)
    assert cache.lookup(b) == 15
    assert 8 <= cache.lookup(a) < 15  # a's longest prefixes were evicted, its head survives
    assert len(cache) <= 10


def _misses(overflow_rpm: float | None) -> int:
    profile = get_profile("hosted").model_copy(
        update={"prefix_overflow_rpm": overflow_rpm, "replicas": 8}
    )

    async def main() -> int:
        engine = SimEngine(profile, clock=LoopClock(), seed=3)
        misses = 0

        async def one(i: int) -> None:
            nonlocal misses
            usage = await _usage(engine, f"steady {i}")
            misses += _cached(usage) == 0

        async with anyio.create_task_group() as tg:
            for i in range(240):  # 120 requests/minute on one prefix, for two minutes
                tg.start_soon(one, i)
                await anyio.sleep(0.5)
        return misses

    return run_virtual(main)


def test_replica_overflow_lowers_the_hit_rate_of_a_hot_prefix() -> None:
    assert _misses(None) == 1  # pinned to one replica: only the very first request misses
    assert _misses(15.0) >= 4  # spread over up to 8 replicas, each warms up on a miss


def test_prompt_cache_key_changes_routing() -> None:
    profile = get_profile("hosted").model_copy(update={"replicas": 16, "prefix_overflow_rpm": None})

    async def main() -> tuple[int, int]:
        engine = SimEngine(profile, clock=LoopClock())
        await _usage(engine, "warm", prompt_cache_key="tenant-a")
        same_key = _cached(await _usage(engine, "q", prompt_cache_key="tenant-a"))
        misses = 0
        for k in range(8):  # another key lands elsewhere (cold) at least once in 8 tries
            usage = await _usage(engine, "q", prompt_cache_key=f"other-{k}")
            misses += _cached(usage) == 0
        return same_key, misses

    same_key, misses = run_virtual(main)
    assert same_key >= 1024
    assert misses >= 1


def test_the_spread_profile_forgets_a_prefix_its_replicas_stop_seeing() -> None:
    """'spread' (issue 14): a hot prefix spreads over eight replicas whose copies live seconds,
    so a prefix used rarely misses again where one used often keeps hitting."""
    profile = get_profile("spread")
    assert (profile.replicas, profile.prefix_overflow_rpm, profile.kv_blocks) == (8, 15.0, None)
    assert profile.cache_ttl_s <= 10 and profile.overload_error_rate == 0

    async def main() -> tuple[int, int]:
        clock = LoopClock()
        engine = SimEngine(profile.model_copy(update={"replicas": 1}), clock=clock)
        await _usage(engine, "warm", max_tokens=1)
        await clock.sleep(profile.cache_ttl_s / 2)
        soon = _cached(await _usage(engine, "soon", max_tokens=1))
        await clock.sleep(profile.cache_ttl_s * 2)
        late = _cached(await _usage(engine, "late", max_tokens=1))
        return soon, late

    soon, late = run_virtual(main)
    assert soon >= 1024 and late == 0


def _spread_burst(spread_in_flight: int | None) -> tuple[list[int], int]:
    """A warm prefix, then a burst of 6 calls on it, then one more call alone: the cached
    tokens of each burst call, and of the lone call after the burst."""
    profile = get_profile("spread").model_copy(
        update={"slots": 4, "prefix_overflow_rpm": None, "spread_in_flight": spread_in_flight}
    )

    async def main() -> tuple[list[int], int]:
        engine = SimEngine(profile, clock=LoopClock(), seed=5)
        await _usage(engine, "warm", max_tokens=4)
        cached: list[int] = []

        async def one(i: int) -> None:
            cached.append(_cached(await _usage(engine, f"burst {i}", max_tokens=4)))

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
        after = _cached(await _usage(engine, "after", max_tokens=4))
        return cached, after

    return run_virtual(main)


def test_a_hot_prefix_spreads_once_its_calls_in_flight_on_home_reach_the_knob() -> None:
    """spread_in_flight=2: the first two calls of a burst run on the warm home replica, the
    other four go to cold replicas (misses); once they end, the prefix is back home (a hit).
    None (every named profile): the burst stays home while it has slots (4 hits, then the
    full-replica balance sends 2 elsewhere)."""
    spread, after = _spread_burst(2)
    assert sum(c > 0 for c in spread) == 2 and after >= 1024
    kept, _ = _spread_burst(None)
    assert sum(c > 0 for c in kept) == 4
    assert all(p.spread_in_flight is None for p in PROFILES.values())


class _TTLCacheReference:
    """PrefixCache as it was on cachetools.TTLCache (one clock read per block): the ordered
    dict that replaced it for speed must answer and evict exactly alike."""

    def __init__(self, min_blocks: int, max_blocks: int, ttl_s: float, timer: Any,
                 refresh: bool) -> None:
        from cachetools import TTLCache

        self.low = min_blocks
        self.blocks: TTLCache[bytes, None] = TTLCache(max_blocks, ttl_s, timer=timer)
        self.refresh = refresh

    def lookup(self, digests: list[bytes]) -> int:
        n = 0
        for i in range(self.low - 1, len(digests)):
            if digests[i] not in self.blocks:
                break
            n = i + 1
        if n and self.refresh:
            self.touch(digests[self.low - 1 : n])
        return n

    def touch(self, chain: list[bytes]) -> None:
        for d in reversed(chain):
            if self.refresh or d not in self.blocks:
                self.blocks[d] = None


@pytest.mark.parametrize("refresh", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_prefix_cache_matches_the_ttlcache_it_replaced(refresh: bool, seed: int) -> None:
    rng = random.Random(seed)
    now = [0.0]
    ttl, bound = rng.choice([0.5, 2.0, 10.0]), rng.choice([3, 12, 40, 1000])
    fast = PrefixCache(min_blocks=2, max_blocks=bound, ttl_s=ttl, timer=lambda: now[0],
                       refresh=refresh)
    ref = _TTLCacheReference(2, bound, ttl, lambda: now[0], refresh)
    prompts = [[bytes([p, i]) for i in range(rng.randint(1, 20))] for p in range(8)]
    for _ in range(3000):
        now[0] += rng.choice([0.0, 0.0, 0.1, 0.5, 1.0, 3.0])
        chain = rng.choice(prompts)[: rng.randint(1, 20)]
        assert fast.lookup(chain) == ref.lookup(chain)
        if rng.random() < 0.6:
            fast.insert(chain)
            ref.touch(chain[1:])
        assert len(fast) == len(ref.blocks)


def _digests_reference(canonical: str, block_tokens: int) -> list[bytes]:
    import hashlib

    chars = block_tokens * 4
    h = hashlib.blake2b(digest_size=16)
    out = []
    for start in range(0, len(canonical) - chars + 1, chars):
        h.update(canonical[start : start + chars].encode("utf-8", "surrogatepass"))
        out.append(h.copy().digest())
    return out


@pytest.mark.parametrize("text", ["Policy clause. " * 300, "Politique générale — ✓ " * 300])
def test_block_digests_hash_each_blocks_characters(text: str) -> None:
    """The ASCII fast path (one encode for the whole prompt) keys blocks exactly as before."""
    canonical = canonical_text([{"role": "system", "content": text}])
    assert block_digests(canonical, 128) == _digests_reference(canonical, 128)
    assert len(block_digests(canonical, 128)) == len(canonical) // 512
