"""The seeded server family (gptgate.sim.family, issue 31): same seed same server, every knob
in its documented range and every part of each range reachable, every draw runnable; and the
engine knobs the family needed (stragglers, no refresh on hit, answers that fill max_tokens)
each do what they say."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

import gptgate.sim as sim
from gptgate.sim import LoopClock, SimEngine, SimProfile, get_profile, run_virtual
from gptgate.sim.cache import KVPrefixCache, PrefixCache
from gptgate.sim.family import (
    CACHE_LIFETIME_CALLS,
    CACHE_TOKENS,
    CONTEXT_TOKENS,
    DECODE_STEP_S,
    HARD_FAILURE_RATE,
    HARDWARE,
    JITTER_SIGMA,
    KNEE_PER_SLOT,
    LOAD_JITTER_SIGMA,
    OUTPUT_TOKENS_MEAN,
    OUTPUT_TOKENS_SIGMA,
    PREFILL_TOKENS_PER_S,
    QUEUE_PER_SLOT,
    REPLICAS,
    RPM,
    SLOTS,
    SPREAD_IN_FLIGHT,
    STRAGGLER_RATE,
    STRAGGLER_S,
    TPM,
    TTFT_OVERHEAD_S,
    USL_SIGMA,
    FamilyDraw,
    call_latency_s,
    family_draw,
)

SEEDS = range(500)
SYSTEM = {"role": "system", "content": "Policy clause. " * 400}  # ~1,500 tokens, cacheable


@cache
def _draws() -> tuple[FamilyDraw, ...]:
    return tuple(family_draw(s) for s in SEEDS)


def _servers() -> list[SimProfile]:
    return [d.server for d in _draws()]


def _knee_per_slot(p: SimProfile) -> float | None:
    return None if p.usl_kappa == 0 else p.knee / p.slots


# -- seeded --------------------------------------------------------------------------------


def test_the_same_seed_draws_the_same_server_and_others_differ() -> None:
    assert isinstance(sim.family(7), SimProfile)  # DESIGN.md's spelling: gptgate.sim.family
    assert sim.family(7) == sim.family(7)
    assert family_draw(7) == family_draw(7)
    assert family_draw(7).server == sim.family(7)
    assert sim.family(7).name == "family-7"
    knobs = [s.model_dump(exclude={"name"}) for s in _servers()[:50]]
    assert all(a != b for i, a in enumerate(knobs) for b in knobs[i + 1 :])


@pytest.mark.parametrize("seed", ["7", 7.0, True, None])
def test_a_seed_that_is_not_an_int_is_refused(seed: Any) -> None:
    with pytest.raises(TypeError, match="seed is an int"):
        sim.family(seed)


def test_the_small_tier_is_the_server_with_a_small_models_speed_and_mistakes() -> None:
    for d in _draws()[:100]:
        s, small = d.server, d.small
        assert s.hard_failure_rate == 0
        assert HARD_FAILURE_RATE[0] <= small.hard_failure_rate <= HARD_FAILURE_RATE[1]
        assert small.name == f"{s.name}-small" and small.model != s.model
        assert small.base_step_s < s.base_step_s
        assert small.prefill_tokens_per_s > s.prefill_tokens_per_s
        assert small.context_tokens <= 32_768
        assert (small.replicas, small.slots, small.max_queue) == (s.replicas, s.slots, s.max_queue)
        assert d.call_s == pytest.approx(call_latency_s(s))
        assert s.cache_ttl_s == pytest.approx(d.cache_calls * d.call_s)


# -- in range, and every part of every range reached ------------------------------------------


def _within(value: float, span: tuple[float, float]) -> bool:
    return span[0] <= value <= span[1] or math.isclose(value, span[0]) or math.isclose(
        value, span[1]
    )


#: continuous and integer knobs: (read it off a draw, its documented range, drawn in log space)
_SPANS: dict[str, tuple[Callable[[FamilyDraw], float | None], tuple[float, float], bool]] = {
    "replicas": (lambda d: d.server.replicas, REPLICAS, True),
    "slots": (lambda d: d.server.slots, SLOTS, True),
    "queue per slot": (
        lambda d: None
        if d.server.max_queue is None or d.server.max_queue == 1
        else d.server.max_queue / d.server.slots,
        (QUEUE_PER_SLOT[0] * 0.8, QUEUE_PER_SLOT[1] * 1.2),  # rounded to whole requests
        True,
    ),
    "cache lifetime (calls)": (lambda d: d.cache_calls, CACHE_LIFETIME_CALLS, True),
    "cache tokens": (
        lambda d: d.server.cache_max_blocks * d.server.cache_block_tokens,
        (CACHE_TOKENS[0] - 128, CACHE_TOKENS[1]),
        True,
    ),
    "prefill": (lambda d: d.server.prefill_tokens_per_s, PREFILL_TOKENS_PER_S, True),
    "decode step": (lambda d: d.server.base_step_s, DECODE_STEP_S, True),
    "ttft overhead": (lambda d: d.server.ttft_overhead_s, TTFT_OVERHEAD_S, True),
    "usl sigma": (lambda d: d.server.usl_sigma, USL_SIGMA, False),
    "knee per slot": (
        lambda d: None if d.server.slots < 4 else _knee_per_slot(d.server),
        KNEE_PER_SLOT,
        True,
    ),
    "jitter": (lambda d: d.server.jitter_sigma, JITTER_SIGMA, False),
    "load jitter": (lambda d: d.server.load_jitter_sigma, LOAD_JITTER_SIGMA, False),
    "straggler rate": (
        lambda d: d.server.straggler_rate or None,
        STRAGGLER_RATE,
        False,
    ),
    "straggler low s": (lambda d: d.server.straggler_s[0], STRAGGLER_S, False),
    "straggler high s": (lambda d: d.server.straggler_s[1], STRAGGLER_S, False),
    "rpm": (lambda d: d.server.rpm, RPM, True),
    "tpm": (lambda d: d.server.tpm, TPM, True),
    "output mean": (lambda d: d.server.output_tokens_mean, OUTPUT_TOKENS_MEAN, True),
    "output sigma": (lambda d: d.server.output_tokens_sigma, OUTPUT_TOKENS_SIGMA, False),
    "small hard failures": (lambda d: d.small.hard_failure_rate, HARD_FAILURE_RATE, False),
    "spread in flight": (lambda d: d.server.spread_in_flight, SPREAD_IN_FLIGHT, True),
}




def _fraction(value: float, span: tuple[float, float], log: bool) -> float:
    """Where ``value`` sits in ``span``, 0 at its low end, 1 at its high end."""
    low, high = span
    if log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (value - low) / (high - low)


@pytest.mark.parametrize("knob", sorted(_SPANS))
def test_every_knob_stays_in_its_range_and_reaches_both_ends(knob: str) -> None:
    read, span, log = _SPANS[knob]
    values = [v for v in (read(d) for d in _draws()) if v is not None]
    assert len(values) >= 50, knob
    outside = [v for v in values if not _within(v, span)]
    assert not outside, (knob, span, outside[:5])
    where = [_fraction(v, span, log) for v in values]
    assert min(where) < 0.1, (knob, "low end never drawn", min(values))
    assert max(where) > 0.9, (knob, "high end never drawn", max(values))


def test_each_hardware_keeps_to_its_own_speeds_and_slots() -> None:
    for s in _servers():
        hw = HARDWARE[s.hardware]
        assert hw.slots[0] <= s.slots <= hw.slots[1]
        assert _within(s.prefill_tokens_per_s, hw.prefill_tokens_per_s)
        assert _within(s.base_step_s, hw.decode_step_s)
        assert _within(s.ttft_overhead_s, hw.ttft_overhead_s)


#: discrete options: (read it off a draw, every value it must take over the seeds)
_OPTIONS: dict[str, tuple[Callable[[FamilyDraw], object], set[object]]] = {
    "hardware": (lambda d: d.server.hardware, {"cpu", "gpu", "tpu"}),
    "flavor": (lambda d: d.server.flavor, {"openai", "llamacpp"}),
    "queue": (
        lambda d: "unbounded" if d.server.max_queue is None else d.server.queue_full_status,
        {"unbounded", 429, 503},
    ),
    "context": (lambda d: d.server.context_tokens, set(CONTEXT_TOKENS)),
    "cache rules": (
        lambda d: (d.server.cache_min_tokens, d.server.cache_block_tokens),
        {(1024, 128), (16, 16)},
    ),
    "refresh on hit": (lambda d: d.server.cache_refresh_on_hit, {True, False}),
    "kv pressure": (lambda d: d.server.kv_blocks is None, {True, False}),
    "contention": (lambda d: d.server.usl_kappa == 0, {True, False}),
    "stragglers": (lambda d: d.server.straggler_rate == 0, {True, False}),
    "rate limits": (
        lambda d: (d.server.rpm is not None, d.server.tpm is not None),
        {(False, False), (True, False), (False, True), (True, True)},
    ),
    "fills max_tokens": (lambda d: d.server.fills_max_tokens, {True, False}),
    "small fills max_tokens": (lambda d: d.small.fills_max_tokens, {True, False}),
    "one replica or many": (lambda d: d.server.replicas == 1, {True, False}),
    "spreads": (lambda d: d.server.spread_in_flight is None, {True, False}),
}


@pytest.mark.parametrize("knob", sorted(_OPTIONS))
def test_every_option_of_every_discrete_knob_appears(knob: str) -> None:
    read, expected = _OPTIONS[knob]
    seen = [read(d) for d in _draws()]
    assert set(seen) == expected
    for option in expected:  # each a real share, not a fluke
        assert seen.count(option) >= 15, (knob, option, seen.count(option))


def test_a_bounded_queue_holds_at_least_one_request_and_llamacpp_finishes_abandoned() -> None:
    for s in _servers():
        assert s.max_queue is None or s.max_queue >= 1
        assert s.finishes_abandoned == (s.flavor == "llamacpp")
        if s.usl_kappa:
            assert s.knee >= 2 - 1e-9


# -- every draw runs -----------------------------------------------------------------------


def _body(question: str, **extra: Any) -> bytes:
    msgs = [SYSTEM, {"role": "user", "content": question}]
    return json.dumps({"model": "m", "messages": msgs, **extra}).encode()


async def _post(engine: SimEngine, question: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    r = await engine.handle("POST", "/v1/chat/completions", {}, _body(question, **extra))
    if r.stream is not None:
        try:
            chunks = [c async for c in r.stream]
        finally:
            await r.stream.aclose()
        return r.status, {"chunks": len(chunks)}
    assert r.body is not None
    return r.status, json.loads(r.body)


@pytest.mark.parametrize("seed", range(0, 400, 25))
def test_every_draw_serves_calls_in_virtual_time(seed: int) -> None:
    draw = family_draw(seed)

    async def main(profile: SimProfile) -> list[int]:
        engine = SimEngine(profile, clock=LoopClock(), seed=seed)
        first, answer = await _post(engine, "first?", max_tokens=32)
        assert first == 200, answer
        assert answer["choices"][0]["finish_reason"] in ("stop", "length")
        status, _ = await _post(engine, "streamed?", stream=True, max_tokens=8)
        assert status == 200
        statuses: list[int] = []

        async def one(i: int) -> None:
            statuses.append((await _post(engine, f"burst {i}?", max_tokens=16))[0])

        async with anyio.create_task_group() as tg:
            for i in range(2 * profile.slots):
                tg.start_soon(one, i)
        assert engine.snapshot().active == engine.snapshot().queued == 0
        return statuses

    for profile in (draw.server, draw.small):
        statuses = run_virtual(main, profile)
        assert set(statuses) <= {200, 429, 503}
        # a rate limit may refuse most of a burst (a low TPM tier); the slots take their share
        limited = profile.rpm is not None or profile.tpm is not None
        assert statuses.count(200) >= (1 if limited else min(len(statuses), profile.slots))


# -- the engine knobs the family needed -----------------------------------------------------


def _plain(**update: Any) -> SimProfile:
    base = {"jitter_sigma": 0.0, "load_jitter_sigma": 0.0, "output_tokens_sigma": 0.0}
    return get_profile("gpu").model_copy(update={**base, **update})


async def _timed(engine: SimEngine, question: str, **extra: Any) -> float:
    t0 = anyio.current_time()
    status, _ = await _post(engine, question, **extra)
    assert status == 200
    return anyio.current_time() - t0


def test_a_straggler_stalls_before_it_is_scheduled_holding_no_slot() -> None:
    async def main() -> tuple[float, float, tuple[int, int]]:
        plain = SimEngine(_plain(), clock=LoopClock())
        stalls = SimEngine(_plain(straggler_rate=1.0, straggler_s=(2.0, 2.0)), clock=LoopClock())
        base = await _timed(plain, "q", max_tokens=8)
        stalled = await _timed(stalls, "q", max_tokens=8)
        seen: list[tuple[int, int]] = []

        async def watch() -> None:
            await anyio.sleep(1.0)
            snap = stalls.snapshot()
            seen.append((snap.active, snap.queued))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await _timed(stalls, "again", max_tokens=8)
        return base, stalled, seen[0]

    base, stalled, during = run_virtual(main)
    assert stalled == pytest.approx(base + 2.0, abs=0.01)
    assert during == (0, 0)  # stalled, neither running nor queued


def test_stragglers_are_the_drawn_share_and_each_arrival_is_a_fresh_draw() -> None:
    async def main() -> list[float]:
        engine = SimEngine(
            _plain(straggler_rate=0.3, straggler_s=(1.0, 3.0), output_tokens_mean=4.0),
            clock=LoopClock(),
            seed=3,
        )
        # the same body every time: a hedge of a stalled request is not stalled for that
        return [await _timed(engine, "same", max_tokens=4) for _ in range(300)]

    times = run_virtual(main)
    fast = min(times)
    stalled = [t - fast for t in times if t > fast + 0.5]
    assert 0.2 < len(stalled) / len(times) < 0.4
    assert all(1.0 - 0.01 <= s <= 3.0 + 0.01 for s in stalled)
    assert run_virtual(main) == times  # seeded


def test_a_client_that_leaves_during_a_stall_is_billed_nothing() -> None:
    async def main() -> tuple[int, int]:
        engine = SimEngine(_plain(straggler_rate=1.0, straggler_s=(5.0, 5.0)), clock=LoopClock())
        with anyio.move_on_after(1.0):
            await _post(engine, "q", max_tokens=8)
        snap = engine.ledger.snapshot()
        return snap.abandoned, snap.input_tokens

    assert run_virtual(main) == (1, 0)


def test_no_stragglers_draws_exactly_what_it_always_did() -> None:
    async def main(profile: SimProfile) -> list[float]:
        engine = SimEngine(profile, clock=LoopClock(), seed=5)
        return [await _timed(engine, f"q{i}", max_tokens=16) for i in range(20)]

    gpu = get_profile("gpu")
    assert run_virtual(main, gpu) == run_virtual(
        main, gpu.model_copy(update={"straggler_s": (0.5, 5.0)})
    )


@pytest.mark.parametrize("straggler_s", [(2.0, 1.0), (-1.0, 1.0), (1.0, math.inf)])
def test_a_straggler_range_must_be_low_to_high_and_finite(straggler_s: tuple[float, float]) -> None:
    with pytest.raises(ValidationError, match="straggler_s"):
        SimProfile.model_validate({**_plain().model_dump(), "straggler_s": straggler_s})


def test_a_model_that_fills_max_tokens_is_cut_with_length() -> None:
    async def main(profile: SimProfile, max_tokens: int | None) -> tuple[str, int]:
        engine = SimEngine(profile, clock=LoopClock())
        extra = {} if max_tokens is None else {"max_tokens": max_tokens}
        status, body = await _post(engine, "short ask", **extra)
        assert status == 200
        return body["choices"][0]["finish_reason"], body["usage"]["completion_tokens"]

    short = {"output_tokens_mean": 20.0}
    assert run_virtual(main, _plain(**short), 500) == ("stop", 20)
    fills = _plain(fills_max_tokens=True, **short)
    assert run_virtual(main, fills, 500) == ("length", 500)
    assert run_virtual(main, fills, 16) == ("length", 16)
    assert run_virtual(main, fills, None) == ("stop", 20)  # no cap: its natural length


class _Timer:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _chain(n: int) -> list[bytes]:
    return [f"p{i}".encode() for i in range(n)]


def _kv(timer: _Timer, *, refresh: bool) -> KVPrefixCache:
    return KVPrefixCache(
        budget=100, min_blocks=2, max_blocks=1000, ttl_s=10.0, timer=timer, refresh=refresh
    )


def _run_once(cache: KVPrefixCache, chain: list[bytes]) -> None:
    lease = cache.admit(chain, 10)
    lease.publish()
    lease.release()


@pytest.mark.parametrize("refresh", [True, False])
def test_prefix_cache_without_refresh_expires_at_ttl_from_insert(refresh: bool) -> None:
    timer = _Timer()
    cache = PrefixCache(min_blocks=2, max_blocks=1000, ttl_s=10.0, timer=timer, refresh=refresh)
    chain = _chain(8)
    cache.insert(chain)
    for t in (3.0, 6.0, 9.0):  # hit often, never idle for 10 s
        timer.t = t
        assert cache.lookup(chain) == 8
        cache.insert(chain)  # a hit is prefilled and published again, as the engine does
    timer.t = 10.5
    assert cache.lookup(chain) == (8 if refresh else 0)


@pytest.mark.parametrize("refresh", [True, False])
def test_kv_cache_without_refresh_expires_at_ttl_from_insert(refresh: bool) -> None:
    timer = _Timer()
    cache = _kv(timer, refresh=refresh)
    chain = _chain(8)
    _run_once(cache, chain)
    for t in (3.0, 6.0, 9.0):
        timer.t = t
        lease = cache.admit(chain, 10)
        assert lease.pinned == 8
        lease.publish()
        timer.t = t + 1.0  # it runs for a second, then frees its blocks
        lease.release()
    timer.t = 10.5
    assert cache.cached(chain) == (8 if refresh else 0)
    assert cache.free_cached == (8 if refresh else 0)
    _run_once(cache, chain)  # computed again, it is young again
    timer.t = 20.0
    assert cache.cached(chain) == 8


def test_kv_cache_without_refresh_drops_a_block_outliving_its_ttl_while_in_use() -> None:
    timer = _Timer()
    cache = _kv(timer, refresh=False)
    chain = _chain(8)
    long = cache.admit(chain, 10)
    long.publish()
    timer.t = 12.0
    assert cache.cached(chain) == 0  # still in use, but older than its lifetime: a miss
    long.release()
    assert cache.free_cached == 0 and cache.used == 0


@pytest.mark.parametrize("kv_blocks", [None, 400])
def test_engine_without_refresh_misses_at_ttl_from_the_first_write(kv_blocks: int | None) -> None:
    async def main(profile: SimProfile) -> list[int]:
        engine = SimEngine(profile, clock=LoopClock())
        cached: list[int] = []
        for i in range(5):  # one call every 3 s: never 10 s idle
            _, body = await _post(engine, f"q{i}", max_tokens=4)
            cached.append(body["usage"]["prompt_tokens_details"]["cached_tokens"])
            await anyio.sleep(3.0)
        return cached

    keep = _plain(cache_ttl_s=10.0, kv_blocks=kv_blocks)
    assert all(run_virtual(main, keep)[1:])
    ages = run_virtual(main, keep.model_copy(update={"cache_refresh_on_hit": False}))
    assert ages[0] == 0 and all(ages[1:4])
    assert ages[4] == 0  # 12 s after the first write: expired, however often it was hit


@pytest.mark.parametrize("paired", [True, False])
def test_paired_draws_give_every_request_its_own_stall_and_jitter(paired: bool) -> None:
    """``paired_draws``: one extra request (a hedge's duplicate) leaves every other request's
    stall and jitter as they were — the plain and hedged runs of a job meet the same luck.
    Drawn in arrival order (the default), the extra request shifts every later draw."""

    async def main(extra: bool) -> list[float]:
        engine = SimEngine(
            _plain(straggler_rate=0.3, straggler_s=(1.0, 3.0), jitter_sigma=0.3,
                   output_tokens_mean=4.0, paired_draws=paired),
            clock=LoopClock(),
            seed=5,
        )
        times = [await _timed(engine, "q0", max_tokens=4)]
        if extra:  # the duplicate: the same body again, a fresh draw of its own
            await _timed(engine, "q0", max_tokens=4)
        times += [await _timed(engine, f"q{n}", max_tokens=4) for n in range(1, 40)]
        return times

    alone, with_extra = run_virtual(main, False), run_virtual(main, True)
    same = all(abs(a - b) < 1e-9 for a, b in zip(alone, with_extra, strict=True))
    assert same is paired
