"""A dropped SDK stream is found by a collection of the young generations, not only by the
full one gptgate runs at most every 5 s.

The SDK's stream object sits in a reference cycle (openai's ``AsyncStream`` and its own
generator): dropped, neither it nor the response nor gptgate's facade is freed until the cycle
collector runs, so a weak-reference finalizer on any of them cannot hand the permit back at
once (the first test shows it). A stream dropped soon after it was opened — a preview — is
still in the young generations, whose collection is cheap (their size is bounded by the
collector's thresholds, not by the heap): gptgate now runs one at each probe. A worker loop
of 15 previews on a limit of 3 waited 4.6 s for every third permit (16.9 s in all); now
7.3 s, one wait over 1 s (a stream promoted to the old generation while it was alive waits
for the full collection, as before).
"""

from __future__ import annotations

import gc
import weakref

import anyio
import anyio.lowlevel

from gptgate.testing import LoopClock, run_virtual
from tests.streamserver import GeneratingServer, sdk_on
from tests.test_sdk_stream_abandon import _first_words, _gate

ASK = [{"role": "user", "content": "hi"}]


async def _weakly_held() -> tuple[bool, bool]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg)
        async with _gate(server, clock) as gate:
            client = sdk_on(gate, timeout=60)
            gc.disable()
            try:
                stream = await client.chat.completions.create(
                    model="m", stream=True, messages=ASK  # type: ignore[arg-type]
                )
                facade = weakref.ref(stream.response.stream)
                async for _ in stream:
                    break
                del stream
                for _ in range(5):
                    await anyio.lowlevel.checkpoint()
                without_collection = facade() is not None
                gc.collect()
                after_collection = facade() is not None
            finally:
                gc.enable()
        tg.cancel_scope.cancel()
    return without_collection, after_collection


def test_a_dropped_sdk_stream_is_freed_only_by_the_cycle_collector() -> None:
    assert run_virtual(_weakly_held) == (True, False)


async def _worker_loop() -> tuple[list[float], int]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg)
        async with _gate(server, clock) as gate:  # a limit of 3
            client = sdk_on(gate, timeout=60)
            waits: list[float] = []
            for _ in range(15):
                began = clock.now()
                await _first_words(client)
                waits.append(clock.now() - began)
            held = gate.stats()["b"].in_flight
        tg.cancel_scope.cancel()
    return waits, held


def test_a_worker_loop_of_previews_gets_its_permits_from_young_collections() -> None:
    waits, held = run_virtual(_worker_loop)
    assert sum(waits) < 10.0, waits  # 16.9 s before
    assert sum(wait > 1.0 for wait in waits) <= 1, waits  # three 4.6 s waits before
    assert held <= 3
