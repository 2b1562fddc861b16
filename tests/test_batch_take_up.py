"""Taking a batch job up without sending anything, from where a user looks for it: the
gateway (``gate.take_up_batch``, ``SyncGateway.take_up_batch``) — with the keyword arguments
the job was submitted with.

``gate.batch(items, job_dir=..., max_tokens=60)`` adds ``max_tokens`` to every item, and the
job's identity is the hash of the requests it made. ``take_up_batch`` took no such arguments:
a job submitted with any could not be taken up ("these items differ"), so its parts running
at the provider could not be seen or cancelled without sending the parts left unsent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gptgate as gg
from gptgate.batch_openai import OpenAIBatches
from gptgate.sim import SimBatches, SimBatchPlan, SimEngine, SimServer, get_profile

from .test_batch import Sim, _run, refuse_creates_after_the_first


def _prompts(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"ticket {i}"}]} for i in range(n)]


def test_a_job_submitted_with_common_arguments_is_taken_up_on_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries = refuse_creates_after_the_first(monkeypatch)
    limits = gg.BatchLimits(max_requests=10, max_bytes=10**9)

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="Enqueued"):
                await gate.batch(_prompts(20), job_dir=tmp_path, limits=limits, max_tokens=60,
                                 temperature=0)
        async with sim.gate() as gate:  # the next process: look, cancel, send nothing
            with pytest.raises(gg.BadRequestError, match="differ"):
                await gate.take_up_batch(_prompts(20), job_dir=tmp_path)  # not the same job
            # the same arguments as the gate.batch call, limits= included
            job = await gate.take_up_batch(_prompts(20), job_dir=tmp_path, limits=limits,
                                           max_tokens=60, temperature=0)
            assert job.resumed and job.status == "submitting" and len(job.batch_ids) == 1
            await job.cancel()
        assert (sim.batches.creates, len(tries)) == (1, 2)  # nothing sent by the take-up

    _run(body, SimBatchPlan(complete_after_s=10**6))


def test_a_sync_gateway_takes_a_job_up_over_loopback_sending_nothing(tmp_path: Path) -> None:
    profile = get_profile("gpu").model_copy(update={"rpm": None, "tpm": None})
    sim = SimEngine(profile, clock=gg.ScaledClock(50.0), seed=5)
    batches = SimBatches(sim, SimBatchPlan(complete_after_s=10**6)).attach()
    items = _prompts(5)
    with SimServer(sim, time_scale=50.0) as base_url:
        backend = gg.Backend(name="sim", base_url=base_url, model="m")
        with gg.SyncGateway([backend], clock=gg.ScaledClock(50.0)) as gate:
            first = gate.batch(items, job_dir=tmp_path, poll_s=5.0, max_tokens=20)
            with pytest.raises(gg.BadRequestError, match="holds no batch job"):
                gate.take_up_batch(items, job_dir=tmp_path / "empty")
            job = gate.take_up_batch(items, job_dir=tmp_path, max_tokens=20)
            assert isinstance(job, gg.SyncBatchJob) and job.resumed and job.id == first.id
            assert job.status == "validating"
            job.cancel()
            assert job.status == "cancelling"
    assert (batches.creates, batches.uploads) == (1, 1)


def test_a_finished_job_taken_up_later_counts_what_the_provider_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gptgate batch status DIR`` the morning after: the job ended while its process was
    gone (or was collected), and a new process takes it up. Its parts are recorded as ended,
    so the poll skipped them and the counts were this process's last poll — none: "completed
    — 0/5 answered". A part that ended is read from the provider once per process."""
    items = [{**item, "max_tokens": 20} for item in _prompts(5)]
    retrieved: list[str] = []
    retrieve = OpenAIBatches.retrieve

    async def counted(self: OpenAIBatches, batch_id: str) -> Any:
        retrieved.append(batch_id)
        return await retrieve(self, batch_id)

    monkeypatch.setattr(OpenAIBatches, "retrieve", counted)

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            results = await (await gate.batch(items, job_dir=tmp_path, poll_s=5.0)).wait()
            assert all(isinstance(r, gg.ChatResult) for r in results)
        async with sim.gate() as gate:  # the next process
            job = await gate.take_up_batch(items, job_dir=tmp_path)
            assert await job.refresh() == "completed"
            assert job.counts == gg.BatchCounts(total=5, completed=5, failed=0)
            polls = len(retrieved)
            await job.refresh()  # an ended part is read once, not at every poll
            assert len(retrieved) == polls
        assert (sim.batches.creates, sim.batches.uploads) == (1, 1)

    _run(body, SimBatchPlan(complete_after_s=60))
