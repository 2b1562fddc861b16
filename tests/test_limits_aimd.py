"""AIMDLimit: additive increase while busy, multiplicative decrease on loss."""

from __future__ import annotations

import pytest

from gptgate.limits import AIMDLimit, Limit, Sample


def ok(inflight: int, latency: float = 1.0) -> Sample:
    return Sample(start=0.0, latency_s=latency, inflight=inflight, kind="ok")


def drop(inflight: int = 1) -> Sample:
    return Sample(start=0.0, latency_s=0.1, inflight=inflight, kind="dropped")


def test_is_a_limit() -> None:
    assert isinstance(AIMDLimit(), Limit)


def test_grows_by_one_per_success_while_the_app_uses_half_the_limit() -> None:
    lim = AIMDLimit(initial=4)
    lim.update(ok(inflight=2), 1.0)  # 2·2 ≥ 4
    assert lim.limit == 5
    lim.update(ok(inflight=2), 2.0)  # 2·2 < 5: app-limited, no growth
    assert lim.limit == 5
    lim.update(ok(inflight=3), 3.0)
    assert lim.limit == 6
    assert list(lim.trace) == [(1.0, 5), (3.0, 6)]


def test_drop_multiplies_by_backoff_and_floors() -> None:
    lim = AIMDLimit(initial=10, backoff_ratio=0.9)
    lim.update(drop(), 0.0)
    assert lim.limit == 9  # floor(10·0.9)
    lim.update(drop(), 0.0)
    assert lim.limit == 8  # floor(8.1)
    lim.update(drop(), 0.0)
    assert lim.limit == 7  # floor(7.2)


def test_a_server_failure_is_no_loss_signal() -> None:
    lim = AIMDLimit(initial=10, backoff_ratio=0.9)
    lim.update(Sample(0.0, 0.1, 10, "dropped", congestion=False), 0.0)
    assert lim.limit == 10


def test_a_success_slower_than_the_timeout_counts_as_a_drop() -> None:
    lim = AIMDLimit(initial=20, backoff_ratio=0.5, timeout_s=10.0)
    lim.update(ok(inflight=20, latency=10.0), 0.0)  # not slower: grows
    assert lim.limit == 21
    lim.update(ok(inflight=20, latency=10.5), 0.0)
    assert lim.limit == 10


def test_bounds() -> None:
    lim = AIMDLimit(initial=3, min_limit=2, max_limit=4, backoff_ratio=0.5)
    for _ in range(5):
        lim.update(ok(inflight=4), 0.0)
    assert lim.limit == 4
    for _ in range(5):
        lim.update(drop(), 0.0)
    assert lim.limit == 2
    assert AIMDLimit(initial=100, max_limit=64).limit == 64


def test_ignored_samples_change_nothing() -> None:
    lim = AIMDLimit(initial=4)
    lim.update(Sample(0.0, 0.0, 4, "ignored"), 0.0)
    assert lim.limit == 4


def test_window() -> None:
    lim = AIMDLimit(initial=4)
    lim.set_window(10, 12)
    assert lim.limit == 10
    for _ in range(5):
        lim.update(ok(inflight=12), 0.0)
    assert lim.limit == 12
    lim.set_window(None)
    lim.update(ok(inflight=12), 0.0)
    assert lim.limit == 13
    with pytest.raises(ValueError):
        lim.set_window(5, 4)


def test_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        AIMDLimit(min_limit=5, max_limit=4)
    with pytest.raises(ValueError):
        AIMDLimit(backoff_ratio=1.0)
