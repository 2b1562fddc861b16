"""A batch job under the dollar budget: refused as a job before anything is sent, and its
retry round asks for room only once the first round's answers are booked.

Found by running a job with ``retry="batch"`` under ``Budget(usd_per_hour=0.1)``: the job
held its first round's dearest outcome ($0.042) until ``wait()`` ended, so the retry round
asked for room beside it — under ``throttle`` the held $0.042 filled the 300 s pace window
($0.0083) for good and ``wait()`` never returned; under ``raise`` (a budget of $0.043)
``wait()`` raised ``BudgetExceededError``, the 94 answers collected were returned to no one,
and the $0.042 stayed reserved, refusing every later call. Now each round is booked (and its
hold let go) as it is collected; a retry round the budget refuses ends its items in
``BudgetExceededError`` naming what the batch answered, and the answers are returned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import gptgate as gg
from gptgate.batch_openai import OpenAIBatches
from gptgate.sim import SimBatchPlan
from tests.test_batch import Crash, Sim, _items, _run

FAILING = SimBatchPlan(complete_after_s=600, fail_rate=0.2)
HOURS = 3600.0


def _waiting(gate: gg.Gateway) -> int:
    status = gate.budget_status()
    return status.waiting if status is not None else 0


def _spent_is_booked(gate: gg.Gateway) -> None:
    status = gate.budget_status()
    assert status is not None and status.reserved_usd == 0
    entry = gate.ledger.entries["oa"]
    assert status.spent_usd == pytest.approx(entry.cost_usd) and entry.cost_usd > 0


@pytest.mark.parametrize("retry", ["batch", "live"])
def test_a_retry_round_under_throttle_ends_and_answers(tmp_path: Path, retry: str) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.1)) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path, retry=retry)
            with anyio.fail_after(3 * HOURS):  # virtual time: before, for ever
                results = await job.wait()
            failed = [r for r in results if not isinstance(r, gg.ChatResult)]
            # the retry round fails 20% again at the simulated provider, none refused here
            assert len(failed) <= 8 and not any(
                isinstance(r, gg.BudgetExceededError) for r in failed), failed
            _spent_is_booked(gate)
        assert sim.batches.creates == (2 if retry == "batch" else 1)

    _run(body, FAILING)


def test_a_retry_round_beside_the_jobs_own_hold_is_not_refused(tmp_path: Path) -> None:
    """Under ``raise``: the retry round needs the room its failed items held; it was asked
    beside the whole first round's hold, refused, and the answers collected lost."""

    async def body(sim: Sim) -> None:
        budget = gg.Budget(usd_per_hour=0.043, on_exceed="raise")
        async with sim.gate(budget=budget) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path, retry="batch")
            results = await job.wait()  # before: BudgetExceededError, $0.042 held for good
            failed = [r for r in results if not isinstance(r, gg.ChatResult)]
            assert len(failed) <= 8 and not any(
                isinstance(r, gg.BudgetExceededError) for r in failed), failed
            _spent_is_booked(gate)
        assert sim.batches.creates == 2

    _run(body, FAILING)


def test_a_retry_round_the_budget_refuses_loses_no_answer(tmp_path: Path) -> None:
    """A job taken up after a restart holds its estimate without asking (it was submitted
    under the budget of then); the budget was lowered since, and leaves its retry round no
    room."""

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.05, on_exceed="raise")) as gate:
            await gate.batch(_items(100), job_dir=tmp_path, retry="batch")  # then it stops
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.035, on_exceed="raise")) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path, retry="batch")
            assert job.resumed
            results = await job.wait()
            answered = [r for r in results if isinstance(r, gg.ChatResult)]
            refused = [r for r in results if isinstance(r, gg.BudgetExceededError)]
            assert len(answered) + len(refused) == 100 and refused and len(answered) > 70
            assert all("not sent again" in r.message and "the batch answered:" in r.message
                       and "server had an error" in r.message for r in refused)
            _spent_is_booked(gate)
            assert gate.ledger.entries["oa"].batch_cost_usd == pytest.approx(
                sum(r.cost_usd for r in answered))
            assert job.counts == gg.BatchCounts(100, len(answered), len(refused))
        assert sim.batches.creates == 1

    _run(body, FAILING)


def test_a_job_dearer_than_the_budget_is_refused_as_a_job(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.02, on_exceed="raise")) as gate:
            with pytest.raises(gg.BudgetExceededError) as refused:
                await gate.batch(_items(100), job_dir=tmp_path / "all")
            message = refused.value.message
            assert message.startswith("batch job of 100 items refused by the dollar budget")
            assert "split it into jobs of at most 48 items" in message
            status = gate.budget_status()
            assert status is not None and status.reserved_usd == 0
            assert not (tmp_path / "all" / "job.json").exists()
            job = await gate.batch(_items(48), job_dir=tmp_path / "part")  # as advised
            assert all(isinstance(r, gg.ChatResult) for r in await job.wait())
        assert (sim.batches.uploads, sim.batches.creates) == (1, 1)

    _run(body)


def test_a_process_that_dies_in_its_retry_round_leaves_the_booking_to_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first round is booked (and its hold let go) before the retry round is created;
    the process dies creating it. The bookings die with it (its ledger), so the process that
    takes the job up holds and books both rounds, once, and nothing is created twice."""
    create = OpenAIBatches.create

    async def crash_at_round_one(self: OpenAIBatches, file_id: str, meta: Any,
                                 data: bytes) -> str:
        made = await create(self, file_id, meta, data)
        if meta["gptgate_part"].endswith("-r1-p0"):
            raise Crash("after the retry round's create")
        return made

    async def body(sim: Sim) -> None:
        with monkeypatch.context() as patch:
            patch.setattr(OpenAIBatches, "create", crash_at_round_one)
            async with sim.gate(budget=gg.Budget(usd_per_hour=0.1)) as gate:
                job = await gate.batch(_items(100), job_dir=tmp_path, retry="batch")
                with pytest.raises(Crash):
                    await job.wait()
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.1)) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path, retry="batch")
            status = gate.budget_status()
            assert status is not None and status.reserved_usd > job.estimate(range(100))
            with anyio.fail_after(3 * HOURS):
                results = await job.wait()
            answered = [r for r in results if isinstance(r, gg.ChatResult)]
            assert len(answered) >= 92
            _spent_is_booked(gate)
            entry = gate.ledger.entries["oa"]
            assert entry.batch_cost_usd == pytest.approx(sum(r.cost_usd for r in answered))
        assert sim.batches.creates == 2
        async with sim.gate() as gate:  # settled: collected again, booked no more
            again = await gate.batch(_items(100), job_dir=tmp_path, retry="batch")
            assert len(await again.wait()) == 100
            assert gate.ledger.entries["oa"].batch_cost_usd == 0
        assert sim.batches.creates == 2

    _run(body, FAILING)


def test_a_job_cancelled_while_its_retry_round_waits_for_room_creates_no_round(
    tmp_path: Path,
) -> None:
    """The first round's spend fills the pace window ($0.0083 of $0.1/h in 300 s): the
    retry round waits for room, and the job is cancelled meanwhile. Before, the round was
    uploaded and created once room came, then cancelled."""

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.1)) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path, retry="batch")
            results: list[Any] = []

            async def wait() -> None:
                results.extend(await job.wait())

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(wait)
                while not _waiting(gate):  # the retry round, for room
                    await anyio.sleep(5)
                await job.cancel()
            assert len(results) == 100
            _spent_is_booked(gate)
        assert (sim.batches.creates, sim.batches.uploads) == (1, 1)

    _run(body, FAILING)
