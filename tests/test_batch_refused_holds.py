"""A job refused for an item too big for any batch file leaves nothing of the dollar budget
held: before, its estimate stayed reserved for the gateway's life, so every later call waited
(``throttle``) or was refused (``raise``) for money never spent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from gptgate.sim import LoopClock, SimBatches, SimBatchPlan, run_virtual
from gptgate.testing import sim_backend

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)


def _items(sizes: list[int]) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": "word " * n}], "max_tokens": 40}
            for n in sizes]


def test_an_item_too_big_for_a_batch_file_leaves_no_budget_held(tmp_path: Path) -> None:
    async def main() -> None:
        clock = LoopClock()
        backend, engine = sim_backend("hosted", name="oa", clock=clock, price=PRICE)
        batches = SimBatches(engine, SimBatchPlan(complete_after_s=60)).attach()
        limits = gg.BatchLimits(max_requests=100, max_bytes=2_000)
        async with gg.Gateway([backend], clock=clock,
                              budget=gg.Budget(usd_per_hour=5.0)) as gate:
            with pytest.raises(gg.BadRequestError, match="item 1 is"):
                await gate.batch(_items([5, 1_000, 5]), job_dir=tmp_path / "a", limits=limits)
            status = gate.budget_status()
            assert status is not None and status.reserved_usd == 0
            assert batches.uploads == 0 and batches.creates == 0
            assert not (tmp_path / "a" / "job.json").exists()
            # the same job_dir takes the job once the item fits: nothing was recorded
            job = await gate.batch(_items([5, 10, 5]), job_dir=tmp_path / "a", limits=limits)
            assert all(isinstance(r, gg.ChatResult) for r in await job.wait())
            status = gate.budget_status()
            assert status is not None and status.reserved_usd == 0

    run_virtual(main)
