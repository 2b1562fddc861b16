"""Cancelling the task that awaits a ``gate.submit()`` handle cancels the item, as a
cancelled ``gate.chat`` is: an item still waiting for its batch's flush is never sent (and
never billed); one already running is cancelled like a ``gate.chat`` whose caller left (what
the server was sent is billed as for that call). Before, only ``handle.cancel()`` dropped
it: a caller that timed out on ``await handle`` (``move_on_after``, a web request's
timeout) still had its item sent and billed for no one.

The item is cancelled only when no other task still awaits the same handle."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import httpx2
import pytest

import gptgate as gg
from gptgate.batching import ItemCancelledError, ItemHandle, MicroBatcher
from tests.mockbackend import Script, ok

FOREVER = 3600.0
USER = [{"role": "user", "content": "hello"}]


async def _await_then_cancel(handle: ItemHandle[int]) -> None:
    """A task awaits ``handle``; it is cancelled once it is waiting."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(handle.wait)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()


async def test_a_pending_item_whose_awaiter_is_cancelled_is_never_sent() -> None:
    sent: list[int] = []

    async def run(x: int) -> int:
        sent.append(x)
        return x

    async with MicroBatcher(gg.BatchPolicy(max_size=10, max_wait_s=FOREVER), run) as batcher:
        left = await batcher.submit(1)
        kept = await batcher.submit(2)
        await _await_then_cancel(left)
        assert left.done() and isinstance(left.exception(), ItemCancelledError)
        assert batcher.statistics().pending == 1
    assert sent == [2]  # the close flushed the other item only
    assert await kept == 2


async def test_a_running_item_whose_awaiter_is_cancelled_is_cancelled() -> None:
    started = anyio.Event()
    unwound: list[bool] = []

    async def run(x: int) -> int:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            unwound.append(True)
        raise AssertionError

    async with MicroBatcher(gg.BatchPolicy(max_size=1, max_wait_s=0.0), run) as batcher:
        handle = await batcher.submit(1)
        await started.wait()
        await _await_then_cancel(handle)
        await anyio.wait_all_tasks_blocked()
        assert unwound == [True]
        assert isinstance(handle.exception(), ItemCancelledError)


async def test_another_awaiter_keeps_the_item() -> None:
    async def run(x: int) -> int:
        return x * 10

    async with MicroBatcher(gg.BatchPolicy(max_size=10, max_wait_s=FOREVER), run) as batcher:
        handle = await batcher.submit(3)
        results: list[int] = []

        async def keep() -> None:
            results.append(await handle)

        async with anyio.create_task_group() as outer:
            outer.start_soon(keep)
            await _await_then_cancel(handle)  # one of two awaiters left
            assert not handle.done()
            assert batcher.statistics().pending == 1
            batcher._flush("size")
    assert results == [30]


async def test_gate_submit_awaiter_timing_out_sends_nothing() -> None:
    script = Script(ok("hi"))
    backend = gg.Backend(
        name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="k", concurrency=2,
        timeout=5.0, transport=httpx2.MockTransport(script), price=gg.Price(
            input_per_mtok=1.0, output_per_mtok=1.0),
    )
    slow = gg.Scenario(name="slow", batch=gg.BatchPolicy(max_size=50, max_wait_s=FOREVER))
    async with gg.Gateway([backend], seed=1) as gate:
        handle = await gate.submit(USER, scenario=slow, max_tokens=5)
        with anyio.CancelScope() as scope:
            scope.cancel()  # the caller's timeout, already past
            await handle
        assert scope.cancelled_caught
        assert handle.done()
        with pytest.raises(ItemCancelledError):
            handle.result()
    assert script.requests == []
    assert gate.ledger.total().cost_usd == 0.0 and gate.ledger.total().attempts == 0
