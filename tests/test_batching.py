"""The micro-batcher: flush on size, timer and close; nothing lost; backpressure; grouping."""

from __future__ import annotations

import random
from collections import Counter

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptgate.batching import BatcherStatistics, ItemCancelledError, ItemHandle, MicroBatcher
from gptgate.clock import ScaledClock
from gptgate.scenarios import BatchPolicy

FOREVER = 1e9  # a max_wait_s that never fires within a test


async def double(x: int) -> int:
    await anyio.lowlevel.checkpoint()
    return 2 * x


async def test_flush_on_size() -> None:
    policy = BatchPolicy(max_size=5, max_wait_s=FOREVER)
    async with MicroBatcher(policy, double, clock=ScaledClock(1000)) as batcher:
        handles = [await batcher.submit(i) for i in range(4)]
        await anyio.sleep(0.01)
        assert not any(h.done() for h in handles)
        assert batcher.statistics().pending == 4
        handles.append(await batcher.submit(4))
        assert batcher.statistics().pending == 0
        assert [await h for h in handles] == [0, 2, 4, 6, 8]
        stats = batcher.statistics()
        assert (stats.flushed_batches, stats.flushed_by_size, stats.flushed_by_timer) == (1, 1, 0)
    assert batcher.statistics().flushed_by_close == 0


async def test_flush_on_timer() -> None:
    clock = ScaledClock(1000)
    policy = BatchPolicy(max_size=100, max_wait_s=2.0)
    async with MicroBatcher(policy, double, clock=clock) as batcher:
        started = clock.now()
        handles = [await batcher.submit(i) for i in range(3)]
        assert [await h for h in handles] == [0, 2, 4]
        waited = clock.now() - started
        assert waited >= 2.0  # the timer fired, in clock seconds
        assert waited < 2.0 + 500.0  # and not because of close
        stats = batcher.statistics()
        assert (stats.flushed_by_timer, stats.flushed_by_size, stats.flushed_by_close) == (1, 0, 0)
        # a new batch arms a new timer
        more = [await batcher.submit(i) for i in range(3, 5)]
        assert [await h for h in more] == [6, 8]
        assert batcher.statistics().flushed_by_timer == 2


async def test_size_flush_disarms_the_timer() -> None:
    policy = BatchPolicy(max_size=2, max_wait_s=1.0)
    async with MicroBatcher(policy, double, clock=ScaledClock(1000)) as batcher:
        handles = [await batcher.submit(i) for i in range(2)]
        await anyio.sleep(0.005)  # 5 clock seconds: a stale timer would have fired
        single = await batcher.submit(9)
        assert batcher.statistics().pending == 1
        assert [await h for h in handles] == [0, 2]
        assert await single == 18
        stats = batcher.statistics()
        assert (stats.flushed_by_size, stats.flushed_by_timer) == (1, 1)


async def test_flush_on_close_and_drain() -> None:
    finished: list[int] = []

    async def slow(x: int) -> int:
        await anyio.sleep(0.01)
        finished.append(x)
        return x

    policy = BatchPolicy(max_size=10, max_wait_s=FOREVER)
    async with MicroBatcher(policy, slow, clock=ScaledClock(1000)) as batcher:
        handles = [await batcher.submit(i) for i in range(3)]
    # close flushed the partial batch and waited until every item finished
    assert sorted(finished) == [0, 1, 2]
    assert all(h.done() for h in handles)
    assert [h.result() for h in handles] == [0, 1, 2]
    stats = batcher.statistics()
    assert (stats.flushed_by_close, stats.completed, stats.in_flight, stats.pending) == (1, 3, 0, 0)


async def test_body_error_still_drains_then_reraises() -> None:
    policy = BatchPolicy(max_size=10, max_wait_s=FOREVER)
    handles: list[ItemHandle[int]] = []
    with pytest.raises(LookupError):
        async with MicroBatcher(policy, double, clock=ScaledClock(1000)) as batcher:
            handles.extend([await batcher.submit(i) for i in range(3)])
            raise LookupError("producer failed")
    assert [h.result() for h in handles] == [0, 2, 4]


async def test_realtime_policy_dispatches_immediately() -> None:
    started: list[int] = []

    async def record(x: int) -> int:
        started.append(x)
        await anyio.sleep(0.01)
        return x

    async with MicroBatcher(BatchPolicy.REALTIME, record) as batcher:
        first = await batcher.submit(1)
        await anyio.lowlevel.checkpoint()
        assert started == [1]
        assert batcher.statistics().flushed_by_size == 1
        assert await first == 1


async def test_item_errors_are_isolated_and_handles_reusable() -> None:
    async def maybe(x: int) -> int:
        await anyio.lowlevel.checkpoint()
        if x % 2:
            raise ValueError(x)
        return x

    async with MicroBatcher(BatchPolicy(max_size=4, max_wait_s=0.0), maybe) as batcher:
        handles = [await batcher.submit(i) for i in range(4)]
        assert await handles[0] == 0
        assert await handles[0] == 0  # awaitable more than once
        with pytest.raises(ValueError, match="1"):
            await handles[1]
        with pytest.raises(ValueError, match="1"):
            handles[1].result()
        assert isinstance(handles[3].exception(), ValueError)
        assert await handles[2] == 2
    stats = batcher.statistics()
    assert (stats.completed, stats.failed) == (2, 2)


async def test_handle_not_done_yet() -> None:
    handle: ItemHandle[int] = ItemHandle()
    assert not handle.done()
    with pytest.raises(RuntimeError):
        handle.result()
    with pytest.raises(RuntimeError):
        handle.exception()
    assert "pending" in repr(handle)


async def test_backpressure_blocks_submit_never_drops() -> None:
    gate = anyio.Event()

    async def blocked(x: int) -> int:
        await gate.wait()
        return x

    policy = BatchPolicy(max_size=1, max_wait_s=0.0, max_pending=3)
    async with MicroBatcher(policy, blocked) as batcher:
        handles = [await batcher.submit(i) for i in range(3)]
        fourth: list[ItemHandle[int]] = []

        async def producer() -> None:
            fourth.append(await batcher.submit(3))

        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            await anyio.sleep(0.02)
            assert fourth == []  # blocked at max_pending
            assert batcher.statistics().blocked_submitters == 1
            gate.set()
        assert len(fourth) == 1
        assert [await h for h in [*handles, *fourth]] == [0, 1, 2, 3]


async def test_bounded_memory_for_a_long_producer() -> None:
    peak = 0

    async def quick(x: int) -> int:
        await anyio.lowlevel.checkpoint()
        return x

    policy = BatchPolicy(max_size=50, max_wait_s=0.0, max_pending=200)
    total = 0
    async with MicroBatcher(policy, quick) as batcher:
        for i in range(10_000):
            handle = await batcher.submit(i)
            stats = batcher.statistics()
            peak = max(peak, stats.pending + stats.in_flight)
            if i % 1000 == 0:
                total += await handle  # the caller owns (and here drops) its handles
    assert peak <= 200
    assert batcher.statistics().completed == 10_000
    assert total == sum(range(0, 10_000, 1000))


async def test_grouping_order_within_a_flushed_batch() -> None:
    order: list[str] = []

    async def record(item: tuple[str | None, int]) -> str:
        order.append(f"{item[0]}{item[1]}")
        await anyio.lowlevel.checkpoint()
        return f"{item[0]}{item[1]}"

    items: list[tuple[str | None, int]] = [
        ("a", 1),
        ("b", 2),
        (None, 3),
        ("a", 4),
        ("c", 5),
        ("b", 6),
        (None, 7),
        ("a", 8),
    ]
    policy = BatchPolicy(max_size=8, max_wait_s=FOREVER)
    async with MicroBatcher(policy, record, group_of=lambda item: item[0]) as batcher:
        handles = [await batcher.submit(item) for item in items]
        # results still belong to their own handle
        assert [await h for h in handles] == [f"{g}{i}" for g, i in items]
    assert order == ["a1", "a4", "a8", "b2", "b6", "None3", "c5", "None7"]


async def test_submit_outside_the_context_is_refused() -> None:
    batcher = MicroBatcher(BatchPolicy.MICRO, double)
    with pytest.raises(RuntimeError):
        await batcher.submit(1)
    async with batcher:
        pass
    with pytest.raises(anyio.ClosedResourceError):
        await batcher.submit(1)
    with pytest.raises(RuntimeError):
        async with batcher:
            pass


async def test_cancelled_batcher_resolves_every_handle() -> None:
    async def never(x: int) -> int:
        await anyio.sleep_forever()
        raise AssertionError

    handles: list[ItemHandle[int]] = []
    with anyio.move_on_after(0.05):
        async with MicroBatcher(BatchPolicy(max_size=2, max_wait_s=FOREVER), never) as batcher:
            for i in range(5):
                handles.append(await batcher.submit(i))
            await anyio.sleep_forever()
    assert len(handles) == 5
    assert all(h.done() for h in handles)
    assert all(isinstance(h.exception(), ItemCancelledError) for h in handles)
    stats = batcher.statistics()
    assert stats.failed == 5 and stats.in_flight == 0 and stats.pending == 0


def test_statistics_is_a_frozen_snapshot() -> None:
    stats = MicroBatcher(BatchPolicy.MICRO, double).statistics()
    assert stats == BatcherStatistics(0, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(AttributeError):
        stats.pending = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- the property


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    count=st.integers(min_value=0, max_value=120),
    max_size=st.integers(min_value=1, max_value=25),
    max_wait_s=st.sampled_from([0.0, 0.5, 2.0, 10.0, FOREVER]),
    max_pending=st.integers(min_value=1, max_value=40),
    fail_rate=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    seed=st.integers(min_value=0, max_value=2**16),
    groups=st.integers(min_value=0, max_value=4),
    body_raises=st.booleans(),
)
def test_nothing_is_lost(
    count: int,
    max_size: int,
    max_wait_s: float,
    max_pending: int,
    fail_rate: float,
    seed: int,
    groups: int,
    body_raises: bool,
) -> None:
    """Every submitted item runs exactly once and its own handle resolves exactly once, with
    its own result or error, for any sizes, timers, backpressure and failures; all are done
    after close, also when the producer's body raises."""
    rng = random.Random(seed)
    failing = {i for i in range(count) if rng.random() < fail_rate}
    delays = [rng.choice([0, 0, 1, 3]) for _ in range(count)]
    gaps = [rng.random() < 0.2 for _ in range(count)]
    runs: Counter[int] = Counter()
    clock = ScaledClock(1000)

    async def run_item(i: int) -> int:
        runs[i] += 1
        for _ in range(delays[i]):
            await anyio.lowlevel.checkpoint()
        if i in failing:
            raise ValueError(i)
        return i * 3

    def group_of(i: int) -> str | None:
        return None if groups == 0 else f"g{i % groups}"

    policy = BatchPolicy(max_size=max_size, max_wait_s=max_wait_s, max_pending=max_pending)
    handles: list[ItemHandle[int]] = []

    async def main() -> BatcherStatistics:
        batcher = MicroBatcher(policy, run_item, clock=clock, group_of=group_of)
        try:
            async with batcher:
                for i in range(count):
                    handles.append(await batcher.submit(i))
                    if gaps[i]:
                        await clock.sleep(rng.choice([0.1, 1.0, 3.0]))
                if body_raises:
                    raise KeyError("body")
        except KeyError:
            assert body_raises
        return batcher.statistics()

    stats = anyio.run(main)
    assert len(handles) == count
    assert all(runs[i] == 1 for i in range(count))
    assert sum(runs.values()) == count
    for i, handle in enumerate(handles):
        assert handle.done()
        if i in failing:
            error = handle.exception()
            assert isinstance(error, ValueError) and error.args == (i,)
        else:
            assert handle.result() == i * 3
    assert stats.completed == count - len(failing)
    assert stats.failed == len(failing)
    assert stats.pending == 0 and stats.in_flight == 0
    assert stats.submitted == count
    assert stats.flushed_batches == stats.flushed_by_size + stats.flushed_by_timer + (
        stats.flushed_by_close
    )


async def test_backpressure_below_max_size_flushes_instead_of_deadlocking() -> None:
    policy = BatchPolicy(max_size=10, max_wait_s=FOREVER, max_pending=3)
    async with MicroBatcher(policy, double, clock=ScaledClock(1000)) as batcher:
        with anyio.fail_after(5):
            handles = [await batcher.submit(i) for i in range(7)]
            assert [await h for h in handles[:6]] == [0, 2, 4, 6, 8, 10]
    assert handles[6].result() == 12
    stats = batcher.statistics()
    assert stats.flushed_by_size == 2 and stats.flushed_by_close == 1


async def test_handles_record_submit_and_dispatch_times() -> None:
    class Clock:
        scale = 1.0
        t = 100.0

        def now(self) -> float:
            return self.t

        async def sleep(self, seconds: float) -> None:
            await anyio.sleep_forever()  # the timer never fires here

        def to_real(self, seconds: float) -> float:
            return seconds

    clock = Clock()
    policy = BatchPolicy(max_size=3, max_wait_s=FOREVER)
    async with MicroBatcher(policy, double, clock=clock) as batcher:
        assert batcher.statistics().mean_wait_s is None
        first = await batcher.submit(1)
        clock.t = 101.0
        second = await batcher.submit(2)
        assert (first.submitted_at, first.dispatched_at, first.wait_s) == (100.0, None, None)
        clock.t = 104.0
        third = await batcher.submit(3)  # size flush at t=104
        assert [h.wait_s for h in (first, second, third)] == [4.0, 3.0, 0.0]
        assert first.dispatched_at == 104.0
        assert batcher.statistics().mean_wait_s == pytest.approx(7 / 3)
        clock.t = 110.0
        fourth = await batcher.submit(4)
    assert fourth.wait_s == 0.0  # flushed on close at t=110
    assert batcher.statistics().mean_wait_s == pytest.approx(7 / 4)
    assert [await h for h in (first, second, third, fourth)] == [2, 4, 6, 8]
