"""gate.embed keeps a merging queue per request shape (model, privacy, parameters, headers),
and lets it go once idle. Before, each distinct shape's queue stayed for good: an app passing
``user=`` per end user (as OpenAI asks, for abuse monitoring) or a tenant header grew by
~2 KB per distinct user — 100,000 users, ~200 MB — and ``statistics()`` summed them all."""

from __future__ import annotations

import anyio

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, SimTransport, run_virtual
from gptgate.sim.embeddings import vector_for


def test_idle_queues_go_and_their_counts_stay() -> None:
    async def main() -> None:
        clock = LoopClock()
        backend = gg.Backend(name="emb", base_url="http://127.0.0.1:8000/v1", model="m",
                             embedding_model="e", price=gg.Price(input_per_mtok=0.02),
                             transport=SimTransport(SimEngine("gpu", clock=clock, seed=1)))
        gate = gg.Gateway([backend], clock=clock, max_attempts=1)
        got: dict[int, object] = {}

        async def one(i: int) -> None:
            got[i] = await gate.embed(f"text {i}", user=f"user-{i % 100}")

        async with gate:
            for _ in range(3):  # three waves of 100 users, 2 texts each a wave
                async with anyio.create_task_group() as tg:
                    for i in range(200):
                        tg.start_soon(one, i)
            embedder = gate._embedder
            assert len(embedder._coalescers) == 0
            # each wave: one request per user, merging that user's two texts
            assert embedder.statistics() == {"requests": 300, "inputs": 600}
        assert got == {i: vector_for(f"text {i}", 8) for i in range(200)}

    run_virtual(main)
