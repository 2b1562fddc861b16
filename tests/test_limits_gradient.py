"""GradientLimit (Gradient2) on per-token-normalised latency, windows by sample count."""

from __future__ import annotations

import math

import pytest

from gptgate.limits import GradientLimit, Limit, Sample


def feed(
    lim: GradientLimit,
    latency: float,
    *,
    n: int = 2,
    inflight: int | None = None,
    tokens: int = 100,
    ttft: float | None = None,
) -> None:
    busy = lim.limit if inflight is None else inflight
    for _ in range(n):
        lim.update(Sample(0.0, latency, busy, "ok", ttft_s=ttft, output_tokens=tokens), latency)


def test_is_a_limit() -> None:
    assert isinstance(GradientLimit(), Limit)


def test_exact_gradient2_updates() -> None:
    lim = GradientLimit(initial=10, window_samples=2, long_window=600)
    feed(lim, 1.0)  # first window: long = short, g = 1: L ← 0.8·10 + 0.2·(10 + 4)
    assert lim.estimate == pytest.approx(10.8)
    assert lim.limit == 10
    feed(lim, 1.0)
    assert lim.estimate == pytest.approx(0.8 * 10.8 + 0.2 * (10.8 + 4))
    before = lim.estimate
    # latency ×4: the long baseline (cumulative mean while warming up) moves a third of the way
    feed(lim, 4.0)
    long = 1.0 + (2 / 6) * (4.0 - 1.0)
    assert lim.long_latency == pytest.approx(long)
    g = max(0.5, min(1.0, 1.5 * long / 4.0))
    assert lim.estimate == pytest.approx(0.8 * before + 0.2 * (g * before + 4))


def test_gradient_never_below_half() -> None:
    lim = GradientLimit(initial=40, window_samples=2, queue_size=0)
    for _ in range(300):  # a settled baseline of 1 s
        feed(lim, 1.0)
    before = lim.estimate
    assert before == 40.0  # g = 1 and no headroom: steady
    feed(lim, 1000.0)  # an outlier window: at most a halving, smoothed
    assert lim.estimate == pytest.approx(0.8 * before + 0.2 * 0.5 * before)


def test_a_drop_in_the_window_counts_as_the_strongest_gradient() -> None:
    lim = GradientLimit(initial=40, window_samples=2, queue_size=0)
    feed(lim, 1.0, n=1)
    lim.update(Sample(0.0, 0.1, 40, "dropped"), 0.1)
    assert lim.estimate == pytest.approx(0.8 * 40 + 0.2 * 0.5 * 40)


def test_app_limited_does_not_grow() -> None:
    lim = GradientLimit(initial=20, window_samples=2)
    for _ in range(5):
        feed(lim, 1.0, inflight=5)
    assert lim.estimate == 20.0


def test_long_answers_at_unchanged_per_token_speed_are_not_congestion() -> None:
    lim = GradientLimit(initial=10, window_samples=4)
    tokens = 50
    for _ in range(6):
        # 4x longer answers each window at the same 20 ms/token after a 0.3 s first token
        feed(lim, 0.3 + (tokens - 1) * 0.02, n=4, tokens=tokens, ttft=0.3)
        tokens *= 2
    # g stayed 1 throughout: six windows of pure growth
    expected = 10.0
    for _ in range(6):
        expected = 0.8 * expected + 0.2 * (expected + 4)
    assert lim.estimate == pytest.approx(expected)


def test_long_window_decays_after_a_long_overload() -> None:
    lim = GradientLimit(initial=20, window_samples=1, long_window=600)
    for _ in range(50):
        feed(lim, 10.0, n=1)
    long_before = lim.long_latency
    feed(lim, 1.0, n=1)  # load went away: long/short > 2 → the baseline is cut by 5%
    alpha = max(1 / 51, 2 / 601)
    assert lim.long_latency == pytest.approx((long_before + alpha * (1.0 - long_before)) * 0.95)


def test_bounds_and_window() -> None:
    lim = GradientLimit(initial=4, min_limit=2, max_limit=8, window_samples=1)
    for _ in range(50):
        feed(lim, 1.0, n=1)
    assert lim.limit == 8
    lim.set_window(3, 5)
    assert lim.limit == 5
    lim.set_window(None)
    assert lim.limit == 5
    assert math.isnan(GradientLimit().long_latency)
