"""``gate.batch``: offline jobs through the Batch API (files, batches, results), durable in a
``job_dir``, billed at the batch price — over the simulator's Batch API in virtual time."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import gptgate as gg
from gptgate.batch_openai import OpenAIBatches
from gptgate.sim import LoopClock, SimBatches, SimBatchPlan, SimEngine, run_virtual
from gptgate.testing import sim_backend

PRICE = gg.Price(input_per_mtok=2.0, output_per_mtok=8.0)


def _items(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Prompts that grow with the index: a result's input tokens say which item it answers."""
    return [
        {"messages": [{"role": "user", "content": "word " * (4 * (i + 1))}], "max_tokens": 40}
        for i in range(start, start + n)
    ]


class Sim:
    """One simulated provider (engine + Batch API) that outlives the gateways using it, as
    a provider outlives the client processes that crash and restart."""

    def __init__(self, plan: SimBatchPlan | None = None, **backend: Any) -> None:
        self.clock = LoopClock()
        options = {"price": PRICE, **backend}
        self.backend, self.engine = sim_backend("hosted", name="oa", clock=self.clock, **options)
        self.batches = SimBatches(self.engine, plan or SimBatchPlan(complete_after_s=600)).attach()

    def gate(self, **options: Any) -> gg.Gateway:
        return gg.Gateway([self.backend], clock=self.clock, **options)


def _run(
    body: Callable[[Sim], Awaitable[Any]], plan: SimBatchPlan | None = None, **backend: Any
) -> Any:
    """``body(sim)`` in virtual time (the simulator's clock lives in the loop)."""

    async def main() -> Any:
        return await body(Sim(plan, **backend))

    return run_virtual(main)


def _in_order(results: list[Any]) -> None:
    """Every item answered, each by the answer to its own prompt (prompts grow with index)."""
    assert all(isinstance(r, gg.ChatResult) for r in results), [
        r for r in results if not isinstance(r, gg.ChatResult)
    ][:3]
    sizes = [r.usage.input_tokens for r in results]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


# -- a job end to end ---------------------------------------------------------------------------


def test_a_thousand_items_round_trip_in_input_order(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(1000), backend="oa", job_dir=tmp_path / "job", poll_s=30)
            assert job.status == "validating" and job.counts == gg.BatchCounts(1000, 0, 0)
            results = await job.wait()
            _in_order(results)
            assert job.status == "completed" and job.counts == gg.BatchCounts(1000, 1000, 0)
            assert all(r.backend == "oa" and r.streamed is False for r in results)
            assert await job.wait() == results  # collected once, kept
        assert (sim.batches.creates, sim.batches.uploads) == (1, 1)
        record = json.loads((tmp_path / "job" / "job.json").read_text())
        assert record["parts"][0]["status"] == "completed" and record["items"] == 1000

    _run(body)


def test_a_job_larger_than_the_provider_limit_is_split_and_merged(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            limits = gg.BatchLimits(max_requests=30, max_bytes=10**9)
            job = await gate.batch(_items(100), job_dir=tmp_path / "a", limits=limits)
            assert len(job.batch_ids) == 4
            _in_order(await job.wait())
            small = gg.BatchLimits(max_requests=1000, max_bytes=2000)  # ~ a dozen lines a file
            job = await gate.batch(_items(40), job_dir=tmp_path / "b", limits=small)
            assert len(job.batch_ids) > 2
            _in_order(await job.wait())
        assert sim.batches.creates == 4 + len(job.batch_ids)

    _run(body)


# -- durability -----------------------------------------------------------------------------


class Crash(Exception):
    """The process dies here."""


def _crash_at(monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    """Kill the submitting 'process' after recording the intent (before the upload), after
    the upload (before its file id is recorded) or after the create (before the batch id is
    recorded): the three windows a crash can leave."""
    upload, create = OpenAIBatches.upload, OpenAIBatches.create

    async def crash_upload(self: OpenAIBatches, *args: Any) -> str:
        if point == "upload":
            await upload(self, *args)
        raise Crash(point)

    async def crash_create(self: OpenAIBatches, *args: Any) -> str:
        await create(self, *args)
        raise Crash(point)

    if point in ("intent", "upload"):
        monkeypatch.setattr(OpenAIBatches, "upload", crash_upload)
    else:
        monkeypatch.setattr(OpenAIBatches, "create", crash_create)


@pytest.mark.parametrize("point", ["intent", "upload", "create"])
def test_a_crash_at_any_point_resumes_without_submitting_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    job_dir = tmp_path / "nightly"

    async def body(sim: Sim) -> None:
        with monkeypatch.context() as patch:
            _crash_at(patch, point)
            async with sim.gate() as gate:
                with pytest.raises(Crash):
                    await gate.batch(_items(50), job_dir=job_dir)
        assert (job_dir / "job.json").exists()  # the intent was recorded before any send
        assert sim.batches.creates == (1 if point == "create" else 0)
        async with sim.gate() as gate:  # the process restarted
            job = await gate.batch(_items(50), job_dir=job_dir)
            assert job.resumed
            _in_order(await job.wait())
        async with sim.gate() as gate:  # and again, after the job ended: nothing is sent
            again = await gate.batch(_items(50), job_dir=job_dir)
            _in_order(await again.wait())
        assert (sim.batches.creates, sim.batches.uploads) == (1, 1)

    _run(body)


def test_different_items_in_a_used_job_dir_are_refused(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            await gate.batch(_items(10), job_dir=tmp_path)
            with pytest.raises(gg.BadRequestError, match="another job"):
                await gate.batch(_items(10, start=1), job_dir=tmp_path)
            with pytest.raises(gg.BadRequestError, match="another job"):
                await gate.batch(_items(10), job_dir=tmp_path, temperature=0.5)
        assert sim.batches.creates == 1

    _run(body)


@pytest.mark.parametrize(
    ("items", "options", "match"),
    [
        ([{"max_tokens": 3}], {}, "item 0 needs 'messages'"),
        (["hi"], {}, "item 0 must be a dict"),
        ([{"messages": [{"role": "user", "content": "x"}], "stream": True}], {}, "streamed"),
        ([], {}, "at least one item"),
        (_items(1), {"retry": "twice"}, "retry must be"),
        (_items(1), {"poll_s": 0}, "poll_s"),
        (_items(1), {"backend": "nope"}, "unknown backend"),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(
    tmp_path: Path, items: list[Any], options: dict[str, Any], match: str
) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match=match):
                await gate.batch(items, job_dir=tmp_path, **options)
        assert (sim.batches.uploads, sim.batches.creates) == (0, 0)
        assert not (tmp_path / "job.json").exists()

    _run(body)


# -- failed, expired and cancelled items ----------------------------------------------------


def test_failed_and_expired_items_end_in_typed_errors(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(300), job_dir=tmp_path)
            results = await job.wait()
        failed = [r for r in results if isinstance(r, gg.BackendError)]
        expired = [r for r in results if isinstance(r, gg.RequestTimeout)]
        assert failed and expired and all(r.status == 500 for r in failed)
        assert all("expired" in r.message for r in expired)
        ok = [r for r in results if isinstance(r, gg.ChatResult)]
        assert len(ok) + len(failed) + len(expired) == 300
        assert job.status == "expired"
        assert job.counts == gg.BatchCounts(300, len(ok), 300 - len(ok))
        assert gate.ledger.entries["oa"].calls_failed == 300 - len(ok)

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.1, expire_rate=0.1, seed=3))


def test_cancel_keeps_what_ran_and_ends_the_rest_cancelled(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(200), job_dir=tmp_path, poll_s=60)
            await sim.clock.sleep(400)
            await job.cancel()
            assert job.status == "cancelling"
            results = await job.wait()
        assert job.status == "cancelled"
        done = [r for r in results if isinstance(r, gg.ChatResult)]
        cancelled = [r for r in results if isinstance(r, gg.BatchCancelledError)]
        assert 60 <= len(done) <= 100 and len(done) + len(cancelled) == 200
        assert not cancelled[0].retryable

    _run(body, SimBatchPlan(complete_after_s=1000))


def test_failed_items_retried_live_are_billed_once_more_at_the_live_price(
    tmp_path: Path,
) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(200), job_dir=tmp_path, retry="live")
            results = await job.wait()
            entry = gate.ledger.entries["oa"]
        _in_order(results)
        batches = sim.batches
        retried = 200 - batches.billed_requests
        assert retried > 10 and sim.engine.ledger.snapshot().ok == retried
        assert entry.batch_requests == batches.billed_requests
        batch_usage = gg.Usage(
            input_tokens=batches.billed_input_tokens, output_tokens=batches.billed_output_tokens
        )
        live_usd = sim.engine.ledger.snapshot().billed_usd(PRICE)
        assert entry.batch_cost_usd == pytest.approx(PRICE.cost(batch_usage) * 0.5)
        assert entry.cost_usd == pytest.approx(entry.batch_cost_usd + live_usd)
        assert sum(r.cost_usd for r in results) == pytest.approx(entry.cost_usd)

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.05, expire_rate=0.03, seed=5))


def test_tasks_awaiting_one_job_share_one_collection(tmp_path: Path) -> None:
    """A job handed to several tasks (a web handler and a progress reporter) is collected,
    retried and booked once: every waiter gets the same results, and no waiter is refused by
    the job's own send lock while another one sends the live retries."""

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate, anyio.create_task_group() as tg:
            job = await gate.batch(_items(100), job_dir=tmp_path, retry="live")
            got: list[list[Any]] = []

            async def waiter() -> None:
                got.append(await job.wait())

            for _ in range(3):
                tg.start_soon(waiter)
        entry = gate.ledger.entries["oa"]
        assert len(got) == 3 and all(r == got[0] for r in got[1:])
        _in_order(got[0])
        retried = 100 - sim.batches.billed_requests
        assert retried > 0 and sim.engine.ledger.snapshot().ok == retried  # sent live once
        assert sum(r.cost_usd for r in got[0]) == pytest.approx(entry.cost_usd)

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.05, expire_rate=0.03, seed=5))


def test_failed_items_retried_as_a_batch_go_in_one_more_batch(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(200), job_dir=tmp_path, retry="batch")
            results = await job.wait()
        assert sim.batches.creates == 2 and len(job.batch_ids) == 2
        ok = [r for r in results if isinstance(r, gg.ChatResult)]
        assert len(ok) >= 195  # a tenth failed, a tenth of those failed again
        assert sim.engine.ledger.snapshot().requests == 0  # nothing went live
        record = json.loads((tmp_path / "job.json").read_text())
        assert [p["round"] for p in record["parts"]] == [0, 1]

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.1, seed=7))


# -- money ----------------------------------------------------------------------------------


@pytest.mark.parametrize("discount", [0.5, 0.25])
def test_the_ledger_books_batch_tokens_at_the_batch_price(tmp_path: Path, discount: float) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            results = await (await gate.batch(_items(100), job_dir=tmp_path)).wait()
            entry = gate.ledger.entries["oa"]
        billed = gg.Usage(
            input_tokens=sim.batches.billed_input_tokens,
            output_tokens=sim.batches.billed_output_tokens,
        )
        assert entry.batch_requests == 100 and entry.calls_ok == 100
        assert entry.batch_tokens == billed.total_tokens
        assert entry.input_tokens == billed.input_tokens
        assert entry.batch_cost_usd == pytest.approx(PRICE.cost(billed) * discount)
        assert entry.cost_usd == pytest.approx(entry.batch_cost_usd)
        assert sum(r.cost_usd for r in results) == pytest.approx(entry.batch_cost_usd)

    _run(body, batch_discount=discount)


def test_the_budget_holds_the_estimate_until_the_results_settle_it(tmp_path: Path) -> None:

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=5.0)) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path / "a")
            status = gate.budget_status()
            assert status is not None
            assert status.reserved_usd == pytest.approx(job.estimate(range(100)))
            assert status.spent_usd == 0
            await job.wait()
            status = gate.budget_status()
            assert status is not None and status.reserved_usd == 0
            assert status.spent_usd == pytest.approx(gate.ledger.entries["oa"].batch_cost_usd)
            # the dearest outcome: every answer runs to its max_tokens here, so equal at most
            assert 0 < status.spent_usd <= job.estimate(range(100)) * (1 + 1e-9)
        async with sim.gate(budget=gg.Budget(usd_per_hour=0.01, on_exceed="raise")) as gate:
            with pytest.raises(gg.BudgetExceededError):
                await gate.batch(_items(100), job_dir=tmp_path / "b")
        assert sim.batches.creates == 1 and not (tmp_path / "b" / "job.json").exists()

    _run(body)


def test_a_table_priced_backends_job_is_held_at_its_batch_price(tmp_path: Path) -> None:
    """``price=None`` on a hosted model the genai-prices table knows: the budget holds the
    job's dearest outcome at the table's batch price (it held $0 and let any job through),
    and the results settle it at what the ledger books."""
    pytest.importorskip("genai_prices")

    async def body(sim: Sim) -> None:
        async with sim.gate(budget=gg.Budget(usd_per_hour=50.0)) as gate:
            job = await gate.batch(_items(100), job_dir=tmp_path / "a")
            status = gate.budget_status()
            assert status is not None
            held = status.reserved_usd
            assert held == pytest.approx(job.estimate(range(100))) and held > 0
            await job.wait()
            status = gate.budget_status()
            assert status is not None and status.reserved_usd == 0
            booked = gate.ledger.entries["oa"].batch_cost_usd
            assert 0 < status.spent_usd == pytest.approx(booked)
            assert status.spent_usd <= held * (1 + 1e-9)
        async with sim.gate(budget=gg.Budget(usd_per_hour=1e-6, on_exceed="raise")) as gate:
            with pytest.raises(gg.BudgetExceededError):
                await gate.batch(_items(100), job_dir=tmp_path / "b")
        assert sim.batches.creates == 1

    _run(body, price=None, provider="openai", base_url="https://api.openai.com/v1",
         model="gpt-4o-mini")


# -- over loopback HTTP ---------------------------------------------------------------------


def test_a_job_over_loopback_http(tmp_path: Path) -> None:
    import anyio

    from gptgate.sim import SimServer

    clock = gg.ScaledClock(2000)
    engine = SimEngine("hosted", clock=clock)
    sim = SimBatches(engine, SimBatchPlan(complete_after_s=120, fail_rate=0.05, seed=2)).attach()

    async def body(base_url: str) -> list[Any]:
        backend = gg.Backend(name="oa", base_url=base_url, model=engine.profile.model,
                             price=PRICE)
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(_items(200), job_dir=tmp_path, poll_s=10)
            return await job.wait()

    with SimServer(engine) as base_url:
        results = anyio.run(body, base_url)
    failed = [r for r in results if not isinstance(r, gg.ChatResult)]
    assert failed and all(isinstance(r, gg.BackendError) and r.status == 500 for r in failed)
    _in_order([r for r in results if isinstance(r, gg.ChatResult)])
    assert sim.creates == 1 and len(results) == 200


def test_a_resumed_job_neither_resends_live_retries_nor_books_them_twice(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            first = await (await gate.batch(_items(200), job_dir=tmp_path, retry="live")).wait()
        sent = sim.engine.ledger.snapshot().requests
        assert sent > 5
        async with sim.gate() as gate:  # a later process collects the same job again
            job = await gate.batch(_items(200), job_dir=tmp_path, retry="live")
            again = await job.wait()
            entry = gate.ledger.entries["oa"]
            assert (entry.cost_usd, entry.batch_requests, entry.calls_ok) == (0, 0, 0)
        assert sim.engine.ledger.snapshot().requests == sent
        assert [r.text for r in again] == [r.text for r in first]  # type: ignore[union-attr]
        assert sim.batches.creates == 1

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.05, seed=11))


# -- a real process, SIGKILLed ------------------------------------------------------------------

_CHILD = """
import os, signal, sys
import anyio
import gptgate as gg
from gptgate.batch_openai import OpenAIBatches
from tests.test_batch import PRICE, _items

base_url, job_dir, point, model = sys.argv[1:5]
real = getattr(OpenAIBatches, point)

async def then_die(self, *args):
    await real(self, *args)
    os.kill(os.getpid(), signal.SIGKILL)   # no finally, no flush: the process is gone

setattr(OpenAIBatches, point, then_die)

async def main():
    backend = gg.Backend(name="oa", base_url=base_url, model=model, price=PRICE)
    async with gg.Gateway([backend]) as gate:
        await gate.batch(_items(300), job_dir=job_dir)

anyio.run(main)
"""


@pytest.mark.parametrize("point", ["upload", "create"])
def test_a_process_sigkilled_mid_submit_resumes_with_one_batch(tmp_path: Path, point: str) -> None:
    import os
    import signal
    import subprocess
    import sys

    import anyio

    from gptgate.sim import SimServer

    clock = gg.ScaledClock(2000)
    engine = SimEngine("hosted", clock=clock)
    sim = SimBatches(engine, SimBatchPlan(complete_after_s=120)).attach()
    root = Path(__file__).resolve().parent.parent

    async def resume(base_url: str) -> list[Any]:
        backend = gg.Backend(name="oa", base_url=base_url, model=engine.profile.model, price=PRICE)
        async with gg.Gateway([backend], clock=clock) as gate:
            job = await gate.batch(_items(300), job_dir=tmp_path, poll_s=10)
            assert job.resumed
            return await job.wait()

    with SimServer(engine) as base_url:
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, base_url, str(tmp_path), point, engine.profile.model],
            env={**os.environ, "PYTHONPATH": str(root)}, cwd=root, capture_output=True,
            timeout=60,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
        assert (sim.uploads, sim.creates) == (1, 1 if point == "create" else 0)
        results = anyio.run(resume, base_url)
    _in_order(results)
    assert (sim.uploads, sim.creates) == (1, 1)


def test_a_crash_during_live_retries_does_not_resend_the_answers_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gptgate.batch_store import JobStore

    keep = JobStore.append_live
    kept: list[int] = []

    def keep_then_die(self: JobStore, index: int, result: gg.ChatResult) -> None:
        keep(self, index, result)
        kept.append(index)
        if len(kept) == 3:
            raise Crash("during live retries")

    async def body(sim: Sim) -> None:
        with monkeypatch.context() as patch:
            patch.setattr(JobStore, "append_live", keep_then_die)
            async with sim.gate() as gate:
                job = await gate.batch(_items(200), job_dir=tmp_path, retry="live")
                with pytest.raises(Crash):
                    await job.wait()
        async with sim.gate() as gate:
            results = await (await gate.batch(_items(200), job_dir=tmp_path, retry="live")).wait()
        _in_order(results)
        failed = 200 - sim.batches.billed_requests
        # the three kept were not sent again (calls in flight at the crash may have been)
        assert sim.engine.ledger.snapshot().requests <= 2 * failed - 3

    _run(body, SimBatchPlan(complete_after_s=600, fail_rate=0.06, seed=13))


def test_a_job_outliving_its_gateway_says_how_to_take_it_up_again(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            job = await gate.batch(_items(10), job_dir=tmp_path)
        with pytest.raises(gg.GatewayClosedError, match="take it up again"):
            await job.wait()
        async with sim.gate() as gate:
            _in_order(await (await gate.batch(_items(10), job_dir=tmp_path)).wait())
        assert sim.batches.creates == 1

    _run(body)


def test_a_create_whose_answer_was_lost_is_found_not_repeated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 502 after the provider created the batch (the answer lost on the way): the job
    looks the batch up by its metadata before trying again, and finds it."""
    create, upload = OpenAIBatches.create, OpenAIBatches.upload
    calls = {"create": 0, "upload": 0}

    async def create_then_lose(self: OpenAIBatches, *args: Any) -> str:
        calls["create"] += 1
        batch_id = await create(self, *args)
        if calls["create"] == 1:
            raise gg.BackendError("bad gateway", status=502)
        return batch_id

    async def refuse_once(self: OpenAIBatches, *args: Any) -> str:
        calls["upload"] += 1
        if calls["upload"] == 1:
            raise gg.RateLimitedError("slow down", status=429, retry_after=5.0)
        return await upload(self, *args)

    monkeypatch.setattr(OpenAIBatches, "create", create_then_lose)
    monkeypatch.setattr(OpenAIBatches, "upload", refuse_once)

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            _in_order(await (await gate.batch(_items(20), job_dir=tmp_path)).wait())
        assert (sim.batches.uploads, sim.batches.creates) == (1, 1)
        assert calls == {"create": 1, "upload": 2}

    _run(body)


def test_a_second_process_on_a_job_being_sent_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes on one job (an old pod beside its replacement) would both look, find
    nothing and create the batch twice: the one that comes second is refused while the
    first one sends."""
    import functools

    import anyio

    upload = OpenAIBatches.upload
    uploading = anyio.Event()
    go_on = anyio.Event()

    async def slow_upload(self: OpenAIBatches, *args: Any) -> str:
        uploading.set()
        await go_on.wait()
        return await upload(self, *args)

    monkeypatch.setattr(OpenAIBatches, "upload", slow_upload)

    async def body(sim: Sim) -> None:
        async with sim.gate() as first, sim.gate() as second, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(first.batch, _items(10), job_dir=tmp_path))
            await uploading.wait()
            with pytest.raises(gg.BadRequestError, match="in use"):
                await second.batch(_items(10), job_dir=tmp_path)
            go_on.set()
        async with sim.gate() as gate:
            job = await gate.batch(_items(10), job_dir=tmp_path)
            assert job.resumed
            _in_order(await job.wait())
        assert (sim.batches.uploads, sim.batches.creates) == (1, 1)

    _run(body)


def test_every_chat_option_of_an_item_stays_out_of_the_batch_body(tmp_path: Path) -> None:
    """``cache="use"`` in a batch item (a ``gate.map`` item, with ``response_cache=`` on) went
    into the uploaded request body as ``"cache": "use"`` — a parameter OpenAI answers with a
    400 for every item. Each of ``Gateway.chat``'s own options steers the live path only."""
    import inspect

    from gptgate.batch import _LIVE_ONLY

    own = set(inspect.signature(gg.Gateway.chat).parameters) - {"self", "messages", "stream",
                                                                  "params"}
    assert own <= _LIVE_ONLY

    async def body(sim: Sim) -> list[dict[str, Any]]:
        items = [{**item, "cache": "use", "hedge": False} for item in _items(2)]
        async with sim.gate(response_cache=gg.ResponseCache()) as gate:
            job = await gate.batch(items, backend="oa", job_dir=tmp_path)
            _in_order(await job.wait())
        lines = b"".join(f.data for f in sim.batches.files.values() if f.purpose == "batch")
        return [json.loads(line)["body"] for line in lines.splitlines()]

    bodies = _run(body)
    assert len(bodies) == 2 and not any("cache" in b or "hedge" in b for b in bodies)



def refuse_creates_after_the_first(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The provider takes the first batch create and refuses every later one with a 400
    (OpenAI's enqueued-token limit); returns the creates tried, as they come."""
    create = OpenAIBatches.create
    tries: list[str] = []

    async def refuse_after_the_first(self: OpenAIBatches, *args: Any) -> str:
        tries.append("create")
        if len(tries) > 1:
            raise gg.BadRequestError("Enqueued token limit reached for m.", status=400)
        return await create(self, *args)

    monkeypatch.setattr(OpenAIBatches, "create", refuse_after_the_first)
    return tries


def test_a_cancelled_job_never_creates_the_parts_its_submission_left_unsent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three parts; the provider refuses the second create (a 400: OpenAI's enqueued-token
    limit). ``take_up_batch`` reaches the job without sending, ``cancel()`` stops the part that
    runs and ends the two never created; taking the job up again to collect it (``gate.batch``)
    creates nothing: the unsent items end in ``BatchCancelledError``. Before, every take-up
    tried the refused creates again first (and, once the provider took them, ran them)."""
    from gptgate.batch import take_up_batch

    tries = refuse_creates_after_the_first(monkeypatch)
    limits = gg.BatchLimits(max_requests=10, max_bytes=10**9)

    async def body(sim: Sim) -> None:
        async with sim.gate() as gate:
            with pytest.raises(gg.BadRequestError, match="Enqueued"):
                await gate.batch(_items(30), job_dir=tmp_path, limits=limits)
            job = await take_up_batch(gate, _items(30), job_dir=tmp_path)
            assert job.status == "submitting" and len(job.batch_ids) == 1
            await job.cancel()
            assert job.status == "cancelling"
        async with sim.gate() as gate:  # another process collects it
            again = await gate.batch(_items(30), job_dir=tmp_path, limits=limits)
            results = await again.wait()
        assert again.status == "cancelled"
        assert all(isinstance(r, gg.BatchCancelledError) for r in results[10:])
        assert (sim.batches.creates, len(tries)) == (1, 2)
        with pytest.raises(gg.BadRequestError, match="holds no batch job"):
            async with sim.gate() as gate:
                await take_up_batch(gate, _items(3), job_dir=tmp_path / "empty")

    _run(body, SimBatchPlan(complete_after_s=10**6))
