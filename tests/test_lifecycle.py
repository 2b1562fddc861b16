"""The life of a job and of the gateway: cancelling a ``map`` or a ``submit`` handle, bad map
items and producers, closing with calls in flight, and one gateway across event loops.

Simulated runs use ``run_virtual`` and a ``LoopClock``: exact, repeatable and fast.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg
from gptgate.batching import ItemCancelledError
from gptgate.sim import LoopClock, SimEngine, SimServer, get_profile, run_virtual
from gptgate.testing import sim_backend

from .mockbackend import USER, Script, backend, gateway, ok


def _items(n: int, max_tokens: int = 200) -> list[dict[str, Any]]:
    guide = "You write product copy in the brand's voice. " * 20
    return [
        {
            "messages": [
                {"role": "system", "content": guide},
                {"role": "user", "content": f"Item #{i}: a steel and oak kit."},
            ],
            "max_tokens": max_tokens,
        }
        for i in range(n)
    ]


def _sent(engine: SimEngine) -> int:
    """Requests the server has seen so far: finished, running and queued."""
    snap = engine.snapshot()
    return engine.ledger.snapshot().requests + snap.active + snap.queued


# -- 2. cancelling a job cancels its items ----------------------------------------------------


async def _cancelled_map(scenario: str, n: int) -> tuple[int, int, int, float, list[int]]:
    clock = LoopClock()
    spec, engine = sim_backend("gpu", name="gpu", clock=clock, seed=3, concurrency=8)
    async with gg.Gateway([spec], clock=clock, seed=1) as gate:
        with anyio.move_on_after(1.0):
            await gate.map(_items(n), scenario=scenario)
        sent_at_cancel = _sent(engine)
        await anyio.sleep(60.0)  # anything still running on would be sent and billed by now
        stats = gate.stats()["gpu"]
        leftovers = [stats.in_flight, stats.queued, stats.pool.checked_out, stats.cache_waiting]
        closing = clock.now()
    close_s = clock.now() - closing
    return sent_at_cancel, engine.ledger.snapshot().requests, n, close_s, leftovers


@pytest.mark.parametrize("scenario", ["batch_content", "offline", "default"])
def test_cancelling_a_map_stops_its_items(scenario: str) -> None:
    """Cancelled 1 s in, a 300-item job bills only what it had sent: under a batch policy the
    items run in the gateway's own task group, and used to run on (all 300 billed)."""
    sent, billed, n, close_s, leftovers = run_virtual(_cancelled_map, scenario, 300)
    assert 0 < sent < n // 4
    assert billed == sent  # nothing sent after the cancel
    assert leftovers == [0, 0, 0, 0]
    assert close_s < 1.0


def test_closing_after_a_cancelled_1000_item_job_is_quick() -> None:
    """Leaving ``async with gate`` after cancelling a 1,000-item batch job took 28.7 s."""
    sent, billed, _, close_s, _ = run_virtual(_cancelled_map, "batch_content", 1000)
    assert billed == sent and close_s < 1.0


async def _cancelled_handles() -> tuple[list[str], int, int, list[int]]:
    clock = LoopClock()
    spec, engine = sim_backend("gpu", name="gpu", clock=clock, seed=3, concurrency=2)
    async with gg.Gateway([spec], clock=clock, seed=1) as gate:
        handles = [
            await gate.submit(item["messages"], max_tokens=200, scenario="batch_content")
            for item in _items(20)
        ]
        await anyio.sleep(3.0)  # some are done, 2 are running, the rest queued or pending
        sent_before = _sent(engine)
        done = [h for h in handles if h.done()]
        wanted = [h for h in handles if not h.done()]
        assert done and len(wanted) > 10 and engine.snapshot().active == 2
        assert [h.cancel() for h in done] == [False] * len(done)  # finished: nothing to cancel
        assert all(h.cancel() for h in wanted)
        outcomes = []
        for h in wanted:
            with pytest.raises(ItemCancelledError):
                await h
            outcomes.append(type(h.exception()).__name__)
        assert not wanted[0].cancel()  # a second cancel is a no-op
        await anyio.sleep(60.0)
        stats = gate.stats()["gpu"]
        leftovers = [stats.in_flight, stats.queued, stats.pool.checked_out]
    return outcomes, sent_before, engine.ledger.snapshot().requests, leftovers


def test_a_submitted_item_can_be_cancelled() -> None:
    """``ItemHandle.cancel()`` drops an item: unsent ones are never sent, running ones are
    cancelled like a cancelled ``gate.chat`` (permit and connection returned)."""
    outcomes, sent_before, billed, leftovers = run_virtual(_cancelled_handles)
    assert set(outcomes) == {"ItemCancelledError"}
    assert billed == sent_before < 20
    assert leftovers == [0, 0, 0]


# -- 3. bad items and producers ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["default", "batch_content"])
@pytest.mark.parametrize(
    "bad",
    [None, "hello", {"max_tokens": 5}, {"messages": USER, "timeout": "soon"},
     {"messages": "hi"}, {1: 2}],
    ids=["none", "str", "no-messages", "bad-kwarg", "bad-messages", "non-str-key"],
)
async def test_a_bad_map_item_is_a_failed_item(scenario: str, bad: object) -> None:
    script = Script(ok())
    async with gateway(backend(script), clock=gg.ScaledClock(100.0)) as gate:  # fast timers
        results = await gate.map([{"messages": USER}, bad, {"messages": USER}], scenario=scenario)
    assert isinstance(results[0], gg.ChatResult) and isinstance(results[2], gg.ChatResult)
    assert isinstance(results[1], gg.BadRequestError)
    assert "item 1" in str(results[1])


async def test_an_item_with_an_unknown_argument_is_a_failed_item() -> None:
    """A keyword ``chat`` does not take by name and that is no OpenAI parameter either is
    named in the item's error (``private`` and ``tier`` are typed; a misspelt one is not)."""
    script = Script(ok())
    async with gateway(backend(script), clock=gg.ScaledClock(100.0)) as gate:  # fast timers
        results = await gate.map(
            [{"messages": USER}, {"messages": USER, "scenario": 5}, {"messages": USER}],
            scenario="batch_content",
        )
    assert isinstance(results[1], gg.BadRequestError) and "item 1" in str(results[1])
    assert [isinstance(r, gg.ChatResult) for r in (results[0], results[2])] == [True, True]


class _ProducerFailed(Exception):
    pass


@pytest.mark.parametrize("scenario", ["default", "batch_content"])
def test_a_failing_producer_surfaces_as_itself_and_stops_the_job(scenario: str) -> None:
    async def main() -> tuple[int, int]:
        clock = LoopClock()
        spec, engine = sim_backend("gpu", name="gpu", clock=clock, seed=3, concurrency=4)

        def produce() -> Iterator[dict[str, Any]]:
            yield from _items(30)
            raise _ProducerFailed("the source went away")

        async with gg.Gateway([spec], clock=clock, seed=1) as gate:
            with pytest.raises(_ProducerFailed, match="went away"):
                await gate.map(produce(), scenario=scenario)
            sent = _sent(engine)
            await anyio.sleep(60.0)
        return sent, engine.ledger.snapshot().requests

    sent, billed = run_virtual(main)
    assert billed == sent < 30  # the items already started were cancelled, not run on


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "8"])
async def test_max_pending_must_be_a_positive_int(bad: object) -> None:
    async with gateway(backend(Script(ok()))) as gate:
        with pytest.raises(gg.BadRequestError, match="max_pending"):
            await gate.map([{"messages": USER}], max_pending=bad)  # type: ignore[arg-type]


async def test_map_items_must_be_iterable() -> None:
    async with gateway(backend(Script(ok()))) as gate:
        with pytest.raises(gg.BadRequestError, match="items"):
            await gate.map(None)  # type: ignore[arg-type]


# -- 6. closing with calls in flight ----------------------------------------------------------


def _prompt(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question {i}: explain connection pools briefly."}]


class _Outcomes:
    """How each call ended: a result, GatewayClosedError, or anything else (a bug)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, outcome: object) -> None:
        if isinstance(outcome, gg.ChatResult):
            key = "ok"
        elif isinstance(outcome, gg.GatewayClosedError):
            key = "closed"
        else:
            key = repr(outcome)
        self.counts[key] = self.counts.get(key, 0) + 1

    async def run(self, call: Any) -> None:
        try:
            self.add(await call())
        except Exception as error:
            self.add(error)


async def _close_with_100_in_flight(grace: float, via: str) -> dict[str, Any]:
    clock = LoopClock()
    spec, engine = sim_backend("gpu", name="gpu", clock=clock, seed=3, concurrency=16)
    gate = gg.Gateway([spec], clock=clock, seed=1, shutdown_grace_s=grace)
    outcomes = _Outcomes()

    def chat(i: int) -> Any:
        # half answer in ~1 s, half need far longer than the grace
        return lambda: gate.chat(_prompt(i), max_tokens=20 if i % 2 else 3000)

    def stream(i: int) -> Any:
        async def read() -> gg.ChatResult:
            async with gate.stream(_prompt(i), max_tokens=20 if i % 2 else 3000) as s:
                async for _ in s:
                    await anyio.sleep(0.01 * (i % 3))  # some callers dawdle between chunks
            return s.result

        return read

    async def job() -> None:
        items = [{"messages": _prompt(i), "max_tokens": 3000} for i in range(20)]
        for result in await gate.map(items, scenario="batch_content"):
            outcomes.add(result)

    async def late_caller() -> None:
        await anyio.sleep(1.5)  # the close began at 1.0: a new call is refused at once
        started = clock.now()
        await outcomes.run(lambda: gate.chat(_prompt(0), max_tokens=5))
        assert clock.now() == started

    async with anyio.create_task_group() as tg:
        await gate.start()
        for i in range(50):
            tg.start_soon(outcomes.run, chat(i))
        for i in range(20):
            tg.start_soon(outcomes.run, stream(i))
        tg.start_soon(job)
        handles = [await gate.submit(_prompt(i), max_tokens=3000) for i in range(10)]
        tg.start_soon(late_caller)
        await anyio.sleep(1.0)
        in_flight = engine.snapshot().active + gate.stats()["gpu"].queued
        done_before = outcomes.counts.get("ok", 0)
        closing = clock.now()
        if via == "aexit":
            await gate.__aexit__(None, None, None)
        else:
            await gate.aclose(grace_s=grace)
        close_s = clock.now() - closing
    for handle in handles:
        outcomes.add(handle.exception() or handle.result())
    stats = gate.stats()["gpu"]
    return {
        "in_flight": in_flight,
        "done_before": done_before,
        "outcomes": outcomes.counts,
        "close_s": close_s,
        "failures": stats.failures,
        "circuit": stats.circuit,
        "leftovers": [stats.in_flight, stats.queued, stats.pool.checked_out, stats.cache_waiting],
        "limit_events": dict(stats.limit_events),
    }


@pytest.mark.parametrize("via", ["aexit", "aclose"])
def test_closing_with_100_calls_in_flight(via: str) -> None:
    """Leaving ``async with gate`` ended 95 of 100 calls in a bare ``GateError`` counted as
    backend failures. Now: the short calls finish within the grace, the rest end in
    ``GatewayClosedError``; the close takes at most grace + 1 s and leaves nothing held."""
    run = run_virtual(_close_with_100_in_flight, 3.0, via)
    assert run["in_flight"] >= 16
    assert set(run["outcomes"]) == {"ok", "closed"}, run["outcomes"]
    assert sum(run["outcomes"].values()) == 50 + 20 + 20 + 10 + 1
    assert run["outcomes"]["ok"] >= 20 and run["outcomes"]["closed"] >= 30
    assert run["close_s"] <= 3.0 + 1.0
    assert run["failures"] == 0 and run["circuit"] == "closed"
    assert run["leftovers"] == [0, 0, 0, 0]
    assert run["limit_events"].get("loss", 0) == 0


def test_a_zero_grace_cancels_at_once() -> None:
    run = run_virtual(_close_with_100_in_flight, 0.0, "aclose")
    assert run["outcomes"].get("ok", 0) == run["done_before"], run["outcomes"]
    assert run["close_s"] <= 1.0 and run["failures"] == 0
    assert run["leftovers"] == [0, 0, 0, 0]


@pytest.mark.parametrize("grace", [-1.0, math.nan, math.inf, True, "5"])
async def test_grace_must_be_a_finite_number(grace: object) -> None:
    gate = gateway(backend(Script(ok())))
    async with gate:
        with pytest.raises(gg.BadRequestError, match="grace_s"):
            await gate.aclose(grace_s=grace)  # type: ignore[arg-type]


def test_shutdown_grace_is_validated() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="shutdown_grace_s"):
        gateway(backend(Script(ok())), shutdown_grace_s=-1)


async def test_a_closed_gateway_refuses_calls_with_a_typed_error() -> None:
    gate = gateway(backend(Script(ok())))
    with pytest.raises(gg.GatewayClosedError, match="not open"):
        await gate.chat(USER)
    async with gate:
        await gate.chat(USER)
    for call in (
        lambda: gate.chat(USER),
        lambda: gate.map([{"messages": USER}]),
        lambda: gate.submit(USER),
    ):
        with pytest.raises(gg.GatewayClosedError):
            await call()
    with pytest.raises(gg.GatewayClosedError):
        gate.stream(USER)
    assert not gg.GatewayClosedError("x").retryable


@pytest.fixture
def loopback() -> Iterator[tuple[str, SimEngine]]:
    scale = 50.0
    profile = get_profile("gpu").model_copy(
        update={"rpm": None, "tpm": None, "max_queue": None, "output_tokens_mean": 40}
    )
    sim = SimEngine(profile, clock=gg.ScaledClock(scale), seed=5)
    with SimServer(sim, time_scale=scale) as base_url:
        yield base_url, sim


async def test_closing_with_calls_in_flight_over_http(loopback: tuple[str, SimEngine]) -> None:
    base_url, _ = loopback
    clock = gg.ScaledClock(50.0)
    spec = gg.Backend(name="sim", base_url=base_url, model="m", concurrency=8, timeout=600.0)
    gate = gg.Gateway([spec], clock=clock, seed=3, shutdown_grace_s=2.0)
    outcomes = _Outcomes()

    async def read(i: int) -> gg.ChatResult:
        async with gate.stream(_prompt(i), max_tokens=4000) as s:
            async for _ in s:
                pass
        return s.result

    async with anyio.create_task_group() as tg:
        async with gate:
            for i in range(30):
                long = 4000 if i % 3 else 10
                tg.start_soon(outcomes.run, lambda i=i, n=long: gate.chat(_prompt(i), max_tokens=n))
            for i in range(10):
                tg.start_soon(outcomes.run, lambda i=i: read(i))
            with anyio.fail_after(10):
                while gate.stats()["sim"].in_flight < 8:
                    await anyio.sleep(0.01)
            closing = time.perf_counter()
        close_wall = time.perf_counter() - closing
    stats = gate.stats()["sim"]
    opened, idle = gate.backend_state("sim").pool.connection_counts()
    assert set(outcomes.counts) <= {"ok", "closed"}, outcomes.counts
    assert sum(outcomes.counts.values()) == 40 and outcomes.counts["closed"] >= 8
    # grace + 1 s at the clock's scale, and 0.2 s of real time for sockets and a loaded CI box
    # (the exact bound is held on the virtual clock above)
    assert close_wall <= (2.0 + 1.0) / 50.0 + 0.2
    assert stats.failures == 0 and stats.circuit == "closed"
    assert (stats.in_flight, stats.queued, stats.pool.checked_out) == (0, 0, 0)
    assert opened == idle == 0


async def test_a_call_that_finds_the_pool_closed_is_no_backend_failure() -> None:
    """A call already past admission when the connections close (a guard or SDK path the
    registry does not see) ends in ``GatewayClosedError`` and leaves the backend's health be."""
    gate = gateway(backend(Script(ok())))
    async with gate:
        state = gate.backend_state("mock")
        await state.pool.aclose()
        with pytest.raises(gg.GatewayClosedError, match="closed"):
            await gate.chat(USER)
        stats = gate.stats()["mock"]
        assert (stats.failures, stats.in_flight, stats.circuit) == (0, 0, "closed")
        assert gate.ledger.entries["mock"].calls_failed == 0


# -- 7. one gateway, two event loops ----------------------------------------------------------


def test_a_gateway_used_from_a_second_loop_while_open_is_a_clear_error() -> None:
    """One thread holds ``async with gate`` open while another thread's event loop calls
    ``gate.chat``: that hung silently (the gateway's queues and events belong to the first
    loop). Now the call fails at once with an error that says what to do."""
    gate = gateway(backend(Script(ok())))
    opened, release = threading.Event(), threading.Event()

    async def owner() -> None:
        async with gate:
            opened.set()
            await anyio.to_thread.run_sync(release.wait)

    thread = threading.Thread(target=anyio.run, args=(owner,))
    thread.start()
    try:
        assert opened.wait(5.0)

        async def intruder() -> None:
            with anyio.fail_after(5.0):
                await gate.chat(USER)

        with pytest.raises(gg.GateError, match="another event loop"):
            anyio.run(intruder)
        with pytest.raises(gg.GateError, match="another event loop"):
            anyio.run(gate.map, [{"messages": USER}])
    finally:
        release.set()
        thread.join(5.0)
    assert not thread.is_alive()


def test_a_gateway_used_from_two_loops_one_after_the_other_still_works() -> None:
    gate = gateway(backend(Script(ok("first"), ok("second"))))

    async def use() -> str:
        async with gate:
            return (await gate.chat(USER)).text

    texts = [anyio.run(use)]
    worker = threading.Thread(target=lambda: texts.append(anyio.run(use)))
    worker.start()
    worker.join(5.0)
    texts.append(anyio.run(use))
    assert texts == ["first", "second", "second"]


async def _idle_stream_reader() -> tuple[list[int], list[int], str]:
    clock = LoopClock()
    spec, engine = sim_backend("gpu", name="gpu", clock=clock, seed=3, concurrency=4)
    gate = gg.Gateway([spec], clock=clock, seed=1, shutdown_grace_s=1.0)
    seen: list[str] = []
    ended = ""

    async def reader() -> None:
        nonlocal ended
        try:
            async with gate.stream(_prompt(1), max_tokens=3000) as s:
                async for text in s:
                    seen.append(text)
                    if len(seen) == 1:
                        await anyio.sleep(30.0)  # not reading while the gateway closes
        except gg.GateError as error:
            ended = type(error).__name__

    async with anyio.create_task_group() as tg:
        await gate.start()
        tg.start_soon(reader)
        await anyio.sleep(2.0)
        await gate.aclose()
        stats = gate.stats()["gpu"]
        # the reader is still asleep, yet its connection and permit are back
        held = [stats.in_flight, stats.pool.checked_out, engine.snapshot().active]
        during = [len(seen)]
    return held, during, ended


def test_a_stream_whose_reader_is_idle_is_closed_for_it() -> None:
    held, during, ended = run_virtual(_idle_stream_reader)
    assert held == [0, 0, 0] and during == [1]
    assert ended == "GatewayClosedError"


# -- a batched item's deadline runs from its submission ------------------------------------


def test_a_batched_items_deadline_counts_the_time_it_waited_to_be_flushed() -> None:
    """Found by the chaos suite: a ``map`` under ``batch_content`` ran past its items'
    deadline by the micro-batcher's wait (2 s), since each call's deadline started when the
    batch was flushed. Now it starts at submission: timeout=3 on a 2 s batch wait and a 2 s
    backend ends at 3 s, not 5 s."""

    async def main() -> tuple[float, BaseException | None, float, BaseException | None]:
        clock = LoopClock()

        async def two_seconds(request: httpx2.Request) -> httpx2.Response:
            await clock.sleep(2.0)
            return ok()

        gate = gateway(backend(Script(two_seconds)), clock=clock)
        async with gate:
            start = clock.now()
            handle = await gate.submit(USER, scenario="batch_content", timeout=3.0)
            try:
                await handle
                error: BaseException | None = None
            except gg.GateError as exc:
                error = exc
            took = clock.now() - start
            start = clock.now()
            results = await gate.map([{"messages": USER}], scenario="batch_content", timeout=1.5)
            mapped = clock.now() - start
        return took, error, mapped, results[0] if isinstance(results[0], BaseException) else None

    took, error, mapped, mapped_error = run_virtual(main)
    assert isinstance(error, gg.RequestTimeout) and error.deadline
    assert took == pytest.approx(3.0, abs=0.01)
    assert isinstance(mapped_error, gg.OverloadedError)  # its deadline passed in the batcher
    assert mapped <= 2.0 + 0.01


async def _submit_behind_a_full_batcher() -> tuple[str, float, int]:
    clock = LoopClock()
    long_answers = get_profile("gpu").model_copy(update={"output_tokens_mean": 4000})
    spec, engine = sim_backend(long_answers, name="gpu", clock=clock, seed=3, concurrency=1)
    full = gg.Scenario(
        name="full", batch=gg.BatchPolicy(max_size=1, max_wait_s=0.0, max_pending=1),
        deadline_s=2.0,
    )
    async with gg.Gateway([spec], clock=clock, seed=1) as gate:
        # ~20 s of answer, with time for it
        first = await gate.submit(USER, max_tokens=2000, scenario=full, timeout=60.0)
        began = clock.now()
        with pytest.raises(gg.GateError) as caught:
            await (await gate.submit(USER, max_tokens=5, scenario=full))
        waited = clock.now() - began
        first.cancel()
    return type(caught.value).__name__, waited, engine.ledger.snapshot().requests


def test_a_submit_waiting_for_room_gives_up_at_its_deadline() -> None:
    """``submit`` behind a full batcher (``max_pending``) waited for room with no bound: a
    2 s call waited 12.9 s for the long answer ahead of it, then failed at once. It now waits
    for room only until its deadline, and the item is never sent."""
    error, waited, requests = run_virtual(_submit_behind_a_full_batcher)
    assert error == "OverloadedError"
    assert 1.9 <= waited <= 2.1
    assert requests == 1
