"""A job cancelled by another process (``gptgate batch cancel DIR`` from a shell while the
nightly script's ``wait()`` polls) stays cancelled: the waiting process neither overwrites
the record's ``cancelled`` with its own copy nor sends a retry round. Before, its next save
(a part's new status) wrote ``cancelled: false`` back, and ``retry="batch"`` then created
one more batch for the failed items of a job the operator had stopped."""

from __future__ import annotations

import json
from pathlib import Path

import gptgate as gg
from gptgate.batch import take_up_batch
from gptgate.sim import SimBatchPlan
from tests.test_batch import Sim, _items, _run


def test_a_job_cancelled_by_another_process_sends_no_retry_round(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        items = _items(40)
        async with sim.gate() as gate:
            job = await gate.batch(items, job_dir=tmp_path, retry="batch", poll_s=1000)
            await gate.clock.sleep(700)  # the batch ended, some items failed (500s)
            elsewhere = await take_up_batch(gate, items, job_dir=tmp_path, retry="batch")
            await elsewhere.refresh()
            await elsewhere.cancel()  # the operator stops the job: nothing more is sent
            results = await job.wait()
        assert sim.batches.creates == 1, "a retry round was created after the cancel"
        assert json.loads((tmp_path / "job.json").read_text())["cancelled"] is True
        failed = [r for r in results if not isinstance(r, gg.ChatResult)]
        assert failed and all(r.status == 500 for r in failed)

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.2, seed=3))
