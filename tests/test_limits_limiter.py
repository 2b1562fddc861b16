"""Limiter: priority with aging, deadline shedding (at once and by waiting), exact accounting."""

from __future__ import annotations

import contextlib
import functools
import random

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptgate.clock import SystemClock
from gptgate.errors import OverloadedError
from gptgate.limits import FixedLimit, Limiter, Permit, Sample


class FakeClock:
    """Readings we set by hand; deadlines still wait in (tiny) real seconds."""

    scale = 1.0

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        await anyio.lowlevel.checkpoint()

    def to_real(self, seconds: float) -> float:
        return seconds


class MutableLimit:
    def __init__(self, n: int) -> None:
        self.n = n

    @property
    def limit(self) -> int:
        return self.n

    def update(self, sample: Sample, now: float) -> None:
        return None


class CheckedLimiter(Limiter):
    """Asserts the invariant at the only place calls are admitted."""

    def _admit(self) -> Permit:
        assert self.in_flight < self.current_limit, "admitted past the limit"
        return super()._admit()


async def settle() -> None:
    await anyio.wait_all_tasks_blocked()


async def test_priority_with_aging_admits_in_key_order() -> None:
    clock = FakeClock()
    limiter = Limiter(FixedLimit(1), clock=clock, aging_s=5.0)
    held = await limiter.acquire()
    order: list[str] = []
    permits: dict[str, Permit] = {}

    async def call(name: str, priority: int) -> None:
        permits[name] = await limiter.acquire(priority=priority)
        order.append(name)

    # (arrival, name, priority): key = arrival − 5·priority
    arrivals = [(0, "B", 0), (1, "C", 1), (2, "D", 0), (3, "F", 1), (13, "E", 2)]
    async with anyio.create_task_group() as tg:
        for t, name, priority in arrivals:
            clock.t = t
            tg.start_soon(call, name, priority)
            await settle()
        assert limiter.queued == 5
        held.success(1.0)
        for _ in arrivals:
            await settle()
            permits[order[-1]].success(1.0)
    # C (key −4) and F (−2) jump the queue; E is urgent but arrived so late (key 3) that the
    # old batch calls B (0) and D (2) have aged past it: nothing starves
    assert order == ["C", "F", "B", "D", "E"]
    s = limiter.statistics()
    assert (s.in_flight, s.queued, s.admitted, s.succeeded) == (0, 0, 6, 6)


async def _warm(limiter: Limiter, latency: float) -> None:
    for _ in range(Limiter.MIN_RELEASES):
        (await limiter.acquire()).success(latency)


async def test_predicted_wait_sheds_at_once() -> None:
    clock = FakeClock()
    limiter = Limiter(FixedLimit(2), clock=clock, name="gpu")
    assert limiter.predicted_wait() == 0.0  # free slots
    await _warm(limiter, 1.0)
    assert limiter.completion_rate() == pytest.approx(2.0)  # Little: 2 in flight / 1 s
    held = [await limiter.acquire(), await limiter.acquire()]
    assert limiter.predicted_wait() is not None
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(limiter.acquire)
        await settle()
        assert limiter.queued == 5
        # 5 ahead + itself at 2 completions/s: 3 s, more than the 2 s left
        assert limiter.predicted_wait(priority=0) == pytest.approx(3.0)
        with anyio.fail_after(1):  # at once, not after waiting
            with pytest.raises(OverloadedError, match="predicted") as info:
                await limiter.acquire(deadline=clock.t + 2.0)
        assert info.value.backend == "gpu"
        # an urgent call goes ahead of all five: 0.5 s, it may wait
        assert limiter.predicted_wait(priority=1) == pytest.approx(0.5)
        tg.start_soon(functools.partial(limiter.acquire, priority=1, deadline=clock.t + 2.0))
        await settle()
        assert limiter.queued == 6
        stats = limiter.statistics()
        assert stats.shed == stats.shed_predicted == 1
        assert stats.predicted_wait_s == pytest.approx(3.5)
        tg.cancel_scope.cancel()
    for p in held:
        p.ignore()
    assert (limiter.in_flight, limiter.queued) == (0, 0)


async def test_without_a_rate_estimate_a_deadline_is_enforced_by_waiting() -> None:
    limiter = Limiter(FixedLimit(1), clock=SystemClock())
    held = await limiter.acquire()
    assert limiter.completion_rate() is None
    with anyio.fail_after(2):
        with pytest.raises(OverloadedError, match="before the deadline"):
            await limiter.acquire(deadline=SystemClock().now() + 0.02)
    s = limiter.statistics()
    assert (s.shed, s.shed_predicted, s.queued, s.in_flight) == (1, 0, 0, 1)
    held.success(0.1)
    assert limiter.in_flight == 0


async def test_waiting_with_a_deadline_that_is_met() -> None:
    clock = SystemClock()
    limiter = Limiter(FixedLimit(1), clock=clock)
    held = await limiter.acquire()
    async with anyio.create_task_group() as tg:
        got: list[Permit] = []

        async def call() -> None:
            got.append(await limiter.acquire(deadline=clock.now() + 5.0))

        tg.start_soon(call)
        await settle()
        held.success(0.1)
    assert len(got) == 1
    got[0].ignore()
    assert limiter.statistics().shed == 0


async def test_deadline_already_passed_and_full_queue_shed_at_once() -> None:
    clock = FakeClock()
    limiter = Limiter(FixedLimit(1), clock=clock, max_queue=1)
    held = await limiter.acquire()
    clock.t = 10.0
    with pytest.raises(OverloadedError, match="deadline passed"):
        await limiter.acquire(deadline=9.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire)
        await settle()
        with pytest.raises(OverloadedError, match="queue full"):
            await limiter.acquire()
        tg.cancel_scope.cancel()
    assert limiter.statistics().shed == 2
    held.ignore()
    assert (limiter.in_flight, limiter.queued) == (0, 0)


async def test_max_inflight_caps_the_limit_and_can_grow() -> None:
    limiter = Limiter(FixedLimit(10), max_inflight=2)
    a, b = await limiter.acquire(), await limiter.acquire()
    assert limiter.current_limit == 2
    async with anyio.create_task_group() as tg:
        tg.start_soon(limiter.acquire)
        await settle()
        assert limiter.queued == 1
        limiter.set_max_inflight(3)
    assert (limiter.in_flight, limiter.queued, limiter.max_inflight) == (3, 0, 3)
    with pytest.raises(ValueError):
        limiter.set_max_inflight(0)
    a.ignore()
    b.ignore()


async def test_permit_ends_exactly_once() -> None:
    limiter = Limiter(FixedLimit(1))
    permit = await limiter.acquire()
    permit.success(1.0, ttft_s=0.1, output_tokens=10)
    permit.dropped(1.0)
    permit.ignore()
    s = limiter.statistics()
    assert (s.in_flight, s.succeeded, s.dropped, s.ignored) == (0, 1, 0, 0)
    assert permit.done


async def test_cancelled_then_admitted_in_the_same_tick_hands_the_permit_back() -> None:
    limiter = Limiter(FixedLimit(1))
    held = await limiter.acquire()
    got: list[Permit] = []
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            got.append(await limiter.acquire())

        tg.start_soon(call)
        await settle()
        tg.cancel_scope.cancel()  # the waiter is cancelled, but has not run yet...
        held.success(1.0)  # ...when a release admits it
        assert limiter.in_flight == 1 and limiter.queued == 0
    assert not got  # it never saw the permit: it was handed back
    s = limiter.statistics()
    assert (s.in_flight, s.queued, s.admitted, s.succeeded, s.ignored) == (0, 0, 2, 1, 1)


# ---- property: exact accounting under random acquire / cancel / release / limit changes ----

OPS = st.one_of(
    st.tuples(
        st.just("acquire"),
        st.integers(0, 2),
        st.one_of(st.none(), st.floats(0.0005, 0.004)),
    ),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("release"), st.integers(0, 30), st.sampled_from(["ok", "drop", "ignore"])),
    st.tuples(st.just("limit"), st.integers(1, 4)),
    # cancel everyone still waiting, then release in the same tick: a waiter is admitted
    # after its cancellation was delivered but before it ran
    st.tuples(st.just("storm"), st.integers(0, 30), st.sampled_from(["ok", "drop", "ignore"])),
    st.tuples(st.just("tick"), st.sampled_from([0.0, 0.001, 0.003])),
)


async def _scenario(ops: list[tuple[object, ...]], seed: int) -> None:
    clock = SystemClock()
    limit = MutableLimit(2)
    limiter = CheckedLimiter(limit, clock=clock, aging_s=0.001)
    scopes: list[anyio.CancelScope] = []
    permits: dict[int, Permit] = {}
    rng = random.Random(seed)

    async def call(
        i: int, priority: int, deadline: float | None, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            task_status.started()
            with contextlib.suppress(OverloadedError):
                permits[i] = await limiter.acquire(priority=priority, deadline=deadline)

    def finish(permit: Permit, how: str) -> None:
        if how == "ok":
            permit.success(0.001)
        elif how == "drop":
            permit.dropped(0.001)
        else:
            permit.ignore()

    async with anyio.create_task_group() as tg:
        for op in ops:
            if op[0] == "acquire":
                _, priority, offset = op
                deadline = None if offset is None else clock.now() + float(offset)  # type: ignore[arg-type]
                await tg.start(call, len(scopes), priority, deadline)
            elif op[0] == "cancel" and scopes:
                scopes[int(op[1]) % len(scopes)].cancel()  # type: ignore[call-overload]
            elif op[0] == "release" and permits:
                key = sorted(permits)[int(op[1]) % len(permits)]  # type: ignore[call-overload]
                finish(permits[key], str(op[2]))
            elif op[0] == "storm" and permits:
                for scope in scopes:
                    scope.cancel()
                key = sorted(permits)[int(op[1]) % len(permits)]  # type: ignore[call-overload]
                finish(permits[key], str(op[2]))
            elif op[0] == "limit":
                limit.n = int(op[1])  # type: ignore[call-overload]
                limiter.poke()
            elif op[0] == "tick":
                await anyio.sleep(float(op[1]))  # type: ignore[arg-type]
            assert limiter.queued >= 0 and limiter.in_flight >= 0
        # wind down: cancel whoever still waits, end every permit
        for scope in scopes:
            scope.cancel()
    for permit in permits.values():
        finish(permit, rng.choice(["ok", "drop", "ignore"]))
    s = limiter.statistics()
    assert (s.in_flight, s.queued) == (0, 0)
    assert s.admitted == s.succeeded + s.dropped + s.ignored
    assert all(waiter.cancelled for _, _, waiter in limiter._heap)
    assert not limiter._by_priority


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, max_size=40), seed=st.integers(0, 2**16))
def test_accounting_is_exact_under_random_cancellation(
    ops: list[tuple[object, ...]], seed: int
) -> None:
    anyio.run(_scenario, ops, seed)
