"""AdaptiveTimeout and the P² streaming quantile it stands on."""

from __future__ import annotations

import math
import random

import pytest

from gptgate.limits import AdaptiveTimeout, P2Quantile, WindowedQuantile


def exact_quantile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p * len(ordered)) - 1)]


@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("dist", ["uniform", "lognormal"])
def test_p2_tracks_the_exact_quantile(p: float, dist: str) -> None:
    rng = random.Random(1)
    values = [
        rng.random() if dist == "uniform" else rng.lognormvariate(0, 0.5) for _ in range(20_000)
    ]
    q = P2Quantile(p)
    for v in values:
        q.add(v)
    assert q.count == 20_000
    assert q.value == pytest.approx(exact_quantile(values, p), rel=0.02)


def test_p2_is_exact_for_few_observations() -> None:
    q = P2Quantile(0.5)
    assert math.isnan(q.value)
    for v in (3.0, 1.0, 2.0):
        q.add(v)
    assert q.value == 2.0


def test_windowed_quantile_follows_a_shift() -> None:
    q = WindowedQuantile(0.9, window=500)
    rng = random.Random(2)
    for _ in range(1_000):
        q.add(rng.random())
    assert q.value == pytest.approx(0.9, abs=0.03)
    for _ in range(1_000):
        q.add(10 + rng.random())
    assert q.value == pytest.approx(10.9, abs=0.03)


def test_max_until_enough_samples() -> None:
    t = AdaptiveTimeout(min_s=1.0, max_s=60.0, min_samples=50)
    assert t.timeout_for(100) == 60.0
    for _ in range(49):
        t.observe(1.0, 100)
    assert t.timeout_for(100) == 60.0
    assert t.timeout_for(None) == 60.0


def test_timeout_is_multiplier_times_p99_per_token_times_expected_size() -> None:
    t = AdaptiveTimeout(min_s=1.0, max_s=600.0, multiplier=2.0, overhead_tokens=20)
    rng = random.Random(3)
    per_token = []
    for _ in range(2_000):
        n = rng.randint(10, 500)
        s = rng.uniform(0.01, 0.02)  # seconds per token, whatever the size
        t.observe((n + 20) * s, n)
        per_token.append(s)
    p99 = exact_quantile(per_token[-1_000:], 0.99)
    assert t.per_token_quantile == pytest.approx(p99, rel=0.02)
    assert t.timeout_for(100) == pytest.approx(2.0 * p99 * 120, rel=0.02)
    # a long answer gets a longer timeout, a short one a shorter one
    assert t.timeout_for(1_000) > t.timeout_for(100) > t.timeout_for(10)
    # bounded
    assert t.timeout_for(1_000_000) == 600.0
    assert t.timeout_for(0) == pytest.approx(max(1.0, 2.0 * p99 * 20), rel=0.02)


def test_without_an_expected_size_the_whole_latency_quantile_is_used() -> None:
    t = AdaptiveTimeout(min_s=0.1, max_s=100.0, multiplier=1.5)
    for i in range(1_000):
        t.observe(1.0 + (i % 100) / 100)
    assert t.timeout_for(None) == pytest.approx(1.5 * 1.99, rel=0.02)


def test_timeouts_are_censored_observations_not_forgotten() -> None:
    t = AdaptiveTimeout(min_s=0.1, max_s=100.0, multiplier=1.0, min_samples=10)
    for _ in range(200):
        t.observe(1.0, 30)
    tight = t.timeout_for(30)
    for _ in range(20):  # the backend slowed down: these attempts timed out
        t.observe_timeout(tight, 30)
    assert t.timeout_for(30) >= tight


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        AdaptiveTimeout(min_s=10.0, max_s=5.0)
    with pytest.raises(ValueError):
        AdaptiveTimeout(multiplier=0.5)
    with pytest.raises(ValueError):
        P2Quantile(1.0)


def test_the_timeout_grows_with_the_load_over_what_it_was_learned_at() -> None:
    """A quantile learned at 4 in flight is stretched for a call admitted with 32 (a
    continuous-batching server decodes slower with a bigger batch), never shrunk below."""
    from gptgate.limits.timeouts import AdaptiveTimeout

    learned = AdaptiveTimeout(min_s=0.1, max_s=600.0, min_samples=10)
    for _ in range(200):
        learned.observe(1.0, 100, inflight=4)
    base = learned.timeout_for(100)
    assert learned.timeout_for(100, inflight=4) == pytest.approx(base)
    assert learned.timeout_for(100, inflight=2) == pytest.approx(base)
    assert learned.timeout_for(100, inflight=32) == pytest.approx(8 * base)


async def _burst_on_gpu(max_tokens: int, seed: int) -> tuple[int, int]:
    import anyio

    import gptgate as gg
    from gptgate.sim import LoopClock
    from gptgate.testing import sim_backend

    clock = LoopClock()
    spec, engine = sim_backend("gpu", name="gpu", clock=clock, seed=seed)
    async with gg.Gateway([spec], clock=clock, seed=seed) as gate:
        async with anyio.create_task_group() as tg:
            for i in range(400):
                messages = [{"role": "user", "content": f"question {i}"}]
                tg.start_soon(lambda m=messages: gate.chat(m, max_tokens=max_tokens))
        timeouts = gate.stats()["gpu"].timeouts
    return timeouts, engine.ledger.snapshot().abandoned


@pytest.mark.parametrize("max_tokens", [100, 200])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_burst_on_a_healthy_gpu_backend_has_no_false_timeout(max_tokens: int, seed: int) -> None:
    """400 calls at once on the gpu profile, no faults: adaptive attempt timeouts learned while
    the limit was small cut 7–19 healthy calls as it grew (each retried and billed twice)."""
    from gptgate.sim import run_virtual

    assert run_virtual(_burst_on_gpu, max_tokens, seed) == (0, 0)
