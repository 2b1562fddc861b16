"""A batch job collected again (the nightly script re-run after it crashed writing its output,
``gptgate batch collect`` run twice) does not store its answers in the response cache again.
Before, each collection stored every answer anew: a fresh ``ttl_s`` for answers generated
long before (served past their TTL), over answers refreshed live since (``cache="refresh"``
replaced by the batch's older one). Over the simulator's Batch API in virtual time."""

from __future__ import annotations

from pathlib import Path

import gptgate as gg
from tests.test_batch import Sim, _run
from tests.test_batch_cache import _deterministic


def test_a_job_collected_again_stores_nothing_again(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        cache = gg.ResponseCache(ttl_s=1_000)
        items = _deterministic(5)
        async with sim.gate(response_cache=cache) as gate:
            job = await gate.batch(items, job_dir=tmp_path / "job", poll_s=30)
            await job.wait()  # the answers stored, their hour starts now
            assert cache.statistics().stored == 5
            await gate.clock.sleep(900)
            again = await gate.batch(items, job_dir=tmp_path / "job", poll_s=30)
            assert again.resumed
            await again.wait()  # the same results, nothing stored again
            assert cache.statistics().stored == 5
            await gate.clock.sleep(200)  # 1,100 s after the answers were stored
            requests = sim.engine.ledger.snapshot().requests
            live = await gate.chat(**items[0])
            assert not live.from_cache, "served 1,100 s after it was stored, ttl_s=1,000"
            assert sim.engine.ledger.snapshot().requests == requests + 1

    _run(body)
