"""Two processes waiting on one batch job (an old pod beside its replacement, ``gptgate batch
collect`` beside the script that submitted it) pay for it once, and both get its results.

Found by waiting on one ``job_dir`` from two gateways with ``retry="batch"``: each held the
job's record as it had read it, so the second to reach the retry round created it again —
the process that submitted the job does not look for batches at the provider, only one that
took it up does — and 3 batches were created, not 2 (the retried items paid twice); the
last to save wrote its own retry round over the other's in ``job.json``. With
``retry="live"``, the second found the first sending its live retries and its ``wait()``
raised "in use". Now each takes in what the other recorded before it saves or decides on a
retry round (gptgate/batch_share.py), and waits for the other's sending to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import gptgate as gg
from gptgate.sim import SimBatchPlan
from tests.test_batch import Sim, _items, _run

FAILING = SimBatchPlan(complete_after_s=600, fail_rate=0.2)


async def _both(first: gg.BatchJob, second: gg.BatchJob, first_first: bool) -> list[Any]:
    out: dict[str, list[Any]] = {}

    async def wait(name: str, job: gg.BatchJob) -> None:
        out[name] = await job.wait()

    async with anyio.create_task_group() as tasks:
        for name, job in (("a", first), ("b", second))[:: 1 if first_first else -1]:
            tasks.start_soon(wait, name, job)
    assert [type(r) for r in out["a"]] == [type(r) for r in out["b"]]
    return out["a"]


@pytest.mark.parametrize("submitter_first", [True, False])
def test_a_retry_round_is_created_once(tmp_path: Path, submitter_first: bool) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as one, sim.gate() as two:
            submitted = await one.batch(_items(100), job_dir=tmp_path, retry="batch")
            taken_up = await two.batch(_items(100), job_dir=tmp_path, retry="batch")
            results = await _both(submitted, taken_up, submitter_first)
            assert sum(isinstance(r, gg.ChatResult) for r in results) >= 92
            assert submitted.batch_ids == taken_up.batch_ids
        assert (sim.batches.creates, sim.batches.uploads) == (2, 2)
        record = json.loads((tmp_path / "job.json").read_text())
        assert [p["batch_id"] for p in record["parts"]] == submitted.batch_ids
        assert [p["round"] for p in record["parts"]] == [0, 1]

    _run(body, FAILING)


def test_live_retries_are_sent_once_and_the_other_waits_for_them(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as one, sim.gate() as two:
            submitted = await one.batch(_items(100), job_dir=tmp_path, retry="live")
            taken_up = await two.batch(_items(100), job_dir=tmp_path, retry="live")
            results = await _both(submitted, taken_up, True)  # before: "in use" raised
            assert all(isinstance(r, gg.ChatResult) for r in results)
            sent_live = sum(r.scenario != "batch" for r in results)
        assert sim.batches.creates == 1 and sent_live > 0
        assert sim.engine.ledger.snapshot().requests == sent_live  # each sent once

    _run(body, FAILING)
