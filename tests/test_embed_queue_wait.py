"""An embeddings request waits in the backend's queue as long as its callers' deadline, as a
chat call does — not the HTTP client's ``pool_timeout``.

A GPU backend serving chat and embeddings with ``concurrency=1``: a chat call holds the
permit for two minutes. ``gate.embed`` behind it waited 10 s (``pool_timeout``), took an
``httpx2.PoolTimeout`` for a backend failure, went to the back of the queue on each retry, and
ended in ``RequestTimeout`` while the chat calls queued with it were served.
"""

from __future__ import annotations

from typing import Any

import anyio

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, run_virtual
from gptgate.sim.embeddings import vector_for

from .test_embed import DIMS, Recording

HOLD_S = 120.0


def _gate(clock: LoopClock, **gateway: Any) -> tuple[gg.Gateway, Recording]:
    recording = Recording(SimEngine("gpu", clock=clock, seed=1))
    backend = gg.Backend(
        name="gpu", base_url="http://127.0.0.1:8000/v1", model="chat-model",
        embedding_model="text-embedding-3-small", concurrency=1, transport=recording,
    )
    return gg.Gateway([backend], clock=clock, **gateway), recording


def test_an_embed_queued_behind_a_long_call_waits_for_it_not_the_pool_timeout() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, recording = _gate(clock)
        got: list[Any] = []
        async with gate:

            @gate.guard()
            async def long_call() -> None:  # the permit, held two minutes
                await clock.sleep(HOLD_S)

            async def embed() -> None:
                got.append(await gate.embed("query"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(long_call)
                await clock.sleep(1.0)
                tg.start_soon(embed)
            stats = gate.stats()["gpu"]
        assert got == [vector_for("query", DIMS)]
        assert recording.sent == [["query"]]
        assert (stats.retries, stats.failures) == (0, 0)

    run_virtual(main)


def test_an_embed_queued_past_its_own_timeout_is_a_deadline_timeout() -> None:
    async def main() -> None:
        clock = LoopClock()
        gate, recording = _gate(clock)
        seen: list[BaseException] = []
        async with gate:

            @gate.guard()
            async def long_call() -> None:
                await clock.sleep(HOLD_S)

            async def embed() -> None:
                try:
                    await gate.embed("query", timeout=60.0)
                except gg.GateError as error:
                    seen.append(error)
                seen_at.append(clock.now())

            seen_at: list[float] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(long_call)
                await clock.sleep(1.0)
                tg.start_soon(embed)
        assert len(seen) == 1 and isinstance(seen[0], gg.RequestTimeout), seen
        assert seen[0].deadline
        assert 60.0 <= seen_at[0] <= 62.0
        assert recording.sent == []

    run_virtual(main)
