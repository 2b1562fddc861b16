"""A simulated Anthropic batch cancelled part-way has no expired items: what ran before the
cancel succeeded or errored, the rest is ``canceled``, as at Anthropic (and as the simulated
OpenAI batch already had it). Before, ``expire_rate`` applied to a cancelled batch's run
items too: a client saw ``RequestTimeout`` ("the 24 h window ended") in a job cancelled an
hour in."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import gptgate as gg
from gptgate.sim import SimBatchPlan
from tests.test_batch_providers import Claude, _claude

ITEMS = [{"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 10}
         for i in range(200)]


def test_a_cancelled_anthropic_batch_has_no_expired_items(tmp_path: Path) -> None:
    async def body(sim: Claude) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(ITEMS, job_dir=tmp_path, poll_s=60)
            await sim.clock.sleep(600)  # half its run
            await job.cancel()
            results = await job.wait()
        kinds = Counter(type(r).__name__ for r in results)
        assert kinds["ChatResult"] > 0 and kinds["BatchCancelledError"] > 0, kinds
        assert "RequestTimeout" not in kinds, kinds
        assert job.status == "cancelled"
        assert not any(isinstance(r, gg.RequestTimeout) for r in results)

    _claude(body, SimBatchPlan(complete_after_s=1200, expire_rate=0.3, fail_rate=0.05))
