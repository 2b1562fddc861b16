"""The life of a job and of the gateway: cancelling a ``map`` or a ``submit`` handle, bad map
items and producers, closing with calls in flight, and one gateway across event loops.

Simulated runs use ``run_virtual`` and a ``LoopClock``: exact, repeatable and fast.
"""

from __future__ import annotations

import math
import threading
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
    async with gateway(backend(script)) as gate:
        results = await gate.map([{"messages": USER}, bad, {"messages": USER}], scenario=scenario)
    assert isinstance(results[0], gg.ChatResult) and isinstance(results[2], gg.ChatResult)
    assert isinstance(results[1], gg.BadRequestError)
    assert "item 1" in str(results[1])


async def test_an_item_with_an_unknown_argument_is_a_failed_item() -> None:
    """A keyword ``chat`` does not take by name and that is no OpenAI parameter either is
    named in the item's error (``private`` and ``tier`` are typed; a misspelt one is not)."""
    script = Script(ok())
    async with gateway(backend(script)) as gate:
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
